//! Small metadata files of a log directory, each one checksummed record:
//! the recovery checkpoint, the log start offset, the DeleteRecords entries
//! kept for catch-up, the truncation intent, and the cleaner's checkpoint
//! and kept delete horizon.
//!
//! A record is `magic (4) | payload | crc32fast(magic | payload) (4)`. A file
//! that is missing, short, or fails its checksum reads as absent, so a torn
//! write can only make recovery do more work, never trust bad data.

use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use crate::error::{Result, WalError};
use crate::types::DeleteRecordsEntry;

pub const CHECKPOINT: &str = "recovery-checkpoint";
pub const LOG_START: &str = "log-start-offset";
pub const TRUNCATE_INTENT: &str = "truncate-intent";
pub const CLEANER_CHECKPOINT: &str = "cleaner-offset-checkpoint";
pub const DELETE_RECORDS_ENTRIES: &str = "delete-records-entries";
pub const CLEANER_HORIZON: &str = "cleaner-delete-horizon";

const CHECKPOINT_MAGIC: &[u8; 4] = b"HXCP";
const LOG_START_MAGIC: &[u8; 4] = b"HXLS";
const INTENT_MAGIC: &[u8; 4] = b"HXTI";
const CLEANER_MAGIC: &[u8; 4] = b"HXCC";
const DELETE_RECORDS_MAGIC: &[u8; 4] = b"HXDR";
const CLEANER_HORIZON_MAGIC: &[u8; 4] = b"HXCH";

pub(crate) fn encode(magic: &[u8; 4], fields: &[u64]) -> Vec<u8> {
    let mut b = Vec::with_capacity(8 + fields.len() * 8);
    b.extend_from_slice(magic);
    for f in fields {
        b.extend_from_slice(&f.to_le_bytes());
    }
    let crc = crc32fast::hash(&b);
    b.extend_from_slice(&crc.to_le_bytes());
    b
}

pub(crate) fn decode(magic: &[u8; 4], raw: &[u8], n: usize) -> Option<Vec<u64>> {
    let len = 4 + n * 8 + 4;
    if raw.len() < len || &raw[0..4] != magic {
        return None;
    }
    let crc = u32::from_le_bytes(raw[len - 4..len].try_into().ok()?);
    if crc != crc32fast::hash(&raw[..len - 4]) {
        return None;
    }
    Some(
        raw[4..len - 4]
            .chunks_exact(8)
            .map(|c| u64::from_le_bytes(c.try_into().unwrap_or([0; 8])))
            .collect(),
    )
}

pub(crate) fn read(path: &Path) -> Result<Option<Vec<u8>>> {
    match fs::read(path) {
        Ok(b) => Ok(Some(b)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(WalError::io("read", path, e)),
    }
}

/// Writes `bytes` to `path` via a temporary file, fsync and rename, then
/// fsyncs the directory: after return the new content is durable and a crash
/// at any point leaves either the old or the new file.
pub fn write_durably(dir: &Path, name: &str, bytes: &[u8]) -> Result<()> {
    let path = dir.join(name);
    let tmp = dir.join(format!("{name}.tmp"));
    let mut f = File::create(&tmp).map_err(|e| WalError::io("create", &tmp, e))?;
    f.write_all(bytes)
        .map_err(|e| WalError::io("write", &tmp, e))?;
    f.sync_all().map_err(|e| WalError::io("fsync", &tmp, e))?;
    fs::rename(&tmp, &path).map_err(|e| WalError::io("rename", &path, e))?;
    sync_dir(dir)
}

pub fn sync_dir(dir: &Path) -> Result<()> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| WalError::io("fsync directory", dir, e))
}

pub fn remove(dir: &Path, name: &str) -> Result<()> {
    let path = dir.join(name);
    match fs::remove_file(&path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(WalError::io("remove", &path, e)),
    }
}

/// Where recovery may stop re-verifying: everything before `position` in
/// segment `segment_base` (and every earlier segment) was whole when written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Checkpoint {
    pub segment_base: i64,
    pub position: u64,
    pub entry_count: u64,
    pub next_offset: i64,
    pub max_timestamp: i64,
    /// Sparse index records on disk that describe `[0, position)`.
    pub offset_records: u64,
    pub time_records: u64,
    /// Every byte it covers was flushed before it was written (always in
    /// `Fsync`; at close, roll and truncation in `ReplicationOnly`). Damage
    /// inside what a durable checkpoint covers is refused, never cut as a
    /// torn tail (ADR 0001). Checkpoints from before this field read as
    /// not durable.
    pub durable: bool,
}

impl Checkpoint {
    const FIELDS: usize = 8;

    pub fn path(dir: &Path) -> PathBuf {
        dir.join(CHECKPOINT)
    }

