//! The file side of log compaction (ADR 0027 §4): a cleaned segment,
//! written beside the segments it replaces as `<base>.<ext>.cleaned`, is
//! swapped in under a durable intent, so a crash at any step leaves either
//! every old segment or the one new segment, never a mix.
//!
//! The swap, in order (each step durable before the next):
//! 1. the four `.cleaned` files are fsynced;
//! 2. `compact-intent` (new base, its `.log` and `.entries` lengths, the old
//!    bases) is written durably;
//! 3. each old segment's files are renamed to `<name>.deleted`;
//! 4. each `.cleaned` file is renamed to its live name; the directory is
//!    fsynced;
//! 5. the `.deleted` files are unlinked, then the intent; the directory is
//!    fsynced.
//!
//! Recovery ([`recover_swap`], before a log is opened): without an intent,
//! `.cleaned` files are an uncommitted pass and go; with one, the new
//! segment wins when its files are whole (steps 3-5 are finished),
//! otherwise the old files come back. `.deleted` files without an intent
//! cannot come from this order: the intent was damaged, and recovery
//! refuses the directory (ADR 0001: refuse, never guess) rather than
//! delete either side.
//!
//! This module knows files only. `recover_swap` runs first in every
//! recovery; `commit_swap` is called with the log closed (helix-server's
//! offline `compact::pass`) or by `replace.rs`, which also swaps the
//! readers' segment list of an open log.

use std::fs;
use std::path::{Path, PathBuf};

use crate::error::{Result, WalError};
use crate::fault::{self, Point};
use crate::meta;

/// The intent file of a swap in progress.
pub const COMPACT_INTENT: &str = "compact-intent";
const INTENT_MAGIC: &[u8; 4] = b"HXCI";
/// Most segments one swap replaces (bounds the intent record).
pub const MAX_SWAPPED_SEGMENTS: usize = 4096;

/// The files of one segment, in the order the swap moves them.
const EXTENSIONS: [&str; 4] = ["log", "entries", "index", "timeindex"];
const CLEANED: &str = "cleaned";
const DELETED: &str = "deleted";

/// What a swap replaces and what it expects of the new segment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SwapIntent {
    /// Base offset of the new segment: the first old segment's.
    pub new_base: i64,
    /// Lengths of the new `.log` and `.entries`, checked on recovery.
    pub log_len: u64,
    pub entries_len: u64,
    /// The segments replaced, in offset order; the first is `new_base`.
    pub old_bases: Vec<i64>,
}

/// What recovery did with a swap it found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SwapRecovery {
    /// No swap was in progress (leftover `.cleaned` files were removed).
    None,
    /// The new segment is in place; the old ones are gone.
    RolledForward,
    /// The old segments are in place; the new one is gone.
    RolledBack,
}

/// `dir/<base:020>.<ext>`.
#[cfg_attr(not(test), allow(dead_code))]
pub fn live_path(dir: &Path, base: i64, ext: &str) -> PathBuf {
    dir.join(format!("{base:020}.{ext}"))
}

/// Where the cleaner writes the new segment's file `ext`.
pub fn cleaned_path(dir: &Path, base: i64, ext: &str) -> PathBuf {
    dir.join(format!("{base:020}.{ext}.{CLEANED}"))
}

fn deleted_path(dir: &Path, base: i64, ext: &str) -> PathBuf {
    dir.join(format!("{base:020}.{ext}.{DELETED}"))
}

impl SwapIntent {
    fn encode(&self) -> Vec<u8> {
        let mut fields = vec![
            self.new_base as u64,
            self.log_len,
            self.entries_len,
            self.old_bases.len() as u64,
        ];
        fields.extend(self.old_bases.iter().map(|b| *b as u64));
        meta::encode(INTENT_MAGIC, &fields)
    }

