//! Positions the log speaks in: Raft positions and the results it returns.

use bytes::Bytes;

/// A Raft entry's position: its term (the Kafka leader epoch) and index.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct RaftPosition {
    pub term: u64,
    pub index: u64,
}

/// A DeleteRecords Raft entry this log applied and keeps for catch-up
/// (`log/delete_records.rs`): it asked for a larger `offset` than every
/// earlier one, and moved the log start there (at least).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeleteRecordsEntry {
    pub index: u64,
    pub offset: i64,
}

/// How much of an entry `append` checks before writing it.
///
/// Structure is always checked: every batch whole, magic 2, its declared
/// length and lastOffsetDelta consistent, base offsets contiguous from
/// `next_offset()`. Only the CRC-32C over each batch's body is optional, for
/// a caller that already verified it on bytes whose CRC-covered part it has
/// not changed since (patching baseOffset and partitionLeaderEpoch does not
/// touch it). Recovery always verifies CRCs, whichever mode wrote the data.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum AppendCheck {
    /// Structure and the CRC-32C of every batch (what [`append`] does).
    ///
    /// [`append`]: crate::PartitionLog::append
    #[default]
    Full,
    /// Structure only: the caller verified each batch's CRC-32C itself.
    CrcVerifiedByCaller,
}

/// What `append` stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AppendInfo {
    /// Offset of the entry's first record (= next offset when it holds no batch).
    pub first_offset: i64,
    /// Offset after the entry's last record: the log's new next offset.
    pub next_offset: i64,
    /// Bytes of batches written.
    pub bytes: usize,
    /// Largest `maxTimestamp` among the entry's batches, if any.
    pub max_timestamp: Option<i64>,
}

/// What opening a log found and repaired.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Recovery {
    pub next_offset: i64,
    pub log_start_offset: i64,
    /// The last entry the log holds, `None` when it holds none.
    pub last_position: Option<RaftPosition>,
    /// What a torn or corrupt tail cut, if anything.
    pub truncated_tail: Option<TruncatedTail>,
    /// Ranges before the tail that failed verification and are refused.
    pub damaged: Vec<DamagedRange>,
    /// Bytes of log data re-read and verified by recovery (the tail).
    pub scanned_bytes: u64,
    /// Whether an interrupted `truncate_after` was completed.
    pub finished_truncation: bool,
}

/// The part of the log that recovery cut off because it was torn or corrupt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TruncatedTail {
    /// First offset no longer held (the new next offset).
    pub from_offset: i64,
    /// Bytes of log data removed, over all affected segments.
    pub bytes: u64,
    /// Entries (by Raft index) removed, when their records were readable.
    pub entries: u64,
    pub reason: String,
}

/// A stored range that failed verification; reads reaching it get
/// [`crate::WalError::Corrupt`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DamagedRange {
    pub segment_base_offset: i64,
    pub file: std::path::PathBuf,
    pub position: u64,
    pub reason: String,
}

/// Batch-aligned bytes returned by a read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReadResult {
    /// Whole batches, the first containing the requested offset. Empty when
    /// the requested offset is the log's next offset.
    pub bytes: Bytes,
    /// Base offset of the first batch in `bytes` (the requested offset when empty).
    pub first_offset: i64,
    /// Offset after the last batch in `bytes`.
    pub next_offset: i64,
    /// The log's next offset when the read happened.
    pub log_end_offset: i64,
    pub log_start_offset: i64,
}

/// The end of a leader epoch, as OffsetForLeaderEpoch reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EpochEnd {
    /// The largest term held that is ≤ the requested one.
    pub term: u64,
    /// The first offset after that term's entries (the first offset of the next
    /// term, or the log's next offset).
    pub end_offset: i64,
}

/// One Raft entry as the WAL stores it: its position, the offsets it was
/// given at apply, and its batches. After compaction the batches may cover
/// only part of `[first_offset, next_offset)`, or be empty (ADR 0027).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredEntry {
    pub pos: RaftPosition,
    pub first_offset: i64,
    pub next_offset: i64,
    pub batches: bytes::Bytes,
}

/// One segment of a log, as `LogReader::segments` reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SegmentInfo {
    pub base_offset: i64,
    /// Offset after its last entry.
    pub next_offset: i64,
    pub bytes: u64,
    /// Largest batch max timestamp; `i64::MIN` when it has none.
    pub max_timestamp: i64,
    /// Raft index of its first entry, if it holds one.
    pub first_index: Option<u64>,
}
