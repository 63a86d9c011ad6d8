//! The leader's side of a produce proposal: it decides which requests go
//! into the log (idempotence, ADR 0022), answers the rest, and proposes
//! one entry for the batch.
//!
//! When the node's in-memory Raft log has no room, the batch is held (in
//! order, with every later batch behind it) and proposed again at the next
//! tick, never failed: a client retrying a failed request would store it
//! after requests it sent later (ADR 0011). Held requests keep their room
//! in the node's produce budget, which bounds them.

use std::time::Instant;

use helix_raft::{LogIndex, ProposeError, RaftGroup, Role};

use super::PartitionState;
use crate::batcher::PendingProduce;
use crate::error::HelixError;
use crate::metrics::{Metrics, Stage, metrics};
use crate::partition::answers::{Waiter, copy_error};
use crate::partition::entry;
use crate::partition::producers::Decision;

impl PartitionState {
    pub(super) fn propose_produce(&mut self, group: &mut RaftGroup, batch: Vec<PendingProduce>) {
        let now = Instant::now();
        let m = metrics();
        let (mut records, mut bytes) = (0u64, 0u64);
        for p in &batch {
            m.record(Stage::BatcherQueueWait, now.duration_since(p.enqueued));
            bytes += p.size as u64;
            records += p
                .batches
                .iter()
                .filter_map(|b| helix_wal::BatchHeader::parse(b).ok())
                .map(|h| u64::try_from(h.record_count).unwrap_or(0))
                .sum::<u64>();
        }
        m.batch_records.record(records);
        m.batch_bytes.record(bytes);
        if !self.held.is_empty() {
            self.held.push_back(batch);
            return;
        }
        if let Some(back) = self.try_propose(group, batch, now) {
            self.held.push_back(back);
        }
    }

    /// Proposes held batches again, oldest first, until one still finds no
    /// room. True when one was proposed.
    pub fn retry_held(&mut self, group: &mut RaftGroup) -> bool {
        let mut proposed = false;
        while let Some(batch) = self.held.pop_front() {
            if let Some(back) = self.try_propose(group, batch, Instant::now()) {
                self.held.push_front(back);
                break;
            }
            proposed = true;
        }
        proposed
    }

    /// Decides and proposes one batch; gives back what the in-memory log
    /// had no room for (undecided: decided again when retried).
    fn try_propose(
        &mut self,
        group: &mut RaftGroup,
        batch: Vec<PendingProduce>,
        now: Instant,
    ) -> Option<Vec<PendingProduce>> {
        let m = metrics();
        // The leader decides which requests go into the log, once, against
        // a producer table that must have seen every entry before its own:
        // everything not yet applied must be of its term (ADR 0022).
        let unapplied_term = group.term_at(LogIndex(self.applied.0 + 1));
        let Some(log) = self.log.as_ref() else {
            fail_requests(batch, &HelixError::ShuttingDown);
            return None;
        };
        if group.role() != Role::Leader || unapplied_term.is_some_and(|t| t != group.term()) {
            fail_requests(batch, &HelixError::NotLeader);
            return None;
        }
        let (decisions, staged) = self.proposed.decide(
            group.term().0,
            &self.producers,
            log.next_offset(),
            batch.iter().map(|p| p.batches.as_slice()),
        );
        let mut waiting = Vec::with_capacity(batch.len());
        for (p, decision) in batch.into_iter().zip(decisions) {
            match decision {
                Decision::Reject(err) => {
                    if let Some(reply) = p.reply {
                        let _ = reply.send(Err(err));
                    }
                }
                d => waiting.push((p, d)),
            }
        }
        if waiting.is_empty() {
            return None;
        }
        // Duplicates travel in the entry's waiter only: they are answered
        // once this entry, after their original, is acknowledged.
        let data = entry::encode_produce(
            waiting
                .iter()
                .filter(|(_, d)| matches!(d, Decision::Append { .. }))
                .map(|(p, _)| p.batches.as_slice()),
        );
        match group.propose(data) {
            Ok(index) => {
                Metrics::count(&m.counters.raft_entries, 1);
                // The entry holds its own copy: the requests' bytes (their
                // frames) are freed now, not when they are answered.
                for (p, _) in &mut waiting {
                    p.batches = Vec::new();
                }
                self.proposed.commit(index.0, staged);
                self.waiting
                    .push_back((group.term(), index, Waiter::Produce(waiting), now));
            }
            Err(ProposeError::Backpressure) => {
                return Some(waiting.into_iter().map(|(p, _)| p).collect());
            }
            Err(e) => {
                let err: HelixError = e.into();
                fail_requests(waiting.into_iter().map(|(p, _)| p).collect(), &err);
            }
        }
        None
    }
}

/// Answers each request with `err`.
pub(super) fn fail_requests(requests: Vec<PendingProduce>, err: &HelixError) {
    for p in requests {
        if let Some(reply) = p.reply {
            let _ = reply.send(Err(copy_error(err)));
        }
    }
}