    /// The intent in `dir`; None when absent or unreadable (torn, flipped).
    pub fn read(dir: &Path) -> Result<Option<SwapIntent>> {
        let Some(raw) = meta::read(&dir.join(COMPACT_INTENT))? else {
            return Ok(None);
        };
        let count = raw
            .get(28..36)
            .and_then(|b| b.try_into().ok())
            .map(u64::from_le_bytes)
            .and_then(|n| usize::try_from(n).ok())
            .filter(|n| (1..=MAX_SWAPPED_SEGMENTS).contains(n));
        let Some(count) = count else { return Ok(None) };
        Ok(
            meta::decode(INTENT_MAGIC, &raw, 4 + count).map(|f| SwapIntent {
                new_base: f[0] as i64,
                log_len: f[1],
                entries_len: f[2],
                old_bases: f[4..].iter().map(|b| *b as i64).collect(),
            }),
        )
    }
}

fn crash_point(dir: &Path, step: u8) -> Result<()> {
    fault::hit(dir, Point::CompactSwap(step)).map_err(|e| WalError::io("compaction swap", dir, e))
}

fn rename(from: &Path, to: &Path) -> Result<()> {
    fs::rename(from, to).map_err(|e| WalError::io("rename", from, e))
}

fn remove_file(path: &Path) -> Result<()> {
    match fs::remove_file(path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(WalError::io("remove", path, e)),
    }
}

fn len_of(path: &Path) -> Option<u64> {
    fs::metadata(path).ok().map(|m| m.len())
}

/// Swaps the cleaned segment described by `intent` (its four `.cleaned`
/// files already written) in for the old ones. On an error the directory
/// is left for [`recover_swap`] to settle at the next open.
pub fn commit_swap(dir: &Path, intent: &SwapIntent) -> Result<()> {
    if intent.old_bases.first() != Some(&intent.new_base)
        || intent.old_bases.len() > MAX_SWAPPED_SEGMENTS
        || !intent.old_bases.windows(2).all(|w| w[0] < w[1])
    {
        return Err(WalError::io(
            "compaction swap",
            dir,
            std::io::Error::new(std::io::ErrorKind::InvalidInput, "bad swap intent"),
        ));
    }
    for ext in EXTENSIONS {
        let path = cleaned_path(dir, intent.new_base, ext);
        fs::File::open(&path)
            .and_then(|f| f.sync_all())
            .map_err(|e| WalError::io("fsync", &path, e))?;
    }
    crash_point(dir, 1)?;
    meta::write_durably(dir, COMPACT_INTENT, &intent.encode())?;
    crash_point(dir, 2)?;
    roll_forward(dir, intent)
}

/// Steps 3-5, from wherever a previous attempt stopped.
fn roll_forward(dir: &Path, intent: &SwapIntent) -> Result<()> {
    for &base in &intent.old_bases {
        for ext in EXTENSIONS {
            let live = live_path(dir, base, ext);
            // The new segment's live name is the first old one's: once its
            // `.cleaned` file is renamed, the live file is the new one.
            let is_new = base == intent.new_base && !cleaned_path(dir, base, ext).exists();
            if live.exists() && !is_new {
                rename(&live, &deleted_path(dir, base, ext))?;
            }
        }
        crash_point(dir, 3)?;
    }
    for ext in EXTENSIONS {
        let cleaned = cleaned_path(dir, intent.new_base, ext);
        if cleaned.exists() {
            rename(&cleaned, &live_path(dir, intent.new_base, ext))?;
        }
    }
    meta::sync_dir(dir)?;
    crash_point(dir, 4)?;
    for &base in &intent.old_bases {
        for ext in EXTENSIONS {
            remove_file(&deleted_path(dir, base, ext))?;
        }
    }
    crash_point(dir, 5)?;
    meta::remove(dir, COMPACT_INTENT)?;
    meta::sync_dir(dir)
}

