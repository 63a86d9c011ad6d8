//! Transactions seen by the cleaner (Kafka's `CleanedTransactionMetadata`),
//! walking the cleaned range in offset order:
//! - a data batch of an aborted transaction (from the aborted index) may go
//!   whatever its keys, and its keys are never mapped;
//! - an ABORT marker may go once no batch of its transaction is left in
//!   the range (none was seen on this walk: an earlier pass removed them);
//! - a COMMIT marker may go once no batch of its transaction is left
//!   in the range;
//! - "may go" for a marker means "after its delete horizon" (clean.rs).
//!
//! The cleaned range is below the LSO, so every transaction in it has its
//! marker in it or before it: none is still open.

use std::collections::{HashMap, HashSet};

use helix_wal::batch::BatchHeader;

use crate::replica::markers::{AbortedTxn, read_marker};

/// The state of one walk over the cleaned range.
#[derive(Debug, Default)]
pub struct CleanedTxns {
    /// Aborted transactions not reached yet, by first offset, latest first
    /// (popped from the end).
    pending: Vec<AbortedTxn>,
    /// Producer → whether a batch of its aborted transaction was seen.
    aborted: HashMap<i64, bool>,
    /// Producers with a committed transaction's batch seen, marker not yet.
    committed: HashSet<i64>,
}

impl CleanedTxns {
    /// `aborted`: the aborted transactions overlapping the range.
    pub fn new(mut aborted: Vec<AbortedTxn>) -> CleanedTxns {
        aborted.sort_by_key(|a| std::cmp::Reverse((a.first_offset, a.producer_id)));
        CleanedTxns {
            pending: aborted,
            ..CleanedTxns::default()
        }
    }

    /// A data batch: true when it belongs to an aborted transaction.
    pub fn on_data_batch(&mut self, h: &BatchHeader) -> bool {
        self.start_aborted_up_to(h.last_offset());
        if !h.is_transactional() {
            return false;
        }
        match self.aborted.get_mut(&h.producer_id) {
            Some(seen) => {
                *seen = true;
                true
            }
            None => {
                self.committed.insert(h.producer_id);
                false
            }
        }
    }

    /// A control batch: true when its marker may go (after its horizon).
    pub fn on_control_batch(&mut self, h: &BatchHeader, batch: &[u8]) -> bool {
        self.start_aborted_up_to(h.last_offset());
        if h.record_count == 0 {
            // Emptied by an earlier pass.
            return true;
        }
        match read_marker(batch) {
            Some(m) if m.commit => !self.committed.remove(&h.producer_id),
            Some(_) => !self.aborted.remove(&h.producer_id).unwrap_or(false),
            // A control record this broker does not know: kept.
            None => false,
        }
    }

    fn start_aborted_up_to(&mut self, offset: i64) {
        while self
            .pending
            .last()
            .is_some_and(|a| a.first_offset <= offset)
        {
            if let Some(a) = self.pending.pop() {
                self.aborted.entry(a.producer_id).or_insert(false);
            }
        }
    }
}
