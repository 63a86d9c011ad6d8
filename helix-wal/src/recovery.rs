//! Opening a log directory: finish an interrupted truncation, trust what the
//! recovery checkpoint covers, re-verify only the tail after it, and cut a
//! torn or corrupt tail back to the last whole entry.
//!
//! Work is proportional to the tail: segments before the checkpoint's are
//! checked for consistency from their first and last entry records only; the
//! checkpoint's segment is re-verified from the checkpoint position; later
//! segments (rolled after it) from their start. Trusted bytes are CRC-checked
//! lazily, the first time a read reaches them (see `segment/verified.rs`).

use std::fs::{self, File};
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::Arc;

use crate::active::ActiveSegment;
use crate::batch;
use crate::compaction::SwapRecovery;
use crate::config::LogConfig;
use crate::entry_index::{self, EntryRecord, RECORD_LEN};
use crate::error::{Result, WalError};
use crate::index::{self, SparseIndex};
use crate::meta::{self, Checkpoint, TruncateIntent};
use crate::segment::{self, Segment, SegmentState};
use crate::types::{DamagedRange, RaftPosition, Recovery};

mod scan;
use scan::scan;

/// What recovery hands to `PartitionLog::open`.
pub struct Recovered {
    pub sealed: Vec<Arc<Segment>>,
    pub active: ActiveSegment,
    pub log_start_offset: i64,
    pub last: Option<RaftPosition>,
    pub report: Recovery,
}

/// What the next entry must continue.
#[derive(Debug, Clone, Copy)]
struct Expect {
    last: Option<RaftPosition>,
    next_offset: i64,
}

impl Expect {
    fn accepts(&self, r: &EntryRecord) -> bool {
        let pos_ok = self
            .last
            .is_none_or(|l| r.pos.index == l.index + 1 && r.pos.term >= l.term);
        pos_ok && r.first_offset == self.next_offset && r.next_offset >= r.first_offset
    }
}

/// Lists segment base offsets and removes leftovers of interrupted writes.
fn list(dir: &Path) -> Result<Vec<i64>> {
    let mut bases = Vec::new();
    let mut others = Vec::new();
    for entry in fs::read_dir(dir).map_err(|e| WalError::io("list", dir, e))? {
        let entry = entry.map_err(|e| WalError::io("list", dir, e))?;
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.ends_with(".tmp") || name.ends_with(".cut") {
            meta::remove(dir, &name)?;
        } else if let Some(stem) = name.strip_suffix(".log") {
            if let Ok(base) = stem.parse::<i64>() {
                bases.push(base);
            }
        } else if let Some((stem, _)) = name.split_once('.')
            && stem.len() == 20
            && let Ok(base) = stem.parse::<i64>()
        {
            others.push((base, name));
        }
    }
    bases.sort_unstable();
    // Index files whose log is gone (retention crashed half way) go too.
    for (base, name) in others {
        if bases.binary_search(&base).is_err() {
            meta::remove(dir, &name)?;
        }
    }
    Ok(bases)
}

pub fn delete_segment_files(dir: &Path, base: i64) -> Result<()> {
    // The log goes first: without it the rest is an orphan recovery removes.
    for path in [
        segment::log_path(dir, base),
        entry_index::path_for(dir, base),
        index::offset_path(dir, base),
        index::time_path(dir, base),
    ] {
        match fs::remove_file(&path) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(WalError::io("delete segment", &path, e)),
        }
    }
    Ok(())
}

fn set_len(path: &Path, len: u64) -> Result<()> {
    let f = fs::OpenOptions::new()
        .write(true)
        .open(path)
        .map_err(|e| WalError::io("open", path, e))?;
    if f.metadata()
        .map_err(|e| WalError::io("stat", path, e))?
        .len()
        > len
    {
        f.set_len(len)
            .map_err(|e| WalError::io("truncate", path, e))?;
        f.sync_all().map_err(|e| WalError::io("fsync", path, e))?;
    }
    Ok(())
}

/// Completes a `truncate_after` that a crash interrupted (idempotent).
pub fn finish_truncation(dir: &Path, bases: &mut Vec<i64>, intent: TruncateIntent) -> Result<()> {
    if bases.binary_search(&intent.segment_base).is_ok() {
        for &b in bases.iter().filter(|&&b| b > intent.segment_base) {
            delete_segment_files(dir, b)?;
        }
        bases.retain(|&b| b <= intent.segment_base);
        let base = intent.segment_base;
        set_len(&segment::log_path(dir, base), intent.position)?;
        set_len(
            &entry_index::path_for(dir, base),
            intent.entry_count * RECORD_LEN as u64,
        )?;
        index::trim_files(dir, base, 0, 0)?;
        if let Some(cp) = Checkpoint::read(dir)?
            && (cp.segment_base > base
                || (cp.segment_base == base
                    && (cp.position > intent.position || cp.entry_count > intent.entry_count)))
        {
            meta::remove(dir, meta::CHECKPOINT)?;
        }
        meta::sync_dir(dir)?;
    }
    // Durably gone before any append: see `truncate_after`.
    meta::remove(dir, meta::TRUNCATE_INTENT)?;
    meta::sync_dir(dir)
}

