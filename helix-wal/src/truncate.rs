//! `truncate_after(index)`: Raft's conflict rule reaching into the WAL.
//!
//! Crash safety comes from an intent record: the target (segment, byte
//! length, entry count) is written durably before anything is changed, the
//! change is applied, and the intent is removed. On open an intent that is
//! present is completed (`recovery::finish_truncation`); one that is torn
//! reads as absent and nothing had been changed yet. So a crash leaves the
//! old end or the new end, never a mix.
//!
//! Any segment may be mapped by readers holding `Bytes`; shrinking its file
//! would fault them (SIGBUS). A segment is therefore cut by copying the kept
//! prefix to a new file renamed over the old one; existing mappings keep the
//! old inode. Truncation is rare, so the copy (at most one segment) is too.

use std::fs::{self, File, OpenOptions};
use std::io::{Read, Write};
use std::sync::Arc;

use crate::active::{ActiveSegment, Resume};
use crate::entry_index::{self, RECORD_LEN};
use crate::error::{Result, WalError};
use crate::fault::{self, Point};
use crate::index::{self, SparseIndex};
use crate::log::PartitionLog;
use crate::meta::{self, TruncateIntent};
use crate::positions;
use crate::recovery;
use crate::segment::{self, Segment};
use crate::types::RaftPosition;

fn crash_point(dir: &std::path::Path, step: u8) -> Result<()> {
    fault::hit(dir, Point::Truncate(step)).map_err(|e| WalError::io("truncate_after", dir, e))
}

impl PartitionLog {
    /// Removes every entry after `index` (and their batches and index
    /// records). A no-op when the log ends at or before `index`. Truncating
    /// to `first held index - 1` empties the log; below that is an error.
    pub fn truncate_after(&mut self, index: u64) -> Result<()> {
        if self.failed {
            return Err(WalError::Failed {
                dir: self.dir.clone(),
            });
        }
        let Some(last) = self.last_position() else {
            return Ok(());
        };
        if index >= last.index {
            return Ok(());
        }
        let segments = self.shared.snapshot();
        let first_index = segments
            .iter()
            .find_map(|s| s.entries())
            .map_or(last.index, |e| e.0);
        if index + 1 < first_index {
            return Err(WalError::TruncateBelowStart { index, first_index });
        }
        // Where the kept log ends.
        let (seg, keep_len, keep_entries, next_offset, new_last) = if index + 1 == first_index {
            let Some(seg) = segments.iter().find(|s| s.entries().is_some()).cloned() else {
                return Ok(());
            };
            let next = seg.base_offset;
            (seg, 0u64, 0u64, next, None)
        } else {
            let Some((seg, r)) = positions::record_of(&segments, index)? else {
                return Ok(());
            };
            let (first, _) = seg.entries().unwrap_or((index, 0));
            (seg, r.end(), index - first + 1, r.next_offset, Some(r.pos))
        };
        let intent = TruncateIntent {
            segment_base: seg.base_offset,
            position: keep_len,
            entry_count: keep_entries,
        };
        intent.write(&self.dir)?;
        crash_point(&self.dir, 1)?;

        // Later segments go first (readers stop seeing them, then files go).
        let keep_upto = segments
            .iter()
            .position(|s| Arc::ptr_eq(s, &seg))
            .unwrap_or(segments.len() - 1);
        let is_active = keep_upto + 1 == segments.len();
        if !is_active {
            self.shared.set_segments(segments[..=keep_upto].to_vec());
            for s in &segments[keep_upto + 1..] {
                recovery::delete_segment_files(&self.dir, s.base_offset)?;
                crash_point(&self.dir, 2)?;
            }
        }
        crash_point(&self.dir, 2)?;
        // The active segment's index is complete only in memory.
        let index = is_active.then(|| {
            self.active
                .index
                .read()
                .unwrap_or_else(|p| p.into_inner())
                .clone()
        });
        self.reactivate(&seg, keep_len, keep_entries, next_offset, index)?;
        crash_point(&self.dir, 3)?;
        self.shared
            .next_offset
            .store(next_offset, std::sync::atomic::Ordering::Release);
        self.shared
            .set_last_position(new_last.or(self.last_before_active()?));
        let new_last = self.last_position();
        if let Some((_, ls)) = &self.sync {
            ls.truncated(self.mark());
        } else {
            self.shared.set_durable(new_last);
        }
        self.active.sync()?;
        self.checkpoint(true)?;
        crash_point(&self.dir, 4)?;
        if next_offset < self.log_start_offset() {
            // The log start never exceeds the log end.
            meta::write_log_start(&self.dir, next_offset)?;
            self.shared
                .log_start_offset
                .store(next_offset, std::sync::atomic::Ordering::Release);
        }
        self.forget_delete_records_after(new_last.map(|p| p.index))?;
        // Durably gone before any later append: a surviving intent would
        // be redone on the next open and cut entries appended after it.
        meta::remove(&self.dir, meta::TRUNCATE_INTENT)?;
        meta::sync_dir(&self.dir)?;
        Ok(())
    }

