//! The read side of a partition log: a cheap, cloneable, `Send + Sync`
//! handle that Fetch, ListOffsets and Raft catch-up use from any thread while
//! the single writer appends.
//!
//! Readers see a published snapshot: the segment list, the next offset and the
//! log start offset. The active segment's bytes are bounded by its published
//! length, so a reader never sees a partly written entry.

use std::path::Path;
use std::sync::Arc;

use bytes::Bytes;

use crate::budget::FileBudget;
use crate::error::{Result, WalError};
use crate::positions;
use crate::segment::{Chunk, Segment};
use crate::shared::{Shared, reread};
use crate::types::{EpochEnd, RaftPosition, ReadResult, SegmentInfo};

/// One segment's read from an offset, about `max_bytes`
/// ([`Segment::read`] or [`Segment::reverify`]).
type SegmentRead = fn(&Arc<Segment>, i64, usize, &FileBudget) -> Result<Option<Chunk>>;

/// A read handle on one partition log.
#[derive(Debug, Clone)]
pub struct LogReader {
    pub(crate) shared: Arc<Shared>,
}

impl LogReader {
    pub fn dir(&self) -> &Path {
        &self.shared.dir
    }

    /// Bytes of the log's segment files (Kafka's `Log` `Size`).
    pub fn size_bytes(&self) -> u64 {
        self.shared.snapshot().iter().map(|s| s.len()).sum()
    }

    /// Offset the next appended record gets (the log end offset).
    pub fn next_offset(&self) -> i64 {
        self.shared.next_offset()
    }

    pub fn log_start_offset(&self) -> i64 {
        self.shared.log_start_offset()
    }

    pub fn last_position(&self) -> Option<RaftPosition> {
        self.shared.last_position()
    }

    /// The last entry durable on this replica: the WAL end in
    /// `ReplicationOnly`, the last group-committed entry in `Fsync`.
    pub fn durable_position(&self) -> Option<RaftPosition> {
        self.shared.durable()
    }

    /// Whole batches starting with the one that contains `from_offset`, up to
    /// `max_bytes` (at least one batch when one exists). Never crosses a
    /// segment boundary. Empty at the log end; `OffsetOutOfRange` outside
    /// `[log_start_offset, next_offset]`.
    pub fn read(&self, from_offset: i64, max_bytes: usize) -> Result<ReadResult> {
        let empty = self.empty_at(from_offset)?;
        if from_offset == empty.log_end_offset {
            return Ok(empty);
        }
        self.read_segments(empty, max_bytes, Segment::read)
    }

    /// The scrubber's read: [`LogReader::read`] with every batch's CRC
    /// checked again on the stored bytes, even those this process verified
    /// before (see [`Segment::reverify`]).
    pub fn reverify(&self, from_offset: i64, max_bytes: usize) -> Result<ReadResult> {
        let empty = self.empty_at(from_offset)?;
        if from_offset == empty.log_end_offset {
            return Ok(empty);
        }
        self.read_segments(empty, max_bytes, Segment::reverify)
    }

    /// An empty read at `from_offset` carrying the log's bounds;
    /// `OffsetOutOfRange` outside `[log_start_offset, next_offset]`.
    fn empty_at(&self, from_offset: i64) -> Result<ReadResult> {
        let log_start = self.log_start_offset();
        let next = self.next_offset();
        if from_offset < log_start || from_offset > next {
            return Err(WalError::OffsetOutOfRange {
                offset: from_offset,
                log_start,
                next_offset: next,
            });
        }
        Ok(ReadResult {
            bytes: Bytes::new(),
            first_offset: from_offset,
            next_offset: from_offset,
            log_end_offset: next,
            log_start_offset: log_start,
        })
    }

    /// Reads with `read_one` from the segment holding `at.first_offset`
    /// (`at`: the empty read there, carrying the log's bounds, returned as
    /// it is when no segment has a batch from there on).
    fn read_segments(
        &self,
        at: ReadResult,
        max_bytes: usize,
        read_one: SegmentRead,
    ) -> Result<ReadResult> {
        // A compaction swap replaced a segment under the read: the list
        // taken again holds its replacement. Swaps are rare and each is
        // one list change, so a few attempts always suffice in practice.
        let mut attempts = 0;
        loop {
            match self.read_snapshot(at.clone(), max_bytes, read_one) {
                Err(WalError::SegmentReplaced { .. }) if reread(attempts) => attempts += 1,
                other => return other,
            }
        }
    }

