//! KIP-890 part 1's verification guard, on a partition leader: a
//! transactional batch that would open a transaction here must have been
//! verified with the transaction coordinator, and no marker for its
//! producer may have been decided since the verification began.
//!
//! Verification is asked outside the partition's worker (a call to the
//! coordinator, perhaps on another node), so between its answer and the
//! batch's decision the coordinator could end the transaction and its
//! marker land here first; the late batch would then open a transaction
//! the coordinator knows nothing of, which holds the last stable offset
//! back for ever. The guard closes that window as Kafka's
//! `VerificationGuard` does: the produce path takes a guard before asking
//! the coordinator, the worker decides the batch only while the producer's
//! guard is still that one, and deciding a marker for the producer ends
//! its guard. Guards are the leader's local bookkeeping: they decide only
//! whether a request is refused, never what an entry holds.

use std::collections::HashMap;

/// Most producers with a verification under way on one partition. Beyond
/// it every guard is dropped (their batches are refused with
/// INVALID_TXN_STATE and the clients abort and retry): memory stays bounded
/// whatever clients do.
const MAX_GUARDS: usize = 10_000;

/// The producers of one partition whose verification is under way.
#[derive(Debug, Default)]
pub struct VerificationGuards {
    next: u64,
    by_producer: HashMap<i64, u64>,
    /// Verifications asked of a coordinator for this partition (one per
    /// batch that needed one): what tests count (operators have the
    /// node's `txn_verifications` counter).
    #[cfg(test)]
    asked: u64,
}

impl VerificationGuards {
    /// The guard of `producer_id`'s verification: the one under way, or a
    /// new one.
    pub fn begin(&mut self, producer_id: i64) -> u64 {
        #[cfg(test)]
        {
            self.asked += 1;
        }
        crate::metrics::Metrics::count(&crate::metrics::metrics().counters.txn_verifications, 1);
        if !self.by_producer.contains_key(&producer_id) && self.by_producer.len() >= MAX_GUARDS {
            self.by_producer.clear();
        }
        let next = &mut self.next;
        *self.by_producer.entry(producer_id).or_insert_with(|| {
            *next += 1;
            *next
        })
    }

    /// Whether a batch verified under `guard` may still open a transaction
    /// of `producer_id`.
    pub fn holds(&self, producer_id: i64, guard: Option<u64>) -> bool {
        guard.is_some() && self.by_producer.get(&producer_id).copied() == guard
    }

    /// How many verifications were asked of a coordinator.
    #[cfg(test)]
    pub fn asked(&self) -> u64 {
        self.asked
    }

    /// A marker for `producer_id` was decided: its verification is over.
    pub fn end(&mut self, producer_id: i64) {
        self.by_producer.remove(&producer_id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_guard_holds_until_a_marker_for_its_producer() {
        let mut g = VerificationGuards::default();
        let first = g.begin(7);
        assert_eq!(g.begin(7), first, "one verification under way per producer");
        assert!(g.holds(7, Some(first)));
        assert!(!g.holds(7, None), "an unverified batch");
        assert!(!g.holds(8, Some(first)), "another producer's guard");
        g.end(7);
        assert!(!g.holds(7, Some(first)), "a marker came between");
        let second = g.begin(7);
        assert_ne!(second, first);
        assert!(g.holds(7, Some(second)) && !g.holds(7, Some(first)));
    }
}