    pub fn read(dir: &Path) -> Result<Option<Checkpoint>> {
        let Some(raw) = read(&Checkpoint::path(dir))? else {
            return Ok(None);
        };
        Ok(decode(CHECKPOINT_MAGIC, &raw, Self::FIELDS)
            .or_else(|| decode(CHECKPOINT_MAGIC, &raw, Self::FIELDS - 1))
            .map(|f| Checkpoint {
                segment_base: f[0] as i64,
                position: f[1],
                entry_count: f[2],
                next_offset: f[3] as i64,
                max_timestamp: f[4] as i64,
                offset_records: f[5],
                time_records: f[6],
                durable: f.get(7) == Some(&1),
            }))
    }

    /// Overwrites the checkpoint in place (one small write, no fsync: a lost or
    /// torn checkpoint only makes recovery re-verify more).
    pub fn write(&self, dir: &Path) -> Result<()> {
        let b = encode(
            CHECKPOINT_MAGIC,
            &[
                self.segment_base as u64,
                self.position,
                self.entry_count,
                self.next_offset as u64,
                self.max_timestamp as u64,
                self.offset_records,
                self.time_records,
                u64::from(self.durable),
            ],
        );
        let path = Checkpoint::path(dir);
        let f = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .map_err(|e| WalError::io("open", &path, e))?;
        f.write_all_at(&b, 0)
            .map_err(|e| WalError::io("write", &path, e))
    }
}

/// The log start offset set by `delete_records_before`.
pub fn read_log_start(dir: &Path) -> Result<Option<i64>> {
    Ok(read(&dir.join(LOG_START))?
        .and_then(|raw| decode(LOG_START_MAGIC, &raw, 1))
        .map(|f| f[0] as i64))
}

pub fn write_log_start(dir: &Path, offset: i64) -> Result<()> {
    write_durably(dir, LOG_START, &encode(LOG_START_MAGIC, &[offset as u64]))
}

/// The DeleteRecords entries kept for catch-up (`log/delete_records.rs`):
/// `count | (index, offset) * count`, oldest first.
pub fn read_delete_records_entries(dir: &Path) -> Result<Vec<DeleteRecordsEntry>> {
    let Some(raw) = read(&dir.join(DELETE_RECORDS_ENTRIES))? else {
        return Ok(Vec::new());
    };
    let count = decode_count(&raw).unwrap_or(0);
    let Some(fields) = decode(DELETE_RECORDS_MAGIC, &raw, 1 + 2 * count) else {
        return Ok(Vec::new());
    };
    Ok(fields[1..]
        .chunks_exact(2)
        .map(|f| DeleteRecordsEntry {
            index: f[0],
            offset: f[1] as i64,
        })
        .collect())
}

/// The count a record of entries starts with, bounded so that a garbage
/// count cannot ask for more fields than the record's bytes hold.
fn decode_count(raw: &[u8]) -> Option<usize> {
    let count = u64::from_le_bytes(raw.get(4..12)?.try_into().ok()?);
    let count = usize::try_from(count).ok()?;
    (count <= raw.len() / 16).then_some(count)
}

pub fn write_delete_records_entries(dir: &Path, entries: &[DeleteRecordsEntry]) -> Result<()> {
    let mut fields = Vec::with_capacity(1 + 2 * entries.len());
    fields.push(entries.len() as u64);
    for e in entries {
        fields.extend([e.index, e.offset as u64]);
    }
    let bytes = encode(DELETE_RECORDS_MAGIC, &fields);
    write_durably(dir, DELETE_RECORDS_ENTRIES, &bytes)
}

/// The cleaner checkpoint (ADR 0027 §5): the first offset not cleaned
/// yet. Segments starting below it may hold offset gaps. Absent or
/// unreadable: no segment was cleaned, and a cleaned one is then refused
/// as damaged by the strict checks, never served wrong.
pub fn read_cleaner_checkpoint(dir: &Path) -> Result<Option<i64>> {
    Ok(read(&dir.join(CLEANER_CHECKPOINT))?
        .and_then(|raw| decode(CLEANER_MAGIC, &raw, 1))
        .map(|f| f[0] as i64))
}

pub fn write_cleaner_checkpoint(dir: &Path, offset: i64) -> Result<()> {
    write_durably(
        dir,
        CLEANER_CHECKPOINT,
        &encode(CLEANER_MAGIC, &[offset as u64]),
    )
}

/// What the cleaner's last pass left behind in the cleaned segments
/// (ADR 0027 §6): the latest delete horizon of the tombstones and markers
/// it kept, so that they go once it passes even if nothing is written
/// after a restart.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeptHorizon {
    /// No file, or a damaged one: the cleaned segments may hold anything
    /// (a pass must look; it decides from each batch's own horizon, so
    /// not knowing only costs a pass, never a wrong deletion).
    Unknown,
    /// The last pass kept nothing with a horizon still ahead.
    Nothing,
    /// The latest horizon kept, wall-clock ms.
    At(i64),
}

