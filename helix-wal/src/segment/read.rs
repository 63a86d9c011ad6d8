//! Reads from one segment: whole batches from the one holding an offset,
//! an entry's byte range, the scrubber's re-read, and the lookup by
//! timestamp. Every read returns only verified bytes (`verified.rs`).

use std::sync::Arc;

use bytes::Bytes;

use super::{Chunk, Segment};
use crate::batch::{self, BatchHeader};
use crate::budget::FileBudget;
use crate::error::Result;
use crate::source::Source;

impl Segment {
    /// Reads whole batches starting with the one containing `from` (which
    /// must be ≥ the base offset), up to `max_bytes` but at least one batch.
    /// `None` when the segment holds nothing at or after `from`.
    pub fn read(
        self: &Arc<Self>,
        from: i64,
        max_bytes: usize,
        budget: &FileBudget,
    ) -> Result<Option<Chunk>> {
        let len = self.len();
        let src = self.source(budget)?;
        let Some((pos, first)) = self.find_batch(&src, from, len, |h| h.last_offset() >= from)?
        else {
            return Ok(None);
        };
        let want = (first.total_len() as u64).max(max_bytes as u64);
        let end_cap = len.min(pos + want);
        let chunk = src.load(pos, end_cap, &self.log_path)?;
        let mut taken = 0usize;
        let mut next = first.base_offset;
        for b in batch::Batches::new(&chunk) {
            let Ok((h, range)) = b else { break };
            if taken > 0 && range.end > max_bytes {
                break;
            }
            taken = range.end;
            next = h.next_offset();
        }
        if taken == 0 {
            return Err(self.corrupt(pos, "batch does not fit in the segment"));
        }
        let end = self.ensure_verified(&src, pos + taken as u64)?;
        if end <= pos {
            let d = self.damage().map(|d| d.position).unwrap_or(pos);
            return Err(self.corrupt(d, "range failed verification"));
        }
        if end < pos + taken as u64 {
            // Damage inside the chunk: serve the good batches before it.
            let keep = (end - pos) as usize;
            let mut next_ok = first.base_offset;
            for b in batch::Batches::new(&chunk[..keep]).flatten() {
                next_ok = b.0.next_offset();
            }
            return Ok(Some(Chunk {
                bytes: chunk.slice(0..keep),
                position: pos,
                first_offset: first.base_offset,
                next_offset: next_ok,
            }));
        }
        Ok(Some(Chunk {
            bytes: chunk.slice(0..taken),
            position: pos,
            first_offset: first.base_offset,
            next_offset: next,
        }))
    }

    /// The scrubber's read: like [`Segment::read`] (whole batches from the
    /// one holding `from`, about `max_bytes`), but every batch's CRC is
    /// checked again on the bytes as they are now, even where this process
    /// verified them before (stored bytes can rot after they were checked).
    /// A mismatch marks the segment damaged from that batch on and is
    /// returned as `Corrupt` with the batch's position.
    pub fn reverify(
        self: &Arc<Self>,
        from: i64,
        max_bytes: usize,
        budget: &FileBudget,
    ) -> Result<Option<Chunk>> {
        let Some(chunk) = self.read(from, max_bytes, budget)? else {
            return Ok(None);
        };
        for b in batch::Batches::new(&chunk.bytes) {
            let Ok((_, range)) = b else { break };
            if let Err(e) = batch::verify_crc(&chunk.bytes[range.clone()]) {
                let at = chunk.position + range.start as u64;
                let reason = format!("a batch fails its CRC when re-read: {e}");
                self.mark_damaged(at, &reason);
                return Err(self.corrupt(at, &reason));
            }
        }
        Ok(Some(chunk))
    }

    /// Bytes `[from, to)`, which must be whole batches (an entry's range),
    /// verified before they are returned.
    pub fn read_range(self: &Arc<Self>, from: u64, to: u64, budget: &FileBudget) -> Result<Bytes> {
        if to > self.len() {
            return Err(self.corrupt(to, "entry ends beyond the segment's data"));
        }
        if from == to {
            return Ok(Bytes::new());
        }
        let src = self.source(budget)?;
        let good = self.ensure_verified(&src, to)?;
        if good < to {
            let d = self.damage().map_or(good, |d| d.position);
            return Err(self.corrupt(d, "range failed verification"));
        }
        src.load(from, to, &self.log_path)
    }

    /// The base offset of the first batch whose max timestamp is ≥ `ts`;
    /// batches ending below `min_offset` (the log start) are skipped.
    pub fn offset_for_timestamp(
        self: &Arc<Self>,
        ts: i64,
        min_offset: i64,
        budget: &FileBudget,
    ) -> Result<Option<i64>> {
        if self.max_timestamp() < ts {
            return Ok(None);
        }
        let len = self.len();
        let src = self.source(budget)?;
        let start = src.with_index(|ix| ix.lookup_time(ts));
        let from = (self.base_offset + i64::from(start)).max(min_offset);
        // The whole segment is verified first (once per process): an answer
        // is given only from bytes before any damage, and "no match" only
        // when there is none. Lookups by time are rare; reads pay this too.
        let good = self.ensure_verified(&src, len)?;
        let refuse = || {
            let d = self.damage().map_or(good, |d| d.position);
            Err(self.corrupt(d, "range failed verification"))
        };
        let found = if good < len {
            // Only the verified prefix can be walked.
            self.find_batch(&src, from, good, |h| {
                h.last_offset() >= from && h.max_timestamp >= ts
            })?
        } else {
            self.find_batch(&src, from, len, |h| {
                h.last_offset() >= from && h.max_timestamp >= ts
            })?
        };
        match found {
            Some((_, h)) => Ok(Some(h.base_offset)),
            None if good < len => refuse(),
            None => Ok(None),
        }
    }

    /// Walks batch headers from the index entry at or below `from` to the
    /// first batch satisfying `hit`.
    pub(super) fn find_batch(
        &self,
        src: &Source,
        from: i64,
        len: u64,
        hit: impl Fn(&BatchHeader) -> bool,
    ) -> Result<Option<(u64, BatchHeader)>> {
        // Below the base: from the start; beyond u32: from the last entry.
        let rel = u32::try_from((from - self.base_offset).max(0)).unwrap_or(u32::MAX);
        let mut pos = u64::from(src.with_index(|ix| ix.lookup_position(rel)));
        while pos < len {
            let h = src.header(pos, len, &self.log_path)?;
            let h = match h {
                Some(h) if h.validate((len - pos) as usize).is_ok() => h,
                _ => return Err(self.corrupt(pos, "unreadable batch header")),
            };
            if hit(&h) {
                return Ok(Some((pos, h)));
            }
            pos += h.total_len() as u64;
        }
        Ok(None)
    }
}
