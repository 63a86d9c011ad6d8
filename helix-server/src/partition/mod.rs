//! A partition: its log, its (one-voter for now) Raft group, its batcher and
//! the worker task that drives them. Connections talk to a partition only
//! through [`Partition`]: produce requests go in through the batcher's
//! channel; reads go straight to the log reader, bounded by the high
//! watermark (the acknowledged offset).

pub mod apply;
pub mod batch;
pub mod entry;
pub mod producers;
pub mod raft;
pub mod store;
mod worker;

use std::path::Path;
use std::sync::Arc;

use bytes::Bytes;
use tokio::sync::{mpsc, oneshot, watch};

use crate::batcher::{BatchLimits, Batcher, PartitionCommand, PendingProduce};
use crate::config::WriteDurability;
use crate::error::{HelixError, Result};
use producers::ProducerTable;
use store::{LogReader, PartitionLog};

/// Requests queued to one partition's worker before senders wait. The
/// node-wide backpressure limit is what really bounds memory.
const COMMAND_QUEUE: usize = 4096;

/// How a partition's worker runs.
#[derive(Debug, Clone, Copy)]
pub struct PartitionSettings {
    pub batch: BatchLimits,
    pub durability: WriteDurability,
}

/// The shared handle of one partition.
#[derive(Debug)]
pub struct Partition {
    pub index: i32,
    commands: mpsc::Sender<PartitionCommand>,
    reader: LogReader,
    high_watermark: watch::Receiver<i64>,
    leader_epoch: i32,
}

impl Partition {
    /// Opens the partition stored in `dir`, recovers it and starts its worker.
    pub fn open(
        dir: &Path,
        topic: &str,
        index: i32,
        settings: PartitionSettings,
    ) -> Result<Arc<Partition>> {
        let (log, recovery) = PartitionLog::open(dir)?;
        let reader = log.reader();
        let producers = ProducerTable::rebuild(&reader.headers()?);
        let group = raft::OneVoterGroup::start(dir, recovery.last_epoch.max(0) as u64)?;
        let leader_epoch = i32::try_from(group.term().0)
            .map_err(|_| HelixError::CorruptState("raft term above i32".into()))?;
        let (hw_tx, hw_rx) = watch::channel(recovery.next_offset);
        let (tx, rx) = mpsc::channel(COMMAND_QUEUE);
        tracing::debug!(
            topic,
            index,
            next_offset = recovery.next_offset,
            log_start_offset = recovery.log_start_offset,
            "opened partition"
        );
        if recovery.truncated_bytes > 0 {
            tracing::warn!(
                topic,
                index,
                bytes = recovery.truncated_bytes,
                "recovered a torn log tail"
            );
        }
        let state = worker::WorkerState::new(log, group, producers, hw_tx, settings.durability);
        tokio::spawn(worker::run(Batcher::new(rx, settings.batch), state));
        Ok(Arc::new(Partition {
            index,
            commands: tx,
            reader,
            high_watermark: hw_rx,
            leader_epoch,
        }))
    }

    /// Queues a validated produce request.
    pub async fn produce(&self, p: PendingProduce) -> Result<()> {
        self.commands
            .send(PartitionCommand::Produce(p))
            .await
            .map_err(|_| HelixError::ShuttingDown)
    }

    /// Moves the log start offset to `before` (DeleteRecords).
    pub async fn delete_records(&self, before: i64) -> Result<i64> {
        let (reply, rx) = oneshot::channel();
        self.commands
            .send(PartitionCommand::DeleteRecords { before, reply })
            .await
            .map_err(|_| HelixError::ShuttingDown)?;
        rx.await.map_err(|_| HelixError::ShuttingDown)?
    }

    /// Asks the worker to apply retention (fire and forget).
    pub fn retention(&self, min_timestamp: Option<i64>, max_bytes: Option<u64>) {
        let _ = self.commands.try_send(PartitionCommand::Retention {
            min_timestamp,
            max_bytes,
        });
    }

    /// The acknowledged end: what consumers may read, exclusive.
    pub fn high_watermark(&self) -> i64 {
        *self.high_watermark.borrow()
    }

    /// A receiver that changes whenever the high watermark moves.
    pub fn watch_high_watermark(&self) -> watch::Receiver<i64> {
        self.high_watermark.clone()
    }

    pub fn log_start_offset(&self) -> i64 {
        self.reader.log_start_offset()
    }

    /// The current leader epoch (= Raft term).
    pub fn leader_epoch(&self) -> i32 {
        self.leader_epoch
    }

    /// Batches from `from` up to the high watermark, at most `max_bytes`
    /// (but at least one whole batch).
    pub fn read(&self, from: i64, max_bytes: usize) -> Result<Bytes> {
        let hw = self.high_watermark();
        if from < self.log_start_offset() || from > hw {
            return Err(HelixError::OffsetOutOfRange);
        }
        self.reader.read(from, hw, max_bytes)
    }

    pub fn reader(&self) -> &LogReader {
        &self.reader
    }
}
