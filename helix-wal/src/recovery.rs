//! Opening a log directory: finish an interrupted truncation, trust what the
//! recovery checkpoint covers, re-verify only the tail after it, and cut a
//! torn or corrupt tail back to the last whole entry.
//!
//! Work is proportional to the tail: segments before the checkpoint's are
//! checked for consistency from their first and last entry records only; the
//! checkpoint's segment is re-verified from the checkpoint position; later
//! segments (rolled after it) from their start. Trusted bytes are CRC-checked
//! lazily, the first time a read reaches them (see `segment.rs`).

use std::fs::{self, File};
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::Arc;

use memmap2::Mmap;

use crate::active::{ActiveSegment, Resume};
use crate::batch::{self, Batches};
use crate::config::LogConfig;
use crate::entry_index::{self, EntryRecord, RECORD_LEN};
use crate::error::{Result, WalError};
use crate::index::IndexBuilder;
use crate::index::{self, SparseIndex};
use crate::meta::{self, Checkpoint, TruncateIntent};
use crate::segment::{self, Segment, SegmentState};
use crate::types::{DamagedRange, RaftPosition, Recovery, TruncatedTail};

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
            sealed.push(Arc::new(seg));
            continue;
        }
        let from = checkpoint.filter(|cp| cp.segment_base == base);
        let scan = scan(dir, base, interval, from, &mut expect, &mut report)?;
        let cut = scan.cut;
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
            active = Some(ActiveSegment::open(dir, base, interval, scan.resume)?);
            break;
        }
        let a = ActiveSegment::open(dir, base, interval, scan.resume)?;
        a.entries.sync()?;
        sealed.push(a.seal(true)?);
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

struct Scan {
    resume: Resume,
    cut: bool,
}

