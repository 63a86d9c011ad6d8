//! The task that owns a partition's WAL and Raft group: takes batches from
//! the batcher, proposes them, applies what Raft commits (appends to the
//! WAL), reports the WAL end as durable (after the group-committed fsync in
//! fsync mode), and answers requests up to the acknowledged index.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, RwLock};
use std::time::Instant;

use helix_raft::{EntryKind, LogIndex, RaftGroup};
use helix_wal::{Durability, LogConfig, LogReader, PartitionLog, RaftPosition};
use tokio::sync::{oneshot, watch};

use super::apply::{Applied, apply_produce};
use super::entry::{self, PartitionEntry};
use super::producers::ProducerTable;
use super::raft::HardStateFile;
use super::scan::{MaxTimestamp, Snapshot};
use crate::batcher::{
    Batcher, PartitionCommand, PendingProduce, ProduceAck, ProduceOutcome, Room, Work,
};
use crate::error::{HelixError, Result};
use crate::metrics::{Metrics, Stage, metrics};

/// Who waits for a proposed entry.
#[derive(Debug)]
enum Waiter {
    Produce(Vec<PendingProduce>),
    DeleteRecords(oneshot::Sender<Result<i64>>),
}

/// An applied entry whose acks=all answers wait for the acknowledged index.
#[derive(Debug)]
struct Unacked {
    index: LogIndex,
    /// Log end offset right after this entry: the high watermark once it is
    /// acknowledged.
    end_offset: i64,
    /// Each answer keeps its request's backpressure room until it is sent.
    answers: Vec<(oneshot::Sender<ProduceOutcome>, ProduceOutcome, Room)>,
    delete_reply: Option<(oneshot::Sender<Result<i64>>, Result<i64>)>,
    proposed_at: Option<Instant>,
}

pub(super) struct WorkerState {
    /// The partition's directory (snapshots of derived state live here).
    dir: std::path::PathBuf,
    /// Always Some, except for the instant of a reopen (see `reconfigure`).
    log: Option<PartitionLog>,
    /// The readers' handle, replaced when the log is reopened.
    reader: Arc<RwLock<LogReader>>,
    group: RaftGroup,
    hard_state: HardStateFile,
    producers: ProducerTable,
    high_watermark: watch::Sender<i64>,
    max_timestamp: Arc<Mutex<MaxTimestamp>>,
    /// Proposed entries in index order with who waits for them.
    waiting: VecDeque<(LogIndex, Waiter, Instant)>,
    unacked: VecDeque<Unacked>,
}

pub(super) async fn run(mut batcher: Batcher, mut state: WorkerState) {
    while let Some(work) = batcher.next().await {
        match work {
            Work::Produce(batch) => state.propose_produce(batch),
            Work::Control(PartitionCommand::Produce(p)) => state.propose_produce(vec![p]),
            Work::Control(PartitionCommand::DeleteRecords { before, reply }) => {
                match state.group.propose(entry::encode_delete_records(before)) {
                    Ok(index) => state.waiting.push_back((
                        index,
                        Waiter::DeleteRecords(reply),
                        Instant::now(),
                    )),
                    Err(e) => {
                        let _ = reply.send(Err(e.into()));
                    }
                }
            }
            Work::Control(PartitionCommand::Close { reply }) => {
                state.fail_all(&HelixError::ShuttingDown);
                state.snapshot();
                if let Some(log) = state.log.take()
                    && let Err(e) = blocking(|| log.close())
                {
                    tracing::warn!(error = %e, "closing the log failed");
                }
                let _ = reply.send(());
                return;
            }
            Work::Control(PartitionCommand::Reconfigure { log }) => {
                if let Err(e) = state.reconfigure(log) {
                    tracing::error!(error = %e, "reopening the log with new settings failed; partition stopped");
                    state.fail_all(&e);
                    return;
                }
                continue;
            }
            Work::Control(PartitionCommand::Retention { now_ms }) => {
                state.retention(now_ms);
                continue;
            }
        }
        if let Err(e) = state.drive() {
            tracing::error!(error = %e, "partition worker stopped");
            state.fail_all(&e);
            return;
        }
    }
}