pub fn recover(dir: &Path, config: &LogConfig) -> Result<Recovered> {
    fs::create_dir_all(dir).map_err(|e| WalError::io("create directory", dir, e))?;
    // First: `list` removes files of a base without a `.log`, which is what
    // the old segments of a half-done compaction swap look like.
    match crate::compaction::recover_swap(dir)? {
        SwapRecovery::None => {}
        done => {
            tracing::warn!(dir = %dir.display(), outcome = ?done, "recovery settled an interrupted compaction swap")
        }
    }
    let mut bases = list(dir)?;
    let mut report = Recovery {
        next_offset: 0,
        log_start_offset: 0,
        last_position: None,
        truncated_tail: None,
        damaged: Vec::new(),
        scanned_bytes: 0,
        finished_truncation: false,
    };
    if let Some(intent) = TruncateIntent::read(dir)? {
        finish_truncation(dir, &mut bases, intent)?;
        report.finished_truncation = true;
    } else {
        meta::remove(dir, meta::TRUNCATE_INTENT)?;
    }
    let persisted_start = meta::read_log_start(dir)?;
    let interval = config.index_interval_bytes;
    if bases.is_empty() {
        let base = persisted_start.unwrap_or(0).max(0);
        let active = ActiveSegment::create(dir, base, interval)?;
        report.next_offset = base;
        report.log_start_offset = base;
        return Ok(Recovered {
            sealed: Vec::new(),
            active,
            log_start_offset: base,
            last: None,
            report,
        });
    }
    let checkpoint = Checkpoint::read(dir)?;
    if let Some(cp) = checkpoint.filter(|cp| cp.durable)
        && bases.binary_search(&cp.segment_base).is_err()
    {
        return Err(WalError::Corrupt {
            file: segment::log_path(dir, cp.segment_base),
            position: 0,
            reason: "the segment the recovery checkpoint covers is missing".into(),
        });
    }
    let checkpoint = checkpoint.filter(|cp| bases.binary_search(&cp.segment_base).is_ok());
    let last_base = *bases.last().unwrap_or(&0);
    let trusted_below = checkpoint.map_or(last_base, |cp| cp.segment_base);
    let cleaned_below = meta::read_cleaner_checkpoint(dir)?;

    let mut expect = Expect {
        last: None,
        next_offset: bases[0],
    };
    let mut sealed = Vec::new();
    let mut active = None;
    for (i, &base) in bases.iter().enumerate() {
        let is_last = i + 1 == bases.len();
        if base < trusted_below {
            let seg = load_sealed(dir, base, interval, &mut expect, &mut report)?;
            if cleaned_below.is_some_and(|c| base < c) {
                seg.allow_gaps();
            }
            sealed.push(Arc::new(seg));
            continue;
        }
        let from = checkpoint.filter(|cp| cp.segment_base == base);
        let scan = scan(
            dir,
            base,
            interval,
            from,
            cleaned_below,
            &mut expect,
            &mut report,
        )?;
        let cut = scan.cut;
        // A segment starting below the cleaner checkpoint may hold gaps:
        // a cleaned one lies wholly below it; one holding entries stored
        // by catch-up from a compacted leader (`append_stored`) may go on
        // past it with ordinary entries.
        let gaps = cleaned_below.is_some_and(|c| base < c);
        if is_last || cut {
            // Everything after a cut is tail too: drop later segments.
            let later: Vec<i64> = bases[i + 1..].to_vec();
            let mut later_bytes = 0;
            for b in later {
                later_bytes += fs::metadata(segment::log_path(dir, b)).map_or(0, |m| m.len());
                delete_segment_files(dir, b)?;
            }
            if let Some(t) = report.truncated_tail.as_mut() {
                t.bytes += later_bytes;
            }
            let a = ActiveSegment::open(dir, base, interval, scan.resume)?;
            if gaps {
                a.seg.allow_gaps();
            }
            active = Some(a);
            break;
        }
        let a = ActiveSegment::open(dir, base, interval, scan.resume)?;
        a.entries.sync()?;
        let seg = a.seal(true)?;
        if gaps {
            seg.allow_gaps();
        }
        sealed.push(seg);
    }
    let active = match active {
        Some(a) => a,
        None => return Err(WalError::InvalidConfig("no segment to resume".into())),
    };
    let log_start = persisted_start
        .unwrap_or(i64::MIN)
        .max(
            sealed
                .first()
                .map_or(active.base(), |s: &Arc<Segment>| s.base_offset),
        )
        .min(active.next_offset);
    if persisted_start.is_some_and(|p| p > log_start) {
        // A cut tail or finished truncation ended the log below it.
        meta::write_log_start(dir, log_start)?;
    }
    report.next_offset = active.next_offset;
    report.log_start_offset = log_start;
    report.last_position = expect.last;
    Ok(Recovered {
        sealed,
        active,
        log_start_offset: log_start,
        last: expect.last,
        report,
    })
}