/// Removes the `.cleaned` files of a pass that will not be swapped in.
pub fn discard_cleaned(dir: &Path, base: i64) -> Result<()> {
    for ext in EXTENSIONS {
        remove_file(&cleaned_path(dir, base, ext))?;
    }
    Ok(())
}

/// Settles a swap a crash interrupted; see the module comment.
pub fn recover_swap(dir: &Path) -> Result<SwapRecovery> {
    let names: Vec<String> = fs::read_dir(dir)
        .map_err(|e| WalError::io("read directory", dir, e))?
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .collect();
    let with = |suffix: &str| -> Vec<PathBuf> {
        names
            .iter()
            .filter(|n| n.ends_with(&format!(".{suffix}")))
            .map(|n| dir.join(n))
            .collect()
    };
    let Some(intent) = SwapIntent::read(dir)? else {
        if let Some(deleted) = with(DELETED).first() {
            return Err(WalError::Corrupt {
                file: dir.join(COMPACT_INTENT),
                position: 0,
                reason: format!(
                    "{} is left from a compaction swap but its intent is missing or damaged",
                    deleted.display()
                ),
            });
        }
        let cleaned = with(CLEANED);
        for path in &cleaned {
            remove_file(path)?;
        }
        if !cleaned.is_empty() {
            meta::sync_dir(dir)?;
        }
        return Ok(SwapRecovery::None);
    };
    if new_segment_whole(dir, &intent) {
        roll_forward(dir, &intent)?;
        return Ok(SwapRecovery::RolledForward);
    }
    // The new files were fsynced before the intent, so this is damage to
    // them; every old file is still there, live or renamed.
    for &base in &intent.old_bases {
        for ext in EXTENSIONS {
            let deleted = deleted_path(dir, base, ext);
            if deleted.exists() {
                rename(&deleted, &live_path(dir, base, ext))?;
            }
        }
    }
    for ext in EXTENSIONS {
        remove_file(&cleaned_path(dir, intent.new_base, ext))?;
    }
    meta::remove(dir, COMPACT_INTENT)?;
    meta::sync_dir(dir)?;
    Ok(SwapRecovery::RolledBack)
}