/// What the worker publishes to the partition's readers.
pub(super) struct Published {
    pub reader: Arc<RwLock<LogReader>>,
    pub high_watermark: watch::Sender<i64>,
    pub max_timestamp: Arc<Mutex<MaxTimestamp>>,
}

impl WorkerState {
    pub(super) fn new(
        dir: std::path::PathBuf,
        log: PartitionLog,
        group: RaftGroup,
        hard_state: HardStateFile,
        producers: ProducerTable,
        published: Published,
    ) -> WorkerState {
        WorkerState {
            dir,
            log: Some(log),
            reader: published.reader,
            group,
            hard_state,
            producers,
            high_watermark: published.high_watermark,
            max_timestamp: published.max_timestamp,
            waiting: VecDeque::new(),
            unacked: VecDeque::new(),
        }
    }

    fn propose_produce(&mut self, batch: Vec<PendingProduce>) {
        let now = Instant::now();
        let m = metrics();
        for p in &batch {
            m.record(Stage::BatcherQueueWait, now.duration_since(p.enqueued));
        }
        let data = entry::encode_produce(batch.iter().map(|p| p.batches.as_slice()));
        match self.group.propose(data) {
            Ok(index) => {
                Metrics::count(&m.counters.raft_entries, 1);
                self.waiting.push_back((index, Waiter::Produce(batch), now));
            }
            Err(e) => {
                let err: HelixError = e.into();
                for p in batch {
                    if let Some(reply) = p.reply {
                        let _ = reply.send(Err(copy_error(&err)));
                    }
                }
            }
        }
    }

    /// Does what the Raft group asks, in the order `Ready` documents, until
    /// it has nothing more. An error here means the WAL cannot be trusted
    /// any more: the partition stops.
    pub(super) fn drive(&mut self) -> Result<()> {
        let m = metrics();
        loop {
            let ready = self.group.ready();
            if let Some(hs) = ready.hard_state {
                self.hard_state.store(hs)?;
            }
            if let Some(after) = ready.truncate_wal_after {
                // Only a follower truncates; a one-voter group never does.
                return Err(HelixError::CorruptState(format!(
                    "unexpected WAL truncation after {}",
                    after.0
                )));
            }
            let mut last_applied = None;
            for e in ready.to_apply {
                let pos = RaftPosition {
                    term: e.term.0,
                    index: e.index.0,
                };
                let proposed_at = self.take_waiter_time(e.index);
                if let Some(at) = proposed_at {
                    m.record(Stage::RaftCommit, at.elapsed());
                }
                let started = Instant::now();
                let waiter = match e.kind {
                    EntryKind::Noop => {
                        live(&mut self.log)?.append(pos, &[])?;
                        None
                    }
                    EntryKind::Normal => Some(self.apply_normal(pos, e.data)?),
                };
                m.record(Stage::WalAppend, started.elapsed());
                let unacked = self.settle(e.index, waiter, proposed_at);
                self.unacked.push_back(unacked);
                last_applied = Some(e.index);
            }
            if let Some(last) = last_applied {
                let log = live(&mut self.log)?;
                if log.config().durability == Durability::Fsync {
                    let started = Instant::now();
                    blocking(|| log.sync())?;
                    m.record(Stage::Fsync, started.elapsed());
                }
                let durable = live(&mut self.log)?
                    .durable_position()
                    .map_or(LogIndex(0), |p| LogIndex(p.index));
                self.group.durable_to(durable.min(last))?;
            }
            if let Some(ack) = ready.acknowledged {
                self.answer_acknowledged(ack);
            }
            if !self.group.has_ready() {
                return Ok(());
            }
        }
    }

    /// When the entry at `index` was proposed here (None for entries this
    /// node did not propose, such as the leader's no-op).
    fn take_waiter_time(&self, index: LogIndex) -> Option<Instant> {
        self.waiting
            .front()
            .filter(|(i, _, _)| *i == index)
            .map(|(_, _, t)| *t)
    }