/// Re-verifies a segment from the checkpoint (or its start) and cuts what
/// does not verify.
fn scan(
    dir: &Path,
    base: i64,
    interval: u64,
    checkpoint: Option<Checkpoint>,
    expect: &mut Expect,
    report: &mut Recovery,
) -> Result<Scan> {
    let log = segment::log_path(dir, base);
    let log_file = File::open(&log).map_err(|e| WalError::io("open segment", &log, e))?;
    let log_len = log_file
        .metadata()
        .map_err(|e| WalError::io("stat", &log, e))?
        .len();
    let epath = entry_index::path_for(dir, base);
    let efile = fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(&epath)
        .map_err(|e| WalError::io("open entry index", &epath, e))?;
    // SAFETY: nothing else writes this directory while it is being opened;
    // the map is dropped before the file is cut.
    let map = if log_len > 0 {
        Some(unsafe { Mmap::map(&log_file) }.map_err(|e| WalError::io("map segment", &log, e))?)
    } else {
        None
    };
    let data: &[u8] = map.as_deref().unwrap_or(&[]);

    // Resume from the checkpoint when it agrees with the files.
    let mut start = None;
    if let Some(cp) = checkpoint
        && cp.position <= log_len
    {
        let last = if cp.entry_count == 0 {
            None
        } else {
            entry_index::read_slot(&efile, &epath, cp.entry_count - 1)?
        };
        let first = entry_index::read_slot(&efile, &epath, 0)?;
        let agrees = match last {
            None => cp.entry_count == 0 && cp.position == 0 && cp.next_offset == base,
            Some(l) => {
                l.end() == cp.position
                    && l.next_offset == cp.next_offset
                    && expect
                        .last
                        .is_none_or(|e| first.is_some_and(|f| f.pos.index == e.index + 1))
            }
        };
        let ix = SparseIndex::load(
            dir,
            base,
            Some((cp.offset_records as usize, cp.time_records as usize)),
        )?
        .unwrap_or_else(|| index::build_index(&data[..cp.position as usize], base, interval));
        if agrees {
            let first_index = first.filter(|_| cp.entry_count > 0).map(|f| f.pos.index);
            start = Some((cp, last, first_index, ix));
        } else if cp.durable {
            return Err(refused_inside(
                &log,
                cp,
                last.map_or(0, |l| l.end().min(cp.position)),
            ));
        }
    } else if let Some(cp) = checkpoint.filter(|cp| cp.durable) {
        return Err(refused_inside(&log, cp, log_len));
    }
    let (mut pos, mut count, mut first_index, mut ix, mut max_ts, verified_from_zero);
    match start {
        Some((cp, last, first, loaded)) => {
            pos = cp.position;
            count = cp.entry_count;
            first_index = first;
            ix = loaded;
            max_ts = cp.max_timestamp;
            if let Some(l) = last {
                expect.last = Some(l.pos);
            }
            expect.next_offset = cp.next_offset;
            verified_from_zero = cp.position == 0;
        }
        None => {
            pos = 0;
            count = 0;
            first_index = None;
            ix = SparseIndex::default();
            max_ts = i64::MIN;
            expect.next_offset = base;
            verified_from_zero = true;
        }
    }
    let mut builder = IndexBuilder::resume(interval, &ix, pos, max_ts);
    let mut last_batch_rel = None;
    let scanned_from = pos;
    let mut stop_reason = None;
    loop {
        let Some(r) = entry_index::read_slot(&efile, &epath, count)? else {
            if pos < log_len {
                stop_reason = Some("bytes after the last entry record".to_string());
            }
            break;
        };
        if !expect.accepts(&r) || u64::from(r.position) != pos || r.end() > log_len {
            stop_reason = Some(format!(
                "entry record {} does not continue the log",
                r.pos.index
            ));
            break;
        }
        let bytes = &data[pos as usize..r.end() as usize];
        let mut offset = r.first_offset;
        let mut batches = Vec::new();
        let mut bad = None;
        for b in Batches::new(bytes) {
            match b {
                Ok((h, range)) if h.base_offset == offset => {
                    if let Err(e) = batch::verify_crc(&bytes[range.clone()]) {
                        bad = Some(e.to_string());
                        break;
                    }
                    offset = h.next_offset();
                    batches.push((h, range.start));
                }
                Ok((h, _)) => {
                    bad = Some(format!(
                        "batch base offset {} where {offset} was expected",
                        h.base_offset
                    ));
                    break;
                }
                Err(e) => {
                    bad = Some(e.to_string());
                    break;
                }
            }
        }
        if bad.is_none()
            && entry_index::header_sum(bytes, batches.iter().map(|(_, at)| *at)) != r.header_sum
        {
            bad = Some("batch header fields do not match the entry's checksum".into());
        }
        if bad.is_none() && offset != r.next_offset {
            bad = Some(format!(
                "entry ends at offset {offset}, its record says {}",
                r.next_offset
            ));
        }
        if let Some(reason) = bad {
            stop_reason = Some(format!("entry {} at byte {pos}: {reason}", r.pos.index));
            break;
        }
        for (h, at) in &batches {
            if let Some((o, t)) = builder.add(base, h, pos + *at as u64) {
                ix.offsets.push(o);
                ix.times.push(t);
            }
            max_ts = max_ts.max(h.max_timestamp);
            last_batch_rel = Some((h.base_offset - base) as u32);
        }
        first_index.get_or_insert(r.pos.index);
        expect.last = Some(r.pos);
        expect.next_offset = r.next_offset;
        pos = r.end();
        count += 1;
    }
    report.scanned_bytes += pos - scanned_from;
    drop(map);
    let cut = stop_reason.is_some();
    if let Some(reason) = stop_reason {
        let mut dropped_entries = 0;
        while entry_index::read_slot(&efile, &epath, count + dropped_entries)?.is_some() {
            dropped_entries += 1;
        }
        let bytes = log_len - pos;
        tracing::warn!(
            file = %log.display(),
            from_offset = expect.next_offset,
            bytes,
            entries = dropped_entries,
            %reason,
            "torn or corrupt tail cut on open"
        );
        report.truncated_tail = Some(TruncatedTail {
            from_offset: expect.next_offset,
            bytes,
            entries: dropped_entries,
            reason,
        });
        log_file_set_len(&log, pos)?;
    }
    if last_batch_rel.is_none() && pos > 0 {
        last_batch_rel = ix.offsets.last().map(|o| o.relative_offset);
    }
    let persisted = (ix.offsets.len(), ix.times.len());
    ix.write_from(dir, base, 0, 0)?;
    index::trim_files(dir, base, persisted.0, persisted.1)?;
    Ok(Scan {
        resume: Resume {
            size: pos,
            next_offset: expect.next_offset,
            max_timestamp: max_ts,
            first_index,
            entry_count: count,
            index: ix,
            persisted,
            verified: if verified_from_zero {
                (pos, expect.next_offset)
            } else {
                (0, base)
            },
            last_batch_rel,
        },
        cut,
    })
}

/// Damage inside what a durable checkpoint covers: acknowledged bytes, which
/// are refused, never cut as a torn tail (ADR 0001). `position`: where the
/// files stop agreeing with the checkpoint, as far as it is known. The
/// caller reports it (helix-server: one "replica refused" line).
fn refused_inside(log: &Path, cp: Checkpoint, position: u64) -> WalError {
    WalError::Corrupt {
        file: log.to_path_buf(),
        position,
        reason: format!(
            "the log and its entry index do not hold the {} bytes and {} entries the recovery \
             checkpoint says were flushed (next offset {})",
            cp.position, cp.entry_count, cp.next_offset
        ),
    }
}

fn log_file_set_len(path: &Path, len: u64) -> Result<()> {
    let f = fs::OpenOptions::new()
        .write(true)
        .open(path)
        .map_err(|e| WalError::io("open segment", path, e))?;
    f.set_len(len)
        .map_err(|e| WalError::io("truncate segment", path, e))
}
