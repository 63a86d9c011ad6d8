//! The transactional side of the producer table (ADR 0026 §3): open
//! transactions, their markers, the last stable offset's bound and the
//! aborted-transaction index, all derived from the log in log order.
//!
//! A marker is judged once, by the leader, before it is proposed
//! ([`Proposed::decide_marker`], Kafka's `ProducerAppendInfo` checks for an
//! end-transaction marker): a marker for an epoch older than the
//! producer's, or from an older coordinator, never enters the log, so a
//! delayed marker cannot end a later transaction and no replica decides on
//! its own (ADR 0022). Applying a marker ([`ProducerTable::end_txn`])
//! judges nothing.

use std::collections::HashMap;

use super::{Known, ProducerState, ProducerTable, Proposed, Staged};
use crate::error::{HelixError, Result};
use crate::replica::aborted_index::AbortedIndex;
use crate::replica::markers::{AbortedTxn, Marker};

/// Whether a marker may end the open transaction of a producer the table
/// knows as `known`. Kafka's rules: an epoch older than the producer's is
/// INVALID_PRODUCER_EPOCH; a coordinator epoch older than the one of the
/// producer's last marker is TRANSACTION_COORDINATOR_FENCED. A producer
/// the table does not know takes any marker (Kafka appends it too).
pub fn check_marker(known: Known<'_>, m: &Marker) -> Result<()> {
    let Known::Live(s) = known else {
        return Ok(());
    };
    if m.producer_epoch < s.epoch {
        return Err(HelixError::InvalidProducerEpoch);
    }
    if m.coordinator_epoch < s.coordinator_epoch {
        return Err(HelixError::TransactionCoordinatorFenced);
    }
    Ok(())
}

impl ProducerState {
    /// Ends the open transaction, if any, with the marker; returns its
    /// first offset.
    fn end_txn(&mut self, m: &Marker) -> Option<i64> {
        if m.producer_epoch != self.epoch {
            self.epoch = m.producer_epoch;
            self.recent.clear();
        }
        self.coordinator_epoch = m.coordinator_epoch;
        self.last_timestamp = self.last_timestamp.max(m.timestamp);
        self.txn_first_offset.take()
    }
}

impl ProducerTable {
    /// Applies the marker stored at `offset` (every replica, in log order,
    /// also when rebuilding from the log). Returns the first offset of the
    /// transaction it ended; a marker with none open ends nothing and is
    /// not indexed (Kafka 3.9's `appendEndTxnMarker`).
    pub fn end_txn(&mut self, m: &Marker, offset: i64) -> Option<i64> {
        self.clock = self.clock.max(m.timestamp);
        let state = self.producers.entry(m.producer_id).or_default();
        let first = state.end_txn(m)?;
        self.open_txns.remove(&(first, m.producer_id));
        if !m.commit {
            self.aborted.push(AbortedTxn {
                producer_id: m.producer_id,
                first_offset: first,
                last_offset: offset,
            });
        }
        Some(first)
    }

    /// The first offset of the oldest open transaction (Kafka's
    /// `firstUnstableOffset` without the replication part, which the
    /// replica adds: `state/txn.rs`).
    pub fn first_unstable(&self) -> Option<i64> {
        self.open_txns.first().map(|(first, _)| *first)
    }

    /// The producers with a transaction open, and their epochs.
    pub fn ongoing(&self) -> HashMap<i64, i16> {
        self.open_txns
            .iter()
            .filter_map(|(_, pid)| self.producers.get(pid).map(|s| (*pid, s.epoch)))
            .collect()
    }

    /// Whether any transaction is open (cheap: the non-transactional path
    /// asks only this).
    pub fn any_open(&self) -> bool {
        !self.open_txns.is_empty()
    }

    /// The aborted-transaction index: sealed chunks and the recent tail.
    pub fn aborted_index(&self) -> &AbortedIndex {
        &self.aborted
    }

    pub fn aborted_index_mut(&mut self) -> &mut AbortedIndex {
        &mut self.aborted
    }

    /// Replaces the aborted index (a log restart's carried entries).
    pub fn set_aborted_index(&mut self, index: AbortedIndex) {
        self.aborted = index;
    }

    /// Drops aborted transactions wholly below the log start (their
    /// records are gone, as Kafka deletes a segment's `.txnindex` with
    /// it); the caller removes the chunk files no longer named.
    pub fn trim_aborted(&mut self, log_start: i64) {
        self.aborted.trim(log_start);
    }

    /// The first offset of the producer's open transaction.
    #[cfg(test)]
    pub fn open_txn_of(&self, producer_id: i64) -> Option<i64> {
        self.producers
            .get(&producer_id)
            .and_then(|s| s.txn_first_offset)
    }
}

/// What one stored batch (`h` its header, `batch` its bytes) changes in
/// the producer state, judged by nothing (it was judged when first
/// applied): at open, and when a stored entry is applied (catch-up from a
/// compacted leader). Returns the marker of a control batch and the first
/// offset of the transaction it ended, if one was open.
pub fn derive_from_stored(
    producers: &mut ProducerTable,
    h: &crate::replica::batch::BatchHeader,
    batch: &[u8],
) -> Option<(crate::replica::markers::Marker, Option<i64>)> {
    if h.is_control() {
        // Only end-transaction markers are written here; a control batch
        // of another kind (or one emptied by the cleaner) changes no
        // producer.
        let m = crate::replica::markers::read_marker(batch)?;
        let ended = producers.end_txn(&m, h.base_offset);
        Some((m, ended))
    } else {
        producers.record(h, h.base_offset);
        None
    }
}

impl Proposed {
    /// The leader decides a marker against what the log holds (`table`,
    /// applied up to `log_end`) and what it already proposed in `term`;
    /// accepted, it is staged like a produce proposal of one record.
    pub fn decide_marker(
        &mut self,
        term: u64,
        table: &ProducerTable,
        log_end: i64,
        m: &Marker,
    ) -> Result<Staged> {
        if term != self.term {
            self.clear();
            self.term = term;
        }
        let pid = m.producer_id;
        let current = self
            .producers
            .get(&pid)
            .map_or_else(|| table.known(pid), |(s, _)| Known::Live(s));
        check_marker(current, m)?;
        let end_offset = self.in_flight.back().map_or(log_end, |(_, end)| *end);
        let mut after = match current {
            Known::Live(s) => s.clone(),
            Known::Never | Known::Forgotten => ProducerState::default(),
        };
        after.end_txn(m);
        Ok(Staged {
            producers: HashMap::from([(pid, after)]),
            end_offset: end_offset + 1,
        })
    }
}