    /// Applies a normal entry; returns the waiter with per-request results.
    fn apply_normal(
        &mut self,
        pos: RaftPosition,
        data: bytes::Bytes,
    ) -> Result<(Option<Waiter>, Applying)> {
        let waiter = match self.waiting.front() {
            Some((i, _, _)) if i.0 == pos.index => self.waiting.pop_front().map(|(_, w, _)| w),
            _ => None,
        };
        let result = match entry::decode(data)? {
            PartitionEntry::Produce { lengths, data } => {
                let mut max_ts = self.max_timestamp.lock().map(|m| *m).unwrap_or(None);
                let outcomes = apply_produce(
                    live(&mut self.log)?,
                    &mut self.producers,
                    pos,
                    &lengths,
                    data,
                    &mut max_ts,
                )?;
                if let Ok(mut m) = self.max_timestamp.lock() {
                    *m = max_ts;
                }
                Applying::Produce(outcomes)
            }
            PartitionEntry::DeleteRecords { before } => {
                live(&mut self.log)?.append(pos, &[])?;
                let hw = *self.high_watermark.borrow();
                let result = if before > hw {
                    Err(HelixError::OffsetOutOfRange)
                } else {
                    live(&mut self.log)?
                        .delete_records_before(before)
                        .map(|o| o.log_start_offset)
                        .map_err(HelixError::from)
                };
                Applying::DeleteRecords(result)
            }
        };
        Ok((waiter, result))
    }

    /// Pairs an applied entry's results with its waiters: acks=1 and errors
    /// are answered now, acks=all held until acknowledged, acks=0 dropped.
    fn settle(
        &mut self,
        index: LogIndex,
        applied: Option<(Option<Waiter>, Applying)>,
        proposed_at: Option<Instant>,
    ) -> Unacked {
        let (log_start, end_offset) = self
            .log
            .as_ref()
            .map_or((-1, -1), |l| (l.log_start_offset(), l.next_offset()));
        let mut unacked = Unacked {
            index,
            end_offset,
            answers: Vec::new(),
            delete_reply: None,
            proposed_at,
        };
        match applied {
            None | Some((None, _)) => {}
            Some((Some(Waiter::Produce(requests)), Applying::Produce(outcomes))) => {
                for (p, outcome) in requests.into_iter().zip(outcomes) {
                    let answer = match outcome {
                        Applied::Appended { base_offset } => Ok(ProduceAck {
                            base_offset,
                            log_start_offset: log_start,
                            duplicate: false,
                        }),
                        Applied::Duplicate { base_offset } => Ok(ProduceAck {
                            base_offset,
                            log_start_offset: log_start,
                            duplicate: true,
                        }),
                        Applied::Rejected(err) => Err(err),
                    };
                    let Some(reply) = p.reply else { continue };
                    if p.acks == 1 || answer.is_err() {
                        let _ = reply.send(answer);
                    } else {
                        unacked.answers.push((reply, answer, p.room));
                    }
                }
            }
            Some((Some(Waiter::DeleteRecords(reply)), Applying::DeleteRecords(result))) => {
                unacked.delete_reply = Some((reply, result));
            }
            Some((Some(waiter), _)) => {
                tracing::error!(?index, "entry kind does not match its waiter");
                fail_waiter(
                    waiter,
                    &HelixError::CorruptState("entry kind does not match its waiter".into()),
                );
            }
        }
        unacked
    }

    fn answer_acknowledged(&mut self, acknowledged: LogIndex) {
        let m = metrics();
        while self
            .unacked
            .front()
            .is_some_and(|u| u.index <= acknowledged)
        {
            let Some(u) = self.unacked.pop_front() else {
                break;
            };
            if let Some(at) = u.proposed_at {
                m.record(Stage::Ack, at.elapsed());
            }
            self.high_watermark.send_replace(u.end_offset);
            for (reply, answer, room) in u.answers {
                let _ = reply.send(answer);
                drop(room);
            }
            if let Some((reply, result)) = u.delete_reply {
                let _ = reply.send(result);
            }
        }
    }

