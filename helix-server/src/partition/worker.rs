//! The task that owns a partition's log and Raft group: takes batches from
//! the batcher, proposes them, applies what Raft commits, reports the WAL
//! end as durable, and answers requests up to the acknowledged index.

use std::collections::VecDeque;
use std::time::Instant;

use tokio::sync::{oneshot, watch};

use super::apply::{Applied, apply_produce};
use super::entry::{self, PartitionEntry};
use super::producers::ProducerTable;
use super::raft::{LogIndex, OneVoterGroup};
use super::store::PartitionLog;
use crate::batcher::{
    Batcher, PartitionCommand, PendingProduce, ProduceAck, ProduceOutcome, Room, Work,
};
use crate::config::WriteDurability;
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
    proposed_at: Instant,
}

pub(super) struct WorkerState {
    log: PartitionLog,
    group: OneVoterGroup,
    producers: ProducerTable,
    high_watermark: watch::Sender<i64>,
    durability: WriteDurability,
    waiting: VecDeque<(LogIndex, Waiter, Instant)>,
    unacked: VecDeque<Unacked>,
}

pub(super) async fn run(mut batcher: Batcher, mut state: WorkerState) {
    while let Some(work) = batcher.next().await {
        match work {
            Work::Produce(batch) => state.propose_produce(batch),
            Work::Control(PartitionCommand::DeleteRecords { before, reply }) => {
                let index = state.group.propose(entry::encode_delete_records(before));
                state
                    .waiting
                    .push_back((index, Waiter::DeleteRecords(reply), Instant::now()));
            }
            Work::Control(PartitionCommand::Retention {
                min_timestamp,
                max_bytes,
            }) => {
                if let Err(e) = state.log.apply_retention(min_timestamp, max_bytes) {
                    tracing::warn!(error = %e, "retention failed");
                }
                continue;
            }
            Work::Control(PartitionCommand::Produce(p)) => state.propose_produce(vec![p]),
        }
        state.drive();
    }
}

impl WorkerState {
    pub(super) fn new(
        log: PartitionLog,
        group: OneVoterGroup,
        producers: ProducerTable,
        high_watermark: watch::Sender<i64>,
        durability: WriteDurability,
    ) -> WorkerState {
        WorkerState {
            log,
            group,
            producers,
            high_watermark,
            durability,
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
        let index = self.group.propose(data);
        Metrics::count(&m.counters.raft_entries, 1);
        self.waiting.push_back((index, Waiter::Produce(batch), now));
    }

    /// Applies what Raft committed, reports durability, answers what is
    /// acknowledged.
    fn drive(&mut self) {
        let m = metrics();
        let ready = self.group.ready();
        let mut last_applied = None;
        for e in ready.to_apply {
            let Some((index, waiter, proposed_at)) = self.waiting.pop_front() else {
                tracing::error!("committed entry without a waiter");
                continue;
            };
            debug_assert_eq!(index, e.index);
            m.record(Stage::RaftCommit, proposed_at.elapsed());
            let term = i32::try_from(e.term.0).unwrap_or(i32::MAX);
            let started = Instant::now();
            let applied = entry::decode(e.data).and_then(|decoded| match decoded {
                PartitionEntry::Produce { lengths, data } => {
                    apply_produce(&mut self.log, &mut self.producers, term, &lengths, data)
                        .map(Some)
                }
                PartitionEntry::DeleteRecords { before } => {
                    self.log.delete_records_before(before).map(|_| None)
                }
            });
            m.record(Stage::WalAppend, started.elapsed());
            let log_start = self.log.reader().log_start_offset();
            let mut unacked = Unacked {
                index: e.index,
                end_offset: self.log.next_offset(),
                answers: Vec::new(),
                delete_reply: None,
                proposed_at,
            };
            match (waiter, applied) {
                (Waiter::Produce(requests), Ok(Some(outcomes))) => {
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
                        self.answer_or_hold(p, answer, &mut unacked);
                    }
                }
                (Waiter::Produce(requests), Err(err)) => {
                    tracing::error!(error = %err, "applying a produce entry failed");
                    for p in requests {
                        let answer = Err(HelixError::Io(std::io::Error::other(err.to_string())));
                        self.answer_or_hold(p, answer, &mut unacked);
                    }
                }
                (Waiter::DeleteRecords(reply), result) => {
                    let result = result.map(|_| self.log.reader().log_start_offset());
                    unacked.delete_reply = Some((reply, result));
                }
                (Waiter::Produce(requests), Ok(None)) => {
                    for p in requests {
                        let answer = Err(HelixError::CorruptState("entry kind changed".into()));
                        self.answer_or_hold(p, answer, &mut unacked);
                    }
                }
            }
            self.unacked.push_back(unacked);
            last_applied = Some(e.index);
        }
        let Some(last_applied) = last_applied else {
            return;
        };
        if self.durability == WriteDurability::Fsync {
            let started = Instant::now();
            let synced = tokio::task::block_in_place(|| self.log.sync());
            m.record(Stage::Fsync, started.elapsed());
            if let Err(e) = synced {
                // Not durable: never acknowledge. The requests time out in
                // their connections and the producer retries.
                tracing::error!(error = %e, "fsync failed; entries stay unacknowledged");
                return;
            }
        }
        self.group.durable_to(last_applied);
        let acknowledged = self.group.ready().acknowledged;
        self.answer_acknowledged(acknowledged);
    }

    /// acks=0 requests are dropped (nobody waits); acks=1 are answered after
    /// the local append; acks=all wait for the acknowledged index. Errors
    /// are answered at once: nothing of them was written.
    fn answer_or_hold(&self, p: PendingProduce, answer: ProduceOutcome, unacked: &mut Unacked) {
        let Some(reply) = p.reply else { return };
        if p.acks == 1 || answer.is_err() {
            let _ = reply.send(answer);
        } else {
            unacked.answers.push((reply, answer, p.room));
        }
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
            m.record(Stage::Ack, u.proposed_at.elapsed());
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
}
