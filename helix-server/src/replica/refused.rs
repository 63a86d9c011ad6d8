//! The idempotent requests this replica answered "not the leader" without
//! storing them, remembered by producer until it stores one of theirs.
//!
//! A node answers a producer's pipelined requests NOT_LEADER_OR_FOLLOWER
//! while it campaigns, wins a moment later, and then decides the next
//! request in flight: against its log that request follows a gap (the
//! refused ones), an OUT_OF_ORDER_SEQUENCE_NUMBER. librdkafka reads that
//! answer after a failed request as "renumber": it bumps its epoch and
//! sends again, from sequence 0, batches another leader may already have
//! stored: duplicates (issue 29, seed 2026; ADR 0024, "Refused, then
//! decided"). A gap that starts at a sequence this replica refused is
//! answered NOT_LEADER_OR_FOLLOWER instead, which the client retries in
//! order from its first unacknowledged batch, filling the gap.
//!
//! Why it is safe: a leader decides only once it has applied every entry
//! before its own term's first, so a refused batch that another leader
//! stored and that was committed is in its table, and no gap starts at
//! it. A gap that starts at a refused batch is one this node's refusal
//! left and its client will fill.
//!
//! What is remembered decides only which retriable error a rejected
//! request gets, never what is stored, so it may be local and lost on
//! restart. It is bounded: past [`MAX_PRODUCERS`] producers it starts
//! over, and each keeps its last [`MAX_PER_PRODUCER`] refusals (forgetting
//! costs only the old answer, never data).

use std::collections::HashMap;

use crate::batcher::Sender;

/// Producers remembered at most.
pub const MAX_PRODUCERS: usize = 1024;

/// Refused requests remembered per producer (a client has at most five in
/// flight per partition).
pub const MAX_PER_PRODUCER: usize = 16;

/// Kafka's producer id for "no producer" (not idempotent).
const NO_PRODUCER_ID: i64 = -1;

#[derive(Debug, Default)]
pub struct Refused {
    /// Producer id → (epoch, base sequence) of its refused requests.
    producers: HashMap<i64, Vec<(i16, i32)>>,
}

impl Refused {
    /// This replica answered `sender`'s request NOT_LEADER_OR_FOLLOWER
    /// without storing it.
    pub fn note(&mut self, sender: Sender) {
        if sender.producer_id == NO_PRODUCER_ID {
            return;
        }
        if self.producers.len() >= MAX_PRODUCERS
            && !self.producers.contains_key(&sender.producer_id)
        {
            self.producers.clear();
        }
        let starts = self.producers.entry(sender.producer_id).or_default();
        let start = (sender.epoch, sender.base_sequence);
        if !starts.contains(&start) {
            if starts.len() >= MAX_PER_PRODUCER {
                starts.remove(0);
            }
            starts.push(start);
        }
    }

    /// Whether a gap in `producer_id`'s sequences at `epoch` that starts at
    /// `expected` is one this replica's refusal left.
    pub fn left_gap(&self, producer_id: i64, epoch: i16, expected: i32) -> bool {
        self.producers
            .get(&producer_id)
            .is_some_and(|starts| starts.contains(&(epoch, expected)))
    }

    /// One of `producer_id`'s requests was stored: it is in order again.
    pub fn forget(&mut self, producer_id: i64) {
        if !self.producers.is_empty() {
            self.producers.remove(&producer_id);
        }
    }

    pub fn is_empty(&self) -> bool {
        self.producers.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sender(producer_id: i64, epoch: i16, base_sequence: i32) -> Sender {
        Sender {
            producer_id,
            epoch,
            base_sequence,
        }
    }

    #[test]
    fn only_a_gap_starting_at_a_refused_sequence_of_that_epoch_is_excused() {
        let mut r = Refused::default();
        r.note(sender(7, 0, 1505));
        assert!(r.left_gap(7, 0, 1505));
        assert!(r.left_gap(7, 0, 1505), "until the gap is filled");
        assert!(!r.left_gap(7, 0, 1504), "a gap this replica did not leave");
        assert!(!r.left_gap(7, 1, 1505), "another epoch");
        assert!(!r.left_gap(8, 0, 1505), "another producer");
        r.forget(7);
        assert!(!r.left_gap(7, 0, 1505), "a stored request closed the gap");
    }

    #[test]
    fn non_idempotent_requests_are_not_remembered_and_memory_is_bounded() {
        let mut r = Refused::default();
        r.note(Sender::NONE);
        assert!(r.is_empty());
        for seq in 0..(MAX_PER_PRODUCER as i32 + 5) {
            r.note(sender(1, 0, seq));
        }
        assert!(!r.left_gap(1, 0, 0), "the oldest refusal gave way");
        assert!(r.left_gap(1, 0, MAX_PER_PRODUCER as i32 + 4));
        for pid in 0..(MAX_PRODUCERS as i64 + 10) {
            r.note(sender(pid, 0, 0));
            assert!(r.producers.len() <= MAX_PRODUCERS);
        }
        assert!(
            r.left_gap(MAX_PRODUCERS as i64 + 9, 0, 0),
            "the newest is kept"
        );
    }
}