    /// Retention as Kafka does it: whole sealed segments beyond
    /// `retention.bytes` or older than `retention.ms` are deleted; the active
    /// segment never is. The limits are those the log was opened with (a
    /// changed topic setting applies from the next open, see docs/adr/0010).
    fn retention(&mut self, now_ms: i64) {
        self.snapshot();
        let Ok(log) = live(&mut self.log) else { return };
        if let Err(e) = log.apply_retention(now_ms) {
            tracing::warn!(error = %e, "retention failed");
        }
    }

    /// Applies changed topic settings (retention, segment size) that the WAL
    /// takes only at open: closes the log and opens it again with `config`.
    /// Readers switch to the new handle; appends wait in the queue meanwhile.
    fn reconfigure(&mut self, config: LogConfig) -> Result<()> {
        let Some(old) = self.log.take() else {
            return Err(HelixError::CorruptState("partition log is closed".into()));
        };
        let dir = old.dir().to_path_buf();
        old.close()?;
        let (log, recovery) = PartitionLog::open(&dir, config)?;
        if recovery.truncated_tail.is_some() {
            return Err(HelixError::CorruptState(
                "a cleanly closed log reopened with a torn tail".into(),
            ));
        }
        if let Ok(mut r) = self.reader.write() {
            *r = log.reader();
        }
        self.log = Some(log);
        Ok(())
    }

    /// Saves the derived state as of the log's end, so the next open scans
    /// only what follows. Taken between entries, so it matches the log.
    fn snapshot(&mut self) {
        let Some(log) = self.log.as_ref() else { return };
        let snapshot = Snapshot {
            covers: log.next_offset(),
            producers: std::mem::take(&mut self.producers),
            max_timestamp: self.max_timestamp.lock().map(|m| *m).unwrap_or(None),
        };
        if let Err(e) = snapshot.save(&self.dir) {
            tracing::warn!(error = %e, "saving the state snapshot failed");
        }
        self.producers = snapshot.producers;
    }

    /// The partition stops: everyone still waiting gets an error.
    fn fail_all(&mut self, err: &HelixError) {
        for (_, waiter, _) in self.waiting.drain(..) {
            fail_waiter(waiter, err);
        }
        for u in self.unacked.drain(..) {
            for (reply, _, _) in u.answers {
                let _ = reply.send(Err(copy_error(err)));
            }
            if let Some((reply, _)) = u.delete_reply {
                let _ = reply.send(Err(copy_error(err)));
            }
        }
    }
}

/// Runs a blocking file operation (fsync) from the worker: through
/// `block_in_place` on a multi-threaded runtime, so other tasks move to
/// another thread meanwhile; directly on a current-thread runtime (tests),
/// where `block_in_place` is not allowed.
fn blocking<T>(f: impl FnOnce() -> T) -> T {
    match tokio::runtime::Handle::try_current().map(|h| h.runtime_flavor()) {
        Ok(tokio::runtime::RuntimeFlavor::MultiThread) => tokio::task::block_in_place(f),
        _ => f(),
    }
}

/// The open log; an error only if a reopen failed earlier.
fn live(log: &mut Option<PartitionLog>) -> Result<&mut PartitionLog> {
    log.as_mut()
        .ok_or_else(|| HelixError::CorruptState("partition log is closed".into()))
}

/// What applying a normal entry produced.
#[derive(Debug)]
enum Applying {
    Produce(Vec<Applied>),
    DeleteRecords(Result<i64>),
}

fn fail_waiter(waiter: Waiter, err: &HelixError) {
    match waiter {
        Waiter::Produce(requests) => {
            for p in requests {
                if let Some(reply) = p.reply {
                    let _ = reply.send(Err(copy_error(err)));
                }
            }
        }
        Waiter::DeleteRecords(reply) => {
            let _ = reply.send(Err(copy_error(err)));
        }
    }
}

/// The same failure for another waiter (errors are not Clone: they may
/// hold an io::Error). Storage failures stay storage failures.
fn copy_error(err: &HelixError) -> HelixError {
    match err {
        HelixError::NotLeader => HelixError::NotLeader,
        HelixError::RaftBackpressure => HelixError::RaftBackpressure,
        HelixError::ShuttingDown => HelixError::ShuttingDown,
        other => HelixError::Io(std::io::Error::other(other.to_string())),
    }
}
