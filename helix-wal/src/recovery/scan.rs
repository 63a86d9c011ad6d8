//! Re-verifying a segment's tail at open: from the recovery checkpoint (or
//! the segment's start) to its end, entry by entry, cutting what does not
//! verify and refusing damage inside data the checkpoint says was flushed.

use std::fs::{self, File};
use std::path::Path;

use memmap2::Mmap;

use super::Expect;
use crate::active::Resume;
use crate::batch::{self, Batches};
use crate::entry_index;
use crate::error::{Result, WalError};
use crate::index::IndexBuilder;
use crate::index::{self, SparseIndex};
use crate::meta::Checkpoint;
use crate::segment;
use crate::types::{Recovery, TruncatedTail};

pub(super) struct Scan {
    pub(super) resume: Resume,
    pub(super) cut: bool,
}

/// Re-verifies a segment from the checkpoint (or its start) and cuts what
/// does not verify. An entry ending at or below `cleaned_below` (the
/// cleaner checkpoint) may leave gaps between its batches (ADR 0027 §5:
/// stored by catch-up from a compacted leader); its base offsets are
/// still checked, by the entry's header checksum.
pub(super) fn scan(
    dir: &Path,
    base: i64,
    interval: u64,
    checkpoint: Option<Checkpoint>,
    cleaned_below: Option<i64>,
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
        let gaps = cleaned_below.is_some_and(|c| r.next_offset <= c);
        for b in Batches::new(bytes) {
            match b {
                Ok((h, range))
                    if h.base_offset == offset
                        || (gaps && h.base_offset > offset && h.next_offset() <= r.next_offset) =>
                {
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
        if bad.is_none() && offset != r.next_offset && !(gaps && offset < r.next_offset) {
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