/// Every file of the new segment is present, `.cleaned` or already live,
/// and its `.log` and `.entries` have the lengths the intent recorded.
fn new_segment_whole(dir: &Path, intent: &SwapIntent) -> bool {
    EXTENSIONS.iter().all(|ext| {
        let cleaned = cleaned_path(dir, intent.new_base, ext);
        let path = if cleaned.exists() {
            cleaned
        } else {
            live_path(dir, intent.new_base, ext)
        };
        match (*ext, len_of(&path)) {
            (_, None) => false,
            ("log", Some(len)) => len == intent.log_len,
            ("entries", Some(len)) => len == intent.entries_len,
            _ => true,
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Two old segments (0 and 100) and a cleaned one at 0, each file
    /// holding its own name so the test can tell them apart.
    fn setup(dir: &Path) -> SwapIntent {
        for base in [0i64, 100] {
            for ext in EXTENSIONS {
                fs::write(live_path(dir, base, ext), format!("old {base} {ext}")).unwrap();
            }
        }
        for ext in EXTENSIONS {
            fs::write(cleaned_path(dir, 0, ext), format!("new {ext}")).unwrap();
        }
        SwapIntent {
            new_base: 0,
            log_len: "new log".len() as u64,
            entries_len: "new entries".len() as u64,
            old_bases: vec![0, 100],
        }
    }

    /// (file name, content) of every file, sorted.
    type Listing = Vec<(String, String)>;

    fn listing(dir: &Path) -> Listing {
        let mut out: Vec<_> = fs::read_dir(dir)
            .unwrap()
            .map(|e| {
                let e = e.unwrap();
                let name = e.file_name().into_string().unwrap();
                (name, fs::read_to_string(e.path()).unwrap_or_default())
            })
            .collect();
        out.sort();
        out
    }

    fn old_state() -> Listing {
        let mut out = Vec::new();
        for base in [0i64, 100] {
            for ext in EXTENSIONS {
                out.push((format!("{base:020}.{ext}"), format!("old {base} {ext}")));
            }
        }
        out.sort();
        out
    }

    fn new_state() -> Listing {
        let mut out: Vec<_> = EXTENSIONS
            .iter()
            .map(|ext| (format!("{:020}.{ext}", 0), format!("new {ext}")))
            .collect();
        out.sort();
        out
    }

    #[test]
    fn a_swap_replaces_the_old_segments_with_the_new_one() {
        let dir = tempfile::tempdir().unwrap();
        let intent = setup(dir.path());
        commit_swap(dir.path(), &intent).unwrap();
        assert_eq!(listing(dir.path()), new_state());
        assert_eq!(recover_swap(dir.path()).unwrap(), SwapRecovery::None);
        assert_eq!(listing(dir.path()), new_state());
    }

    #[test]
    fn a_crash_at_any_step_recovers_to_all_old_or_all_new() {
        // Step 3 is hit once per old segment: skip 0 and 1 both crash in it.
        let plan: [(u8, u32, Listing); 6] = [
            (1, 0, old_state()),
            (2, 0, new_state()),
            (3, 0, new_state()),
            (3, 1, new_state()),
            (4, 0, new_state()),
            (5, 0, new_state()),
        ];
        for (step, skip, expected) in plan {
            let dir = tempfile::tempdir().unwrap();
            let intent = setup(dir.path());
            fault::inject(dir.path(), Point::CompactSwap(step), libc::EIO, skip, 1);
            assert!(commit_swap(dir.path(), &intent).is_err(), "step {step}");
            fault::clear(dir.path());
            recover_swap(dir.path()).unwrap();
            assert_eq!(listing(dir.path()), expected, "crash at step {step}/{skip}");
            // Recovering again changes nothing.
            recover_swap(dir.path()).unwrap();
            assert_eq!(listing(dir.path()), expected, "step {step}/{skip}, twice");
        }
    }

    #[test]
    fn a_new_segment_damaged_before_the_swap_rolls_back() {
        let dir = tempfile::tempdir().unwrap();
        let intent = setup(dir.path());
        fault::inject(dir.path(), Point::CompactSwap(3), libc::EIO, 0, 1);
        assert!(commit_swap(dir.path(), &intent).is_err());
        fault::clear(dir.path());
        // The cleaned log lost bytes: its length no longer matches.
        fs::write(cleaned_path(dir.path(), 0, "log"), "ne").unwrap();
        assert_eq!(recover_swap(dir.path()).unwrap(), SwapRecovery::RolledBack);
        assert_eq!(listing(dir.path()), old_state());
    }

    #[test]
    fn deleted_files_without_a_readable_intent_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let intent = setup(dir.path());
        fault::inject(dir.path(), Point::CompactSwap(4), libc::EIO, 0, 1);
        assert!(commit_swap(dir.path(), &intent).is_err());
        fault::clear(dir.path());
        let path = dir.path().join(COMPACT_INTENT);
        let mut raw = fs::read(&path).unwrap();
        raw[6] ^= 0x01;
        fs::write(&path, raw).unwrap();
        let before = listing(dir.path());
        assert!(matches!(
            recover_swap(dir.path()),
            Err(WalError::Corrupt { .. })
        ));
        assert_eq!(listing(dir.path()), before, "nothing was touched");
    }

    #[test]
    fn the_intent_round_trips() {
        let dir = tempfile::tempdir().unwrap();
        let intent = SwapIntent {
            new_base: 7,
            log_len: 1 << 33,
            entries_len: 480,
            old_bases: vec![7, 90, 200],
        };
        meta::write_durably(dir.path(), COMPACT_INTENT, &intent.encode()).unwrap();
        assert_eq!(SwapIntent::read(dir.path()).unwrap(), Some(intent));
    }
}
