//! The crate's single error type. Every fault a caller can see is one of these
//! variants; nothing in the WAL panics on input or disk faults.

use std::io;
use std::path::PathBuf;

use thiserror::Error;

use crate::batch::BatchError;

#[derive(Debug, Error)]
pub enum WalError {
    /// The disk refused an operation (ENOSPC, EIO, ...). Nothing that was
    /// already acknowledged is affected; the failed append left no bytes.
    #[error("{op} {path}: {source}")]
    Io {
        op: &'static str,
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    /// A batch handed to `append` is malformed; nothing was written.
    #[error("batch at byte {at} of the entry: {source}")]
    InvalidBatch {
        at: usize,
        #[source]
        source: BatchError,
    },
    /// A batch's base offset does not continue the log.
    #[error("batch at byte {at} has base offset {found}, expected {expected}")]
    NonContiguousOffset {
        at: usize,
        expected: i64,
        found: i64,
    },
    /// A Raft position does not follow the last one (index must be last + 1,
    /// term must not decrease).
    #[error(
        "raft position {term}/{index} does not follow the log's last entry {last_term}/{last_index}"
    )]
    NonContiguousPosition {
        term: u64,
        index: u64,
        last_term: u64,
        last_index: u64,
    },
    /// An entry is larger than one segment can address.
    #[error("entry of {bytes} bytes exceeds the maximum of {max}")]
    EntryTooLarge { bytes: usize, max: usize },
    /// A read or lookup outside `[log_start_offset, next_offset]`.
    #[error("offset {offset} is outside the log [{log_start}, {next_offset}]")]
    OffsetOutOfRange {
        offset: i64,
        log_start: i64,
        next_offset: i64,
    },
    /// `truncate_after` below the first entry the log still holds.
    #[error("cannot truncate after index {index}: the log starts at entry {first_index}")]
    TruncateBelowStart { index: u64, first_index: u64 },
    /// Entry `index` is below the first entry the log still holds.
    #[error("entry {index} is no longer held: the log starts at entry {first_index}")]
    EntryNotHeld { index: u64, first_index: u64 },
    /// Stored data failed its checks somewhere other than the torn tail.
    /// The range is refused rather than served.
    #[error("corrupt data in {file} at byte {position}: {reason}")]
    Corrupt {
        file: PathBuf,
        position: u64,
        reason: String,
    },
    /// A group-commit round this caller waited for failed to fsync a log
    /// (`errno` as the OS reported it). The failed log accepts no more writes.
    #[error("group commit failed (os error {errno}): {reason}")]
    SyncFailed { errno: i32, reason: String },
    /// An earlier I/O failure left the log in a state it could not roll back;
    /// only reads of what was already written are served until reopen.
    #[error("log {dir} failed earlier and accepts no more writes until reopened")]
    Failed { dir: PathBuf },
    /// A read met a segment that a compaction swap replaced while the read
    /// ran; the same read from the current segment list succeeds.
    #[error("segment {base_offset} was replaced by compaction during the read")]
    SegmentReplaced { base_offset: i64 },
    /// A compaction swap no longer matches the log (retention, DeleteRecords
    /// or a reopen changed its segments since the pass planned it); nothing
    /// was swapped.
    #[error("compaction swap refused: {0}")]
    SwapRefused(String),
    #[error("invalid configuration: {0}")]
    InvalidConfig(String),
}

impl WalError {
    pub(crate) fn io(op: &'static str, path: impl Into<PathBuf>, source: io::Error) -> Self {
        WalError::Io {
            op,
            path: path.into(),
            source,
        }
    }

    /// The OS error number behind an I/O failure, if any (ENOSPC = 28, EIO = 5).
    pub fn raw_os_error(&self) -> Option<i32> {
        match self {
            WalError::Io { source, .. } => source.raw_os_error(),
            WalError::SyncFailed { errno, .. } => Some(*errno),
            _ => None,
        }
    }
}

pub type Result<T, E = WalError> = std::result::Result<T, E>;
