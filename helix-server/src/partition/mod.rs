//! A partition: its WAL (helix-wal), its Raft group (helix-raft, one voter
//! on a single node), its batcher and the worker task that drives them.
//! Connections talk to a partition only through [`Partition`]: produce
//! requests go in through the batcher's channel; reads go straight to the
//! WAL reader, bounded by the high watermark (the acknowledged offset).

pub mod apply;
pub mod batch;
pub mod entry;
pub mod producers;
pub mod raft;
pub mod records;
pub mod scan;
mod worker;

use std::path::Path;
use std::sync::{Arc, Mutex, RwLock};

use bytes::Bytes;
use helix_wal::{LogConfig, LogReader, PartitionLog};
use tokio::sync::{mpsc, oneshot, watch};

use crate::batcher::{BatchLimits, Batcher, PartitionCommand, PendingProduce};
use crate::error::{HelixError, Result};
use scan::MaxTimestamp;

/// Requests queued to one partition's worker before senders wait. The
/// node-wide backpressure limit is what really bounds memory.
const COMMAND_QUEUE: usize = 4096;

/// How a partition is opened.
#[derive(Debug, Clone)]
pub struct PartitionSettings {
    pub node_id: i32,
    /// Raft group id of this partition (unique on the node).
    pub group: u64,
    pub batch: BatchLimits,
    pub log: LogConfig,
}

/// A recovered partition whose worker is not running yet.
pub struct Recovered {
    state: worker::WorkerState,
    batcher: Batcher,
    partition: Partition,
}

impl Recovered {
    /// Starts the worker (needs a tokio runtime).
    pub fn start(self) -> Arc<Partition> {
        tokio::spawn(worker::run(self.batcher, self.state));
        Arc::new(self.partition)
    }
}

/// The shared handle of one partition.
#[derive(Debug)]
pub struct Partition {
    pub index: i32,
    commands: mpsc::Sender<PartitionCommand>,
    /// Shared with the worker, which replaces it when the log is reopened.
    reader: Arc<RwLock<LogReader>>,
    high_watermark: watch::Receiver<i64>,
    leader_epoch: i32,
    max_timestamp: Arc<Mutex<MaxTimestamp>>,
}

impl Partition {
    /// Opens the partition stored in `dir` (WAL in `dir/wal`, Raft vote in
    /// `dir`), recovers it and elects this node; [`Recovered::start`] then
    /// starts its worker. Blocking file I/O and fsyncs, no tokio: many
    /// partitions can recover on plain threads at once.
    pub fn recover(
        dir: &Path,
        topic: &str,
        index: i32,
        settings: PartitionSettings,
    ) -> Result<Recovered> {
        std::fs::create_dir_all(dir)?;
        let (log, recovery) = PartitionLog::open(&dir.join("wal"), settings.log.clone())?;
        let (producers, max_ts) = scan::rebuild(
            &log.reader(),
            recovery.next_offset,
            scan::Snapshot::load(dir),
        )?;
        let reader = Arc::new(RwLock::new(log.reader()));
        let hard_state_file = raft::HardStateFile::new(dir);
        let group = raft::start_group(
            settings.node_id,
            settings.group,
            hard_state_file.load()?,
            recovery.last_position,
        )?;
        let leader_epoch = i32::try_from(group.term().0)
            .map_err(|_| HelixError::CorruptState("raft term above i32".into()))?;
        tracing::debug!(
            topic,
            index,
            next_offset = recovery.next_offset,
            log_start_offset = recovery.log_start_offset,
            leader_epoch,
            "opened partition"
        );
        // Until the new term's no-op is acknowledged (in the first drive
        // below) consumers see what the restored WAL holds durably.
        let (hw_tx, hw_rx) = watch::channel(recovery.next_offset);
        let max_timestamp = Arc::new(Mutex::new(max_ts));
        let (tx, rx) = mpsc::channel(COMMAND_QUEUE);
        let published = worker::Published {
            reader: reader.clone(),
            high_watermark: hw_tx,
            max_timestamp: max_timestamp.clone(),
        };
        let mut state = worker::WorkerState::new(
            dir.to_path_buf(),
            log,
            group,
            hard_state_file,
            producers,
            published,
        );
        state.drive()?;
        Ok(Recovered {
            state,
            batcher: Batcher::new(rx, settings.batch),
            partition: Partition {
                index,
                commands: tx,
                reader,
                high_watermark: hw_rx,
                leader_epoch,
                max_timestamp,
            },
        })
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
    pub fn retention(&self, now_ms: i64) {
        let _ = self
            .commands
            .try_send(PartitionCommand::Retention { now_ms });
    }

    /// Asks the worker to stop after what is queued before this call,
    /// flushing and closing the log; the receiver fires once it has. Lets a
    /// caller close many partitions at once.
    pub async fn begin_close(&self) -> Option<oneshot::Receiver<()>> {
        let (reply, rx) = oneshot::channel();
        self.commands
            .send(PartitionCommand::Close { reply })
            .await
            .ok()?;
        Some(rx)
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
        self.reader().log_start_offset()
    }

    /// The current leader epoch (= Raft term).
    pub fn leader_epoch(&self) -> i32 {
        self.leader_epoch
    }

    /// (base offset, timestamp) of the batch with the largest timestamp.
    pub fn max_timestamp(&self) -> MaxTimestamp {
        self.max_timestamp.lock().ok().and_then(|m| *m)
    }

    /// Whole batches from `from`, at most `max_bytes` (at least one batch),
    /// never past the high watermark. The bytes are the WAL's own slices.
    pub fn read(&self, from: i64, max_bytes: usize) -> Result<Bytes> {
        let hw = self.high_watermark();
        if from < self.log_start_offset() || from > hw {
            return Err(HelixError::OffsetOutOfRange);
        }
        if from == hw {
            return Ok(Bytes::new());
        }
        let read = self.reader().read(from, max_bytes)?;
        if read.next_offset <= hw {
            return Ok(read.bytes);
        }
        // The read reached applied but unacknowledged batches: cut them off
        // at a batch boundary (a slice, no copy).
        let mut end = 0usize;
        while end < read.bytes.len() {
            let h = batch::parse_header(&read.bytes[end..])?;
            if h.base_offset >= hw {
                break;
            }
            end += h.total_len();
        }
        Ok(read.bytes.slice(..end))
    }

    /// The current reader handle (cheap: a clone of an `Arc`).
    pub fn reader(&self) -> LogReader {
        match self.reader.read() {
            Ok(r) => r.clone(),
            Err(poisoned) => poisoned.into_inner().clone(),
        }
    }

    /// New retention / segment settings for the log (reopened in order
    /// with the partition's other work).
    pub async fn reconfigure(&self, log: LogConfig) {
        let _ = self
            .commands
            .send(PartitionCommand::Reconfigure { log })
            .await;
    }
}

/// Closes partitions concurrently: every close is asked for first, then
/// awaited.
pub async fn close_all(partitions: &[Arc<Partition>]) {
    let mut closing = Vec::with_capacity(partitions.len());
    for p in partitions {
        closing.extend(p.begin_close().await);
    }
    for closed in closing {
        let _ = closed.await;
    }
}
