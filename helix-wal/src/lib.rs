//! helix-wal: the on-disk log of one Kafka partition.
//!
//! Segments hold Kafka v2 record batches exactly as they are served to
//! consumers, so Fetch never re-encodes. Every batch group is tagged with the
//! Raft position (term, index) of the entry that carried it. No networking and
//! no Raft live here; the server's apply step is the only writer.
//!
//! A partition directory holds, per segment `<base offset>`:
//! `.log` (batches), `.entries` (one record per Raft entry), `.index`
//! (sparse offset → position), `.timeindex` (sparse max timestamp → offset);
//! and per log: `recovery-checkpoint`, `log-start-offset`,
//! `delete-records-entries`, and, only while a
//! truncation runs, `truncate-intent`. See docs/wal.md.

mod active;
pub mod batch;
mod budget;
mod compaction;
mod config;
mod entry_index;
mod error;
mod fault;
mod index;
mod log;
mod meta;
mod positions;
mod reader;
mod recovery;
mod replace;
mod retention;
mod rewrite;
mod segment;
mod shared;
mod source;
mod sync;
mod truncate;
mod types;
mod verify;

pub use batch::{BatchError, BatchHeader, patch_batch_header};
pub use budget::FileBudget;
pub use compaction::{SwapIntent, commit_swap, discard_cleaned};
pub use config::{Durability, LogConfig, MAX_SEGMENT_BYTES};
pub use error::{Result, WalError};
pub use log::PartitionLog;
pub use meta::{
    KeptHorizon, read_cleaner_checkpoint, read_cleaner_horizon, write_cleaner_checkpoint,
    write_cleaner_horizon,
};
pub use positions::EntryStream;
pub use reader::LogReader;
pub use retention::RetentionOutcome;
pub use rewrite::SegmentRewrite;
pub use sync::{SyncGroup, SyncMethod, SyncStats, sync_filesystem};
pub use types::{
    AppendCheck, AppendInfo, DamagedRange, DeleteRecordsEntry, EpochEnd, RaftPosition, ReadResult,
    Recovery, SegmentInfo, StoredEntry, TruncatedTail,
};

#[cfg(test)]
mod tests;