    fn read_snapshot(
        &self,
        at: ReadResult,
        max_bytes: usize,
        read_one: SegmentRead,
    ) -> Result<ReadResult> {
        let from_offset = at.first_offset;
        let segments = self.shared.snapshot();
        let start = segments
            .partition_point(|s| s.base_offset <= from_offset)
            .saturating_sub(1);
        for seg in &segments[start..] {
            match read_one(seg, from_offset, max_bytes, &self.shared.budget) {
                Ok(Some(chunk)) => {
                    return Ok(ReadResult {
                        bytes: chunk.bytes,
                        first_offset: chunk.first_offset,
                        next_offset: chunk.next_offset,
                        ..at
                    });
                }
                // The segment says it holds the offset but no batch has it:
                // its bytes do not match its metadata. Unless it was
                // cleaned: the offset fell in its trailing gap, and the
                // next batch is in a later segment.
                Ok(None) if from_offset < seg.next_offset() && !seg.may_have_gaps() => {
                    return Err(WalError::Corrupt {
                        file: seg.log_path().to_path_buf(),
                        position: 0,
                        reason: format!("no batch holds offset {from_offset}"),
                    });
                }
                Ok(None) => continue,
                Err(e) => return Err(self.explain_race(from_offset, e)),
            }
        }
        Ok(at)
    }

    /// A read that failed because retention or truncation removed the
    /// segment under it is reported as out of range.
    fn explain_race(&self, offset: i64, e: WalError) -> WalError {
        let log_start = self.log_start_offset();
        let next = self.next_offset();
        if offset < log_start || offset >= next {
            WalError::OffsetOutOfRange {
                offset,
                log_start,
                next_offset: next,
            }
        } else {
            e
        }
    }

    /// Every segment, oldest first (the last one is the active segment):
    /// what a compacting cleaner plans from (ADR 0027).
    pub fn segments(&self) -> Vec<SegmentInfo> {
        self.shared
            .snapshot()
            .iter()
            .map(|s| SegmentInfo {
                base_offset: s.base_offset,
                next_offset: s.next_offset(),
                bytes: s.len(),
                max_timestamp: s.max_timestamp(),
                first_index: s.entries().map(|e| e.0),
            })
            .collect()
    }

    /// ListOffsets by timestamp: base offset of the first batch (at or after
    /// the log start) whose max timestamp is ≥ `timestamp`; `None` if none.
    /// Batch granularity: the records before the match inside that batch are
    /// returned by a Fetch from it and skipped by clients as usual.
    pub fn offset_for_timestamp(&self, timestamp: i64) -> Result<Option<i64>> {
        self.rereading(|segments| {
            let log_start = self.log_start_offset();
            for seg in segments {
                if seg.next_offset() <= log_start || seg.max_timestamp() < timestamp {
                    continue;
                }
                if let Some(offset) =
                    seg.offset_for_timestamp(timestamp, log_start, &self.shared.budget)?
                {
                    return Ok(Some(offset.max(log_start)));
                }
            }
            Ok(None)
        })
    }

    /// The term of entry `index`, `None` when the log does not hold it.
    pub fn term_of(&self, index: u64) -> Result<Option<u64>> {
        self.rereading(|segments| positions::term_of(segments, index))
    }

    /// OffsetForLeaderEpoch: the largest term ≤ `term` and the offset its
    /// entries end at. `None` when every held entry has a larger term.
    pub fn end_offset_for_term(&self, term: u64) -> Result<Option<EpochEnd>> {
        self.rereading(|segments| {
            positions::end_offset_for_term(segments, term, self.next_offset())
        })
    }

    /// The first position of every term the log holds, ascending.
    pub fn term_starts(&self) -> Result<Vec<RaftPosition>> {
        self.rereading(positions::term_starts)
    }

    /// Streams entries from Raft index `from_index` on (for catch-up): each
    /// item is one entry's position and its batches. Reads one entry at a time.
    pub fn entries_from(&self, from_index: u64) -> positions::EntryStream {
        positions::EntryStream::new(self.shared.clone(), from_index)
    }

    pub fn budget(&self) -> &FileBudget {
        &self.shared.budget
    }

    /// `lookup` over the current segment list, taken again when a
    /// compaction swap replaced a segment under it.
    fn rereading<T>(&self, lookup: impl Fn(&[Arc<Segment>]) -> Result<T>) -> Result<T> {
        let mut attempts = 0;
        loop {
            match lookup(&self.shared.snapshot()) {
                Err(WalError::SegmentReplaced { .. }) if reread(attempts) => attempts += 1,
                other => return other,
            }
        }
    }
}