pub fn read_cleaner_horizon(dir: &Path) -> Result<KeptHorizon> {
    Ok(read(&dir.join(CLEANER_HORIZON))?
        .and_then(|raw| decode(CLEANER_HORIZON_MAGIC, &raw, 2))
        .map_or(KeptHorizon::Unknown, |f| match f[0] {
            0 => KeptHorizon::Nothing,
            _ => KeptHorizon::At(f[1] as i64),
        }))
}

/// Written durably (temporary file, fsync, rename, fsync of the
/// directory) after a pass's swaps; a crash before leaves the previous
/// file, whose horizon then either is early (a pass that finds nothing
/// due) or late (those tombstones wait for the next pass), never wrong.
pub fn write_cleaner_horizon(dir: &Path, kept: KeptHorizon) -> Result<()> {
    let fields = match kept {
        KeptHorizon::Unknown => return remove(dir, CLEANER_HORIZON).and_then(|()| sync_dir(dir)),
        KeptHorizon::Nothing => [0, 0],
        KeptHorizon::At(at) => [1, at as u64],
    };
    write_durably(
        dir,
        CLEANER_HORIZON,
        &encode(CLEANER_HORIZON_MAGIC, &fields),
    )
}

/// A truncation that must be completed: keep segment `segment_base` up to
/// `position` bytes and `entry_count` entries, delete every later segment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TruncateIntent {
    pub segment_base: i64,
    pub position: u64,
    pub entry_count: u64,
}

impl TruncateIntent {
    pub fn read(dir: &Path) -> Result<Option<TruncateIntent>> {
        Ok(read(&dir.join(TRUNCATE_INTENT))?
            .and_then(|raw| decode(INTENT_MAGIC, &raw, 3))
            .map(|f| TruncateIntent {
                segment_base: f[0] as i64,
                position: f[1],
                entry_count: f[2],
            }))
    }

    pub fn write(&self, dir: &Path) -> Result<()> {
        write_durably(
            dir,
            TRUNCATE_INTENT,
            &encode(
                INTENT_MAGIC,
                &[self.segment_base as u64, self.position, self.entry_count],
            ),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn checkpoint_round_trips_and_a_flip_reads_as_absent() {
        let dir = tempfile::tempdir().unwrap();
        let cp = Checkpoint {
            segment_base: 100,
            position: 4096,
            entry_count: 7,
            next_offset: 150,
            max_timestamp: -1,
            offset_records: 1,
            time_records: 1,
            durable: true,
        };
        cp.write(dir.path()).unwrap();
        assert_eq!(Checkpoint::read(dir.path()).unwrap(), Some(cp));
        // A checkpoint written before the durable flag existed reads as not
        // durable (its bytes may not have been flushed).
        let old = encode(CHECKPOINT_MAGIC, &[100, 4096, 7, 150, u64::MAX, 1, 1]);
        fs::write(Checkpoint::path(dir.path()), old).unwrap();
        assert_eq!(
            Checkpoint::read(dir.path()).unwrap(),
            Some(Checkpoint {
                durable: false,
                ..cp
            })
        );
        cp.write(dir.path()).unwrap();
        let path = Checkpoint::path(dir.path());
        let mut raw = fs::read(&path).unwrap();
        raw[9] ^= 1;
        fs::write(&path, raw).unwrap();
        assert_eq!(Checkpoint::read(dir.path()).unwrap(), None);
    }

    #[test]
    fn intent_and_log_start_round_trip() {
        let dir = tempfile::tempdir().unwrap();
        let intent = TruncateIntent {
            segment_base: 5,
            position: 9,
            entry_count: 2,
        };
        intent.write(dir.path()).unwrap();
        assert_eq!(TruncateIntent::read(dir.path()).unwrap(), Some(intent));
        write_log_start(dir.path(), 77).unwrap();
        assert_eq!(read_log_start(dir.path()).unwrap(), Some(77));
        remove(dir.path(), TRUNCATE_INTENT).unwrap();
        assert_eq!(TruncateIntent::read(dir.path()).unwrap(), None);
    }

    #[test]
    fn the_kept_horizon_round_trips_and_a_missing_or_damaged_file_is_unknown() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(
            read_cleaner_horizon(dir.path()).unwrap(),
            KeptHorizon::Unknown
        );
        for kept in [KeptHorizon::At(1_700_000_000_123), KeptHorizon::Nothing] {
            write_cleaner_horizon(dir.path(), kept).unwrap();
            assert_eq!(read_cleaner_horizon(dir.path()).unwrap(), kept);
        }
        write_cleaner_horizon(dir.path(), KeptHorizon::At(42)).unwrap();
        let path = dir.path().join(CLEANER_HORIZON);
        let mut raw = fs::read(&path).unwrap();
        raw[13] ^= 1;
        fs::write(&path, raw).unwrap();
        assert_eq!(
            read_cleaner_horizon(dir.path()).unwrap(),
            KeptHorizon::Unknown
        );
        write_cleaner_horizon(dir.path(), KeptHorizon::Unknown).unwrap();
        assert!(!path.exists());
    }
}
