//! A follower's log started over at the leader's first held entry
//! (helix-raft's `Ready::restart_wal_at`): the leader deleted, below its
//! log start, entries this replica still needed, so it has this replica
//! drop its log and start again where the leader's does. Catch-up sends
//! that first entry as a stored entry, which carries the offset it starts
//! at: the WAL starts there, its log start too (later DeleteRecords
//! entries raise it as on the leader), and what is derived from the log
//! (producers, transactions) is rebuilt from what remains, as after a
//! truncation.

use helix_raft::{Entry, LogIndex};

use super::{PartitionState, live};
use crate::error::{HelixError, Result};
use crate::metrics::{Metrics, metrics};
use crate::replica::entry;
use crate::replica::scan::Snapshot;

impl PartitionState {
    /// Empties the WAL so that `entries`, which start at index `at` with
    /// the leader's first held entry, are applied onto it next.
    pub fn restart(&mut self, at: LogIndex, entries: &[Entry]) -> Result<()> {
        let first_offset = entries
            .first()
            .filter(|e| e.index == at)
            .and_then(|e| entry::stored_range(&e.data))
            .map(|(first, _)| first)
            .ok_or_else(|| {
                HelixError::CorruptState(format!(
                    "the log restarts at index {} without a stored entry there",
                    at.0
                ))
            })?;
        live(&mut self.log)?.restart_at(first_offset)?;
        self.applied = at.prev();
        self.proposed.clear();
        // A snapshot describes offsets this log no longer holds.
        Snapshot::remove(&self.dir);
        self.rebuild_after_cut(LogIndex(0), None)?;
        Metrics::count(&metrics().counters.wal_truncations, 1);
        tracing::warn!(dir = %self.dir.display(), index = at.0, offset = first_offset, "log started over at the leader's first held entry");
        Ok(())
    }
}