fn damaged(report: &mut Recovery, dir: &Path, base: i64, position: u64, reason: String) {
    // The caller reports it, once (helix-server: "replica refused", or the
    // replica set aside as a learner).
    let file = segment::log_path(dir, base);
    report.damaged.push(DamagedRange {
        segment_base_offset: base,
        file,
        position,
        reason,
    });
}

/// The segment a compaction swap just put in place under an open log,
/// checked as a sealed segment is at open (inconsistency marks it damaged).
pub(crate) fn load_swapped(dir: &Path, base: i64, interval: u64) -> Result<Segment> {
    let mut expect = Expect {
        last: None,
        next_offset: base,
    };
    let mut report = Recovery {
        next_offset: base,
        log_start_offset: base,
        last_position: None,
        truncated_tail: None,
        damaged: Vec::new(),
        scanned_bytes: 0,
        finished_truncation: false,
    };
    load_sealed(dir, base, interval, &mut expect, &mut report)
}

/// A segment before the checkpoint: checked from its first and last entry
/// records and file lengths only.
fn load_sealed(
    dir: &Path,
    base: i64,
    interval: u64,
    expect: &mut Expect,
    report: &mut Recovery,
) -> Result<Segment> {
    let log = segment::log_path(dir, base);
    let log_len = fs::metadata(&log)
        .map_err(|e| WalError::io("stat", &log, e))?
        .len();
    let epath = entry_index::path_for(dir, base);
    let records = match File::open(&epath) {
        Ok(f) => {
            let len = f
                .metadata()
                .map_err(|e| WalError::io("stat", &epath, e))?
                .len();
            let mut n = len / RECORD_LEN as u64;
            if n > 0 && entry_index::read_slot(&f, &epath, n - 1)?.is_none() {
                // Trailing preallocated slots: the trim at seal was lost
                // (a power loss). Find the end of the records by bisection;
                // the checks below reject anything inconsistent.
                let (mut lo, mut hi) = (0, n);
                while lo < hi {
                    let mid = lo + (hi - lo) / 2;
                    if entry_index::read_slot(&f, &epath, mid)?.is_some() {
                        lo = mid + 1;
                    } else {
                        hi = mid;
                    }
                }
                n = lo;
            }
            let first = entry_index::read_slot(&f, &epath, 0)?;
            let last = if n > 0 {
                entry_index::read_slot(&f, &epath, n - 1)?
            } else {
                None
            };
            first.zip(last).map(|(a, b)| (a, b, n))
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => return Err(WalError::io("open entry index", &epath, e)),
    };
    let consistent = records.filter(|(first, last, n)| {
        expect.accepts(first)
            && first.first_offset == base
            && first.position == 0
            && last.end() == log_len
            && last.pos.index.checked_sub(first.pos.index) == Some(n - 1)
    });
    let max_timestamp = sealed_max_timestamp(dir, base, &log, log_len)?;
    let state = match consistent {
        Some((first, last, n)) => {
            expect.last = Some(last.pos);
            expect.next_offset = last.next_offset;
            SegmentState {
                len: log_len,
                next_offset: last.next_offset,
                max_timestamp,
                verified: (0, base),
                entries: Some((first.pos.index, n)),
            }
        }
        None => {
            damaged(
                report,
                dir,
                base,
                0,
                "entry index missing or inconsistent with the log file".into(),
            );
            SegmentState {
                len: log_len,
                next_offset: base,
                max_timestamp,
                verified: (0, base),
                entries: None,
            }
        }
    };
    let seg = Segment::new(dir, base, interval, None, state);
    if consistent.is_none() {
        seg.mark_damaged(0, "entry index missing or inconsistent with the log file");
    }
    Ok(seg)
}

/// The newest timestamp of a sealed segment: the time index's last record
/// (written at seal), or a walk over the batch headers when it is unreadable.
fn sealed_max_timestamp(dir: &Path, base: i64, log: &Path, log_len: u64) -> Result<i64> {
    if let Some(ix) = SparseIndex::load(dir, base, None)?
        && let Some(t) = ix.times.last()
    {
        return Ok(t.timestamp);
    }
    let f = File::open(log).map_err(|e| WalError::io("open segment", log, e))?;
    let mut max = i64::MIN;
    let mut pos = 0u64;
    let mut header = [0u8; batch::HEADER_LEN];
    while pos + batch::HEADER_LEN as u64 <= log_len {
        f.read_exact_at(&mut header, pos)
            .map_err(|e| WalError::io("read segment", log, e))?;
        let Ok(h) = batch::BatchHeader::parse_checked_len(&header, (log_len - pos) as usize) else {
            break;
        };
        max = max.max(h.max_timestamp);
        pos += h.total_len() as u64;
    }
    Ok(max)
}
