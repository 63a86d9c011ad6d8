//! The replica's side of transactions (ADR 0026 §3): proposing a marker
//! (leader), applying it (every replica), and publishing the last stable
//! offset and the aborted-transaction index for readers.
//!
//! The last stable offset is the high watermark held back by every
//! transaction that is open in the log, or ended by a marker not yet
//! acknowledged (Kafka's `firstUnstableOffset`): a function of the applied
//! log and the acknowledged offset, so a new leader has it at once.

use std::sync::atomic::Ordering;
use std::time::Instant;

use helix_raft::RaftGroup;
use helix_wal::RaftPosition;
use tokio::sync::oneshot;

use super::propose::{Readiness, readiness};
use super::{PartitionState, live};
use crate::error::{HelixError, Result};
use crate::replica::answers::Waiter;
use crate::replica::apply;
use crate::replica::entry;
use crate::replica::markers::{AbortedTxn, Marker};
use crate::replica::txn_index;

impl PartitionState {
    /// The leader decides the marker (a stale epoch or coordinator never
    /// enters the log) and proposes it; `reply` gets its offset once it is
    /// acknowledged. A replica that cannot decide now answers NOT_LEADER:
    /// the coordinator retries markers, as Kafka's does.
    pub(super) fn propose_marker(
        &mut self,
        group: &mut RaftGroup,
        marker: Marker,
        reply: oneshot::Sender<Result<i64>>,
    ) {
        let Some(log) = self.log.as_ref() else {
            let _ = reply.send(Err(HelixError::ShuttingDown));
            return;
        };
        if readiness(group, self.applied) != Readiness::Decide {
            let _ = reply.send(Err(HelixError::NotLeader));
            return;
        }
        let staged = match self.proposed.decide_marker(
            group.term().0,
            &self.producers,
            log.next_offset(),
            &marker,
        ) {
            Ok(staged) => staged,
            Err(e) => {
                let _ = reply.send(Err(e));
                return;
            }
        };
        match group.propose(entry::encode_marker(&marker)) {
            Ok(index) => {
                // A batch verified before this marker must not open a
                // transaction after it (`replica::verification`).
                self.published
                    .verifications
                    .lock()
                    .unwrap_or_else(|poisoned| poisoned.into_inner())
                    .end(marker.producer_id);
                self.proposed.commit(index.0, staged);
                self.waiting.push_back((
                    group.term(),
                    index,
                    Waiter::Marker(reply),
                    Instant::now(),
                ));
            }
            Err(e) => {
                let _ = reply.send(Err(e.into()));
            }
        }
    }

    /// Applies a marker entry; returns the marker's offset.
    pub(super) fn apply_marker(&mut self, pos: RaftPosition, marker: &Marker) -> Result<i64> {
        let mut max_ts = self
            .published
            .max_timestamp
            .lock()
            .map(|m| *m)
            .unwrap_or(None);
        let (offset, ended) = apply::apply_marker(
            live(&mut self.log)?,
            &mut self.producers,
            pos,
            marker,
            &mut max_ts,
        )?;
        if let Ok(mut m) = self.published.max_timestamp.lock() {
            *m = max_ts;
        }
        if let Some(first) = ended {
            self.txn_ended(marker, first, offset);
        }
        Ok(offset)
    }

    /// A marker at `offset` ended the transaction that began at `first`:
    /// it holds the last stable offset until acknowledged, and an abort
    /// joins the aborted index.
    pub(super) fn txn_ended(&mut self, marker: &Marker, first: i64, offset: i64) {
        self.unreplicated.push_back((first, offset));
        if marker.commit {
            return;
        }
        let dir = txn_index::dir_of(&self.dir);
        if txn_index::seal_if_full(&dir, self.producers.aborted_index_mut()) {
            self.publish_aborted();
        } else if let Ok(mut view) = self.published.aborted.write() {
            view.index.push(AbortedTxn {
                producer_id: marker.producer_id,
                first_offset: first,
                last_offset: offset,
            });
        }
    }

    /// Publishes what holds the last stable offset back once the high
    /// watermark is `hw`: the oldest open transaction, or one whose marker
    /// is not below `hw`. Without transactions: one branch, one load.
    pub(super) fn publish_unstable(&mut self, hw: i64) {
        let mut first = i64::MAX;
        if self.producers.any_open() || !self.unreplicated.is_empty() {
            while self.unreplicated.front().is_some_and(|(_, m)| *m < hw) {
                self.unreplicated.pop_front();
            }
            let ended = self.unreplicated.iter().map(|(first, _)| *first);
            first = ended
                .chain(self.producers.first_unstable())
                .fold(first, i64::min);
        }
        let published = &self.published.first_unstable;
        if published.load(Ordering::Relaxed) != first {
            published.store(first, Ordering::Release);
        }
    }

    /// Publishes the producers with a transaction open and their epochs
    /// (`Partition::in_ongoing_txn`), after entries were applied or the
    /// table rebuilt. Without transactions, open now or published before:
    /// one branch and one read.
    pub(super) fn publish_ongoing(&mut self) {
        let mut published = self
            .published
            .ongoing
            .write()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if !self.producers.any_open() && published.is_empty() {
            return;
        }
        let now = self.producers.ongoing();
        if *published != now {
            *published = now;
        }
    }

    /// Publishes the whole aborted index again (the table was rebuilt or
    /// trimmed) and the last stable offset.
    pub(super) fn publish_txns(&mut self) {
        self.publish_ongoing();
        self.publish_aborted();
        let hw = self.published.high_watermark.borrow().0;
        self.publish_unstable(hw);
    }

    /// Publishes the aborted index again (a chunk was sealed, or the
    /// table rebuilt or trimmed): bounded, the tail and the chunks'
    /// descriptions.
    pub(super) fn publish_aborted(&mut self) {
        if let Ok(mut view) = self.published.aborted.write() {
            view.dir = txn_index::dir_of(&self.dir);
            view.index = self.producers.aborted_index().clone();
        }
    }

    /// The log start moved: aborted transactions wholly below it go, with
    /// their chunk files.
    pub(super) fn trim_aborted(&mut self) {
        let Some(start) = self.log.as_ref().map(|l| l.log_start_offset()) else {
            return;
        };
        if self.producers.aborted_index().any_below(start) {
            self.producers.trim_aborted(start);
            self.publish_txns();
            txn_index::remove_unlisted(
                &txn_index::dir_of(&self.dir),
                self.producers.aborted_index(),
            );
        }
    }

    /// Aborted entries held in memory (the replicated table's tail).
    #[cfg(test)]
    pub fn aborted_held(&self) -> usize {
        self.producers.aborted_index().held()
    }
}
