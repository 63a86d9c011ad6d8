//! The leader's side of a produce proposal: it decides which requests go
//! into the log (idempotence, ADR 0022), answers the rest, and proposes
//! one entry for the batch.
//!
//! When the node's in-memory Raft log has no room, the batch is held (in
//! order, with every later batch behind it) and proposed again at the next
//! tick, never failed: a client retrying a failed request would store it
//! after requests it sent later (ADR 0011). Held requests keep their room
//! in the node's produce budget, which bounds them.
//!
//! A leader that cannot decide yet (its predecessors' entries are not all
//! applied, or it is handing leadership over) holds requests the same way,
//! never refuses them: a refusal followed, a moment later, by the
//! acceptance of the same producer's next request leaves a gap its client
//! sees as OUT_OF_ORDER_SEQUENCE_NUMBER, and librdkafka answers that by
//! bumping the epoch and renumbering everything not yet acknowledged,
//! including batches a deposed leader stored and answered NOT_LEADER:
//! duplicates (issue 29 finding 5, ADR 0024). A leader whose lease lapsed
//! refuses (ADR 0019), as does any replica that does not lead.

use std::time::Instant;

use helix_raft::{LogIndex, ProposeError, RaftGroup, Role};

use super::PartitionState;
use crate::batcher::PendingProduce;
use crate::error::HelixError;
use crate::metrics::{Metrics, Stage, metrics};
use crate::replica::answers::{Waiter, fail_requests};
use crate::replica::entry;
use crate::replica::producers::Decision;

/// Where the sequence gap a rejection reports starts, if it reports one.
fn gap_start(err: &HelixError) -> Option<i32> {
    match err {
        HelixError::OutOfOrderSequence { expected, .. } => Some(*expected),
        // A producer never seen here must start at 0.
        HelixError::UnknownProducerId(_) => Some(0),
        _ => None,
    }
}

/// What a replica may do with produce requests now.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Readiness {
    /// Decide and propose.
    Decide,
    /// Keep them, in order, and ask again.
    Hold,
    /// Answer NOT_LEADER_OR_FOLLOWER.
    Refuse,
}

/// A leader holding its lease decides once it has applied an entry of its
/// own term; until then it holds. Two reasons, one rule:
/// - every entry before its term's must be applied: its producer table
///   must have seen them (ADR 0022);
/// - its own first entry must be committed: until then its log is not
///   final. Another replica may hold entries of an older term that this
///   leader lacks (a deposed leader's, answered NOT_LEADER), and if this
///   term commits nothing, a later leader may commit them. Deciding before
///   that answered OUT_OF_ORDER_SEQUENCE_NUMBER to the batch after one of
///   them; librdkafka bumped its epoch and sent the stored batches again
///   (duplicates, ADR 0024 amendment).
///
/// A leader without its lease (it may be cut off while the others elect,
/// ADR 0019) and any other replica refuse.
pub(super) fn readiness(group: &RaftGroup, applied: LogIndex) -> Readiness {
    if group.role() != Role::Leader || group.lease_ticks_left() == 0 {
        return Readiness::Refuse;
    }
    if group.term_at(applied) == Some(group.term()) {
        Readiness::Decide
    } else {
        Readiness::Hold
    }
}

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

    /// Proposes (or refuses) held batches again, oldest first, until one
    /// must still wait. True when one was proposed or answered.
    pub fn retry_held(&mut self, group: &mut RaftGroup) -> bool {
        let mut moved = false;
        while let Some(batch) = self.held.pop_front() {
            if let Some(back) = self.try_propose(group, batch, Instant::now()) {
                self.held.push_front(back);
                break;
            }
            moved = true;
        }
        moved
    }

    /// Whether requests are held (no room, or not ready to decide).
    pub fn holds_requests(&self) -> bool {
        !self.held.is_empty()
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
        let Some(log) = self.log.as_ref() else {
            fail_requests(batch, &HelixError::ShuttingDown, &self.published.refused);
            return None;
        };
        match readiness(group, self.applied) {
            Readiness::Decide => {}
            Readiness::Hold => return Some(batch),
            Readiness::Refuse => {
                fail_requests(batch, &HelixError::NotLeader, &self.published.refused);
                return None;
            }
        }
        let guards = self
            .published
            .verifications
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let (decisions, staged) = self.proposed.decide(
            group.term().0,
            &self.producers,
            log.next_offset(),
            batch.iter().map(|p| p.batches.as_slice()),
            |i, pid| guards.holds(pid, batch[i].verified),
        );
        drop(guards);
        let mut waiting = Vec::with_capacity(batch.len());
        let mut refused = self.published.refused.lock().ok().filter(|r| !r.is_empty());
        for (p, decision) in batch.into_iter().zip(decisions) {
            match decision {
                Decision::Reject(err) => {
                    let ours = refused
                        .as_deref()
                        .zip(gap_start(&err))
                        .is_some_and(|(r, at)| {
                            r.left_gap(p.sender.producer_id, p.sender.epoch, at)
                        });
                    let err = if ours { HelixError::NotLeader } else { err };
                    if let Some(reply) = p.reply {
                        let _ = reply.send(Err(err));
                    }
                }
                d => {
                    // Stored in order: no gap of its is left (a duplicate
                    // closes none).
                    if let (Decision::Append { .. }, Some(r)) = (&d, refused.as_mut()) {
                        r.forget(p.sender.producer_id);
                    }
                    waiting.push((p, d));
                }
            }
        }
        drop(refused);
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
            // No room, or leadership is being handed over: held, in order.
            // Refused now, a request could be followed by its producer's
            // next one accepted here should the hand-over fail.
            Err(ProposeError::Backpressure | ProposeError::TransferInProgress(_)) => {
                return Some(waiting.into_iter().map(|(p, _)| p).collect());
            }
            Err(e) => {
                let err: HelixError = e.into();
                fail_requests(
                    waiting.into_iter().map(|(p, _)| p),
                    &err,
                    &self.published.refused,
                );
            }
        }
        None
    }
}

#[cfg(test)]
mod tests;
