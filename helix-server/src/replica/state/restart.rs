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

#[cfg(test)]
mod tests {
    use helix_raft::{Entry, EntryKind, LogIndex, Term};

    use crate::offset::Offset;
    use crate::replica::entry;
    use crate::replica::txn_tests::{apply, open_replica, replica_with_scenario, scenario};

    /// The leader's WAL entry at `index`, as catch-up sends a restart's
    /// first entry (stored, with its offsets).
    fn stored_at(r: &crate::replica::Recovered, index: u64) -> Entry {
        let held = r
            .state
            .entries_from(LogIndex(index))
            .expect("open")
            .next_stored()
            .expect("held")
            .expect("read");
        Entry {
            term: Term(1),
            index: LogIndex(index),
            kind: EntryKind::Normal,
            data: entry::encode_stored(held.first_offset, held.next_offset, &held.batches),
        }
    }

    /// A follower that applied entries 1-2 (A's and B's transactions open)
    /// starts over at the leader's entry 6 (offset 8, A's next
    /// transaction): B's transaction, open on it before, holds nothing
    /// back; it ends with the leader's bytes, LSO and high watermark.
    #[test]
    fn a_restarted_replica_rebuilds_its_transactions_from_what_remains() {
        let dir = tempfile::tempdir().expect("tempdir");
        let leader = replica_with_scenario(&dir.path().join("leader"));
        let mut follower = open_replica(&dir.path().join("follower"));
        for (i, data) in scenario().into_iter().take(2).enumerate() {
            apply(&mut follower, i as u64 + 1, data);
        }
        follower.state.acknowledged(LogIndex(2));
        assert_eq!(follower.partition.last_stable_offset(), Offset(2));

        let first = stored_at(&leader, 6);
        let rest = Entry {
            term: Term(1),
            index: LogIndex(7),
            kind: EntryKind::Normal,
            data: scenario()[6].clone(),
        };
        let entries = vec![first, rest];
        follower
            .state
            .restart(LogIndex(6), &entries)
            .expect("restart");
        assert_eq!(follower.partition.log_start_offset(), Offset(8));
        follower.state.apply(entries).expect("apply");
        follower.state.acknowledged(LogIndex(7));
        assert_eq!(follower.partition.log_end_offset(), Offset(10));
        assert_eq!(
            follower.partition.last_stable_offset(),
            leader.partition.last_stable_offset()
        );
        assert_eq!(
            follower.partition.high_watermark(),
            leader.partition.high_watermark()
        );
        let read = |r: &crate::replica::Recovered| {
            r.partition.reader().read(8, 1 << 20).expect("read").bytes
        };
        assert_eq!(read(&follower), read(&leader), "the leader's bytes");
        // A restart without its stored first entry is refused.
        assert!(follower.state.restart(LogIndex(8), &[]).is_err());
    }
}
