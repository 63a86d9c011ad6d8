//! Appending an entry as another replica stored it (ADR 0027 §5, Raft
//! catch-up from a compacted leader): the batches keep their base offsets,
//! which may leave gaps inside the entry's offset range, or be none at all.
//!
//! What keeps such gaps readable after a restart: they lie below the
//! cleaner checkpoint, the one place where recovery, the lazy check and
//! reads accept gaps (and check base offsets through each entry's header
//! checksum instead). So before a gapped entry is written, the checkpoint
//! is raised durably to at least its next offset (a raise, never a
//! lowering: the range is the leader's cleaned bytes, as clean as the
//! cleaner would leave them). The segment holding it then starts below the
//! checkpoint, which is what marks a segment as one that may hold gaps;
//! ordinary entries after them in the same segment are checked the same
//! way, which is harmless (they have no gaps) and as strict (the header
//! checksum covers every base offset).

use super::PartitionLog;
use crate::batch::{self, BatchHeader, Batches};
use crate::error::{Result, WalError};
use crate::types::{AppendCheck, AppendInfo, RaftPosition};

impl PartitionLog {
    /// Appends Raft entry `pos` covering offsets `[first_offset,
    /// next_offset)` with `batches` at their own base offsets: increasing,
    /// each at or after the previous one's next offset, all inside the
    /// range; gaps and an empty list are allowed. `first_offset` must be
    /// `next_offset()`; the log's next offset becomes `next_offset`.
    /// Every batch's CRC-32C is verified (the bytes came over the network).
    /// On any error nothing is written.
    pub fn append_stored(
        &mut self,
        pos: RaftPosition,
        first_offset: i64,
        next_offset: i64,
        batches: &[u8],
    ) -> Result<AppendInfo> {
        self.check_appendable(pos, batches.len())?;
        if first_offset != self.active.next_offset {
            return Err(WalError::NonContiguousOffset {
                at: 0,
                expected: self.active.next_offset,
                found: first_offset,
            });
        }
        let mut headers = std::mem::take(&mut self.scratch);
        let checked = validate_stored(batches, first_offset, next_offset, &mut headers);
        let written = match checked {
            // An entry without gaps after ordinary ones is an ordinary
            // entry: it needs no checkpoint and no segment of its own.
            Ok((false, _)) if !self.active.seg.may_have_gaps() => None,
            Ok((_, max_ts)) => Some(self.write_stored(pos, batches, &headers, next_offset, max_ts)),
            Err(e) => Some(Err(e)),
        };
        headers.clear();
        self.scratch = headers;
        let Some(written) = written else {
            return self.append_checked(pos, batches, AppendCheck::CrcVerifiedByCaller);
        };
        if self.active.poisoned {
            self.failed = true;
        }
        let max_timestamp = written?;
        self.publish_append(pos, next_offset, batches.len())?;
        Ok(AppendInfo {
            first_offset,
            next_offset,
            bytes: batches.len(),
            max_timestamp,
        })
    }

    fn write_stored(
        &mut self,
        pos: RaftPosition,
        batches: &[u8],
        headers: &[(BatchHeader, usize)],
        next_offset: i64,
        max_ts: Option<i64>,
    ) -> Result<Option<i64>> {
        if self.should_roll(batches.len() as u64) {
            self.roll()?;
        }
        self.cover_gaps_below(next_offset)?;
        self.active.seg.allow_gaps();
        self.active.write_entry(
            pos,
            batches,
            headers,
            next_offset,
            max_ts.unwrap_or(i64::MIN),
        )?;
        Ok(max_ts)
    }

    /// Raises the cleaner checkpoint durably to `offset` unless it is
    /// there already, so that stored entries ending at or below it may
    /// hold gaps. `append_stored` does it entry by entry; a caller about
    /// to append a run of stored entries calls it once with the run's end
    /// (one durable write instead of one per entry). Raising it past what
    /// is then appended is harmless: segments starting below it are
    /// checked entry by entry, which ordinary entries pass. Re-read before
    /// writing: the cleaner writes it too, and it must never go down.
    pub fn cover_gaps_below(&mut self, offset: i64) -> Result<()> {
        if self.cleaned_below.is_some_and(|c| c >= offset) {
            return Ok(());
        }
        let on_disk = crate::meta::read_cleaner_checkpoint(&self.dir)?;
        if let Some(c) = on_disk.filter(|c| *c >= offset) {
            self.cleaned_below = Some(c);
            return Ok(());
        }
        crate::meta::write_cleaner_checkpoint(&self.dir, offset)?;
        self.cleaned_below = Some(offset);
        Ok(())
    }
}

/// Checks a stored entry's batches: whole, magic 2, CRC-32C good, base
/// offsets increasing inside `[first_offset, next_offset)`. Fills `headers`
/// with each batch's header and position. Returns whether the batches
/// leave a gap in the range and the largest max timestamp.
fn validate_stored(
    batches: &[u8],
    first_offset: i64,
    next_offset: i64,
    headers: &mut Vec<(BatchHeader, usize)>,
) -> Result<(bool, Option<i64>)> {
    if next_offset < first_offset {
        return Err(WalError::NonContiguousOffset {
            at: 0,
            expected: first_offset,
            found: next_offset,
        });
    }
    let mut expected = first_offset;
    let mut gaps = false;
    let mut max_ts: Option<i64> = None;
    let mut it = Batches::new(batches);
    while let Some(item) = {
        let at = it.position();
        it.next().map(|r| (at, r))
    } {
        let (at, r) = item;
        let (h, range) = r.map_err(|source| WalError::InvalidBatch { at, source })?;
        // Checked: a stored entry's base offsets are not the log's own.
        let inside = h
            .base_offset
            .checked_add(i64::from(h.last_offset_delta) + 1)
            .is_some_and(|end| h.base_offset >= expected && end <= next_offset);
        if !inside {
            return Err(WalError::NonContiguousOffset {
                at,
                expected,
                found: h.base_offset,
            });
        }
        batch::verify_crc(&batches[range.clone()])
            .map_err(|source| WalError::InvalidBatch { at, source })?;
        gaps |= h.base_offset != expected;
        expected = h.next_offset();
        max_ts = Some(max_ts.map_or(h.max_timestamp, |m| m.max(h.max_timestamp)));
        headers.push((h, range.start));
    }
    Ok((gaps || expected != next_offset, max_ts))
}
