//! The replica's derived state (producers, transactions, the largest
//! timestamp) as a snapshot (`scan::Snapshot`): saved before records are
//! removed and at close, so it outlives the records it came from, and
//! carried to a follower whose log starts over (`restart.rs`).

use helix_wal::PartitionLog;

use super::PartitionState;
use crate::replica::producers::ProducerTable;
use crate::replica::scan::Snapshot;

impl PartitionState {
    /// Saves the derived state as of the log's end, so the next open scans
    /// only what follows, with the acknowledged offset known now.
    /// A carried state not adopted yet is left in place: it covers more
    /// than what this replica rebuilt since its log started over.
    pub(super) fn snapshot(&mut self) {
        if self.carried.is_some() {
            return;
        }
        self.producers.expire();
        let producers = std::mem::take(&mut self.producers);
        let snapshot = self.derived_state(producers);
        if snapshot.index != 0
            && let Err(e) = snapshot.save(&self.dir)
        {
            tracing::warn!(error = %e, "saving the state snapshot failed");
        }
        self.producers = snapshot.producers;
    }

    /// The derived state as of the log's end, with `producers` (index 0,
    /// never used, when the log holds no entry).
    pub(super) fn derived_state(&self, producers: ProducerTable) -> Snapshot {
        let log = self.log.as_ref();
        let at = log
            .and_then(PartitionLog::last_position)
            .unwrap_or_default();
        Snapshot {
            index: at.index,
            term: at.term,
            covers: log.map_or(0, PartitionLog::next_offset),
            producers,
            max_timestamp: self
                .published
                .max_timestamp
                .lock()
                .map(|m| *m)
                .unwrap_or(None),
            acknowledged_offset: self.published.high_watermark.borrow().0,
            carried: false,
        }
    }
}
