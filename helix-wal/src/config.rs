//! Configuration of one partition log, with the defaults a Kafka operator
//! expects (`log.segment.bytes`, `log.roll.ms`, `log.index.interval.bytes`,
//! `retention.bytes`, `retention.ms`).

use crate::budget::FileBudget;
use crate::error::WalError;
use crate::sync::SyncGroup;

/// What "durable" means for one replica (see docs/design.md, Durability).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Durability {
    /// Appended to the page cache; never fsync on the write path.
    #[default]
    ReplicationOnly,
    /// Appended and fsynced through a [`SyncGroup`] group commit.
    Fsync,
}

pub use crate::source::MAX_SEGMENT_BYTES;

#[derive(Debug, Clone)]
pub struct LogConfig {
    /// Roll to a new segment once the active one holds this many bytes.
    /// Default 1 GiB; at most 2 GiB.
    pub segment_bytes: u64,
    /// Roll once the active segment's first batch is this old. Default none.
    pub segment_ms: Option<u64>,
    /// Bytes of batches between two sparse offset/time index entries. Default 4096.
    pub index_interval_bytes: u64,
    /// Delete whole oldest segments while the log exceeds this size. Default none.
    pub retention_bytes: Option<u64>,
    /// Delete whole segments whose newest timestamp is older than this. Default none.
    pub retention_ms: Option<u64>,
    /// Default [`Durability::ReplicationOnly`].
    pub durability: Durability,
    /// Group committer shared by the node's logs; required for
    /// [`Durability::Fsync`], created privately when absent.
    pub sync_group: Option<SyncGroup>,
    /// Cap on mapped sealed segments shared by the node's logs; a private
    /// budget of [`FileBudget::DEFAULT_MAX_MAPPED`] when absent.
    pub file_budget: Option<FileBudget>,
    /// Write a recovery checkpoint after this many appended bytes, bounding
    /// what recovery re-reads after a crash. Default 16 MiB.
    pub checkpoint_interval_bytes: u64,
}

impl Default for LogConfig {
    fn default() -> Self {
        LogConfig {
            segment_bytes: 1 << 30,
            segment_ms: None,
            index_interval_bytes: 4096,
            retention_bytes: None,
            retention_ms: None,
            durability: Durability::ReplicationOnly,
            sync_group: None,
            file_budget: None,
            checkpoint_interval_bytes: 16 << 20,
        }
    }
}

impl LogConfig {
    pub(crate) fn validate(&self) -> Result<(), WalError> {
        if self.segment_bytes == 0 || self.segment_bytes > MAX_SEGMENT_BYTES {
            return Err(WalError::InvalidConfig(format!(
                "segment_bytes {} must be in 1..={MAX_SEGMENT_BYTES}",
                self.segment_bytes
            )));
        }
        if self.index_interval_bytes == 0 {
            return Err(WalError::InvalidConfig(
                "index_interval_bytes must be positive".into(),
            ));
        }
        Ok(())
    }
}