    /// The last entry of the segments before the active one (after the
    /// active one was emptied).
    fn last_before_active(&self) -> Result<Option<RaftPosition>> {
        let segments = self.shared.snapshot();
        for s in segments.iter().rev() {
            if let Some((first, count)) = s.entries() {
                return positions::term_of(&segments, first + count - 1).map(|t| {
                    t.map(|term| RaftPosition {
                        term,
                        index: first + count - 1,
                    })
                });
            }
        }
        Ok(None)
    }

    /// Makes `seg` (sealed, or the active one) the active segment, cut to
    /// `keep_len` bytes and `keep_entries` entries.
    fn reactivate(
        &mut self,
        seg: &Arc<Segment>,
        keep_len: u64,
        keep_entries: u64,
        next_offset: i64,
        index: Option<SparseIndex>,
    ) -> Result<()> {
        let base = seg.base_offset;
        let dir = self.dir.clone();
        // Copy the kept prefix to a new inode; readers' mappings keep the old.
        let log = segment::log_path(&dir, base);
        let cut = dir.join(format!("{base:020}.log.cut"));
        copy_prefix(&log, &cut, keep_len)?;
        fs::rename(&cut, &log).map_err(|e| WalError::io("rename", &log, e))?;
        let epath = entry_index::path_for(&dir, base);
        let ef = OpenOptions::new()
            .write(true)
            .open(&epath)
            .map_err(|e| WalError::io("open entry index", &epath, e))?;
        ef.set_len(keep_entries * RECORD_LEN as u64)
            .map_err(|e| WalError::io("truncate entry index", &epath, e))?;
        let mut ix = match index {
            Some(ix) => ix,
            None => SparseIndex::load(&dir, base, None)?.unwrap_or_default(),
        };
        ix.truncate_to(keep_len as u32, (next_offset - base) as u32);
        index::trim_files(&dir, base, 0, 0)?;
        let first_index = seg.entries().map(|e| e.0).filter(|_| keep_entries > 0);
        let old_active = std::mem::replace(
            &mut self.active,
            ActiveSegment::open(
                &dir,
                base,
                self.config.index_interval_bytes,
                Resume {
                    size: keep_len,
                    next_offset,
                    max_timestamp: i64::MIN,
                    first_index,
                    entry_count: keep_entries,
                    index: ix,
                    persisted: (0, 0),
                    verified: (0, base),
                    last_batch_rel: None,
                },
            )?,
        );
        let max_ts = max_timestamp_below(&self.active, keep_len);
        self.active.max_timestamp = max_ts;
        self.active.seg.retract(keep_len, next_offset, max_ts);
        self.active.reset_index_state();
        drop(old_active);
        let mut segments = self.shared.snapshot();
        segments.retain(|s| s.base_offset < base);
        segments.push(self.active.seg.clone());
        self.shared.set_segments(segments);
        if let Some((_, ls)) = &self.sync {
            ls.retarget(
                self.active.file.clone(),
                self.active.seg.log_path().to_path_buf(),
                self.active.entries.file().clone(),
                None,
            );
        }
        Ok(())
    }
}

/// The largest batch timestamp in the first `len` bytes of the active segment.
fn max_timestamp_below(a: &ActiveSegment, len: u64) -> i64 {
    let ix = a.index.read().unwrap_or_else(|p| p.into_inner()).clone();
    // Running maxima up to the last indexed batch below `len`, then a walk.
    let n = ix.offsets.partition_point(|e| u64::from(e.position) < len);
    let (mut max, mut pos) = if n == 0 {
        (i64::MIN, 0u64)
    } else {
        (
            ix.times.get(n - 1).map_or(i64::MIN, |t| t.timestamp),
            u64::from(ix.offsets[n - 1].position),
        )
    };
    let mut header = [0u8; crate::batch::HEADER_LEN];
    use std::os::unix::fs::FileExt;
    while pos + header.len() as u64 <= len {
        if a.file.read_exact_at(&mut header, pos).is_err() {
            break;
        }
        let Ok(h) = crate::batch::BatchHeader::parse_checked_len(&header, (len - pos) as usize)
        else {
            break;
        };
        max = max.max(h.max_timestamp);
        pos += h.total_len() as u64;
    }
    max
}

fn copy_prefix(from: &std::path::Path, to: &std::path::Path, len: u64) -> Result<()> {
    let src = File::open(from).map_err(|e| WalError::io("open segment", from, e))?;
    let mut dst = File::create(to).map_err(|e| WalError::io("create", to, e))?;
    let mut limited = src.take(len);
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = limited
            .read(&mut buf)
            .map_err(|e| WalError::io("read segment", from, e))?;
        if n == 0 {
            break;
        }
        dst.write_all(&buf[..n])
            .map_err(|e| WalError::io("write", to, e))?;
    }
    dst.sync_all().map_err(|e| WalError::io("fsync", to, e))
}
