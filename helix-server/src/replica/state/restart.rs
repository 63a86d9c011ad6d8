//! A follower's log started over at the leader's first held entry
//! (helix-raft's `Ready::restart_wal_at`): the leader deleted, below its
//! log start, entries this replica still needed, so it has this replica
//! drop its log and start again where the leader's does. Catch-up sends
//! that first entry as a stored entry, which carries the offset it starts
//! at: the WAL starts there, its log start too (later DeleteRecords
//! entries raise it as on the leader).
//!
//! What is derived from the log (producers, open transactions, the aborted
//! index) cannot be rebuilt from what remains: a transaction begun below
//! the restart point and ended above it would be missing, its abort not
//! indexed, the last stable offset not held back. So the first entry also
//! carries the leader's derived state as of the leader's last applied
//! entry A (`entry::encode_restart`). Until this replica applies A its
//! state is rebuilt from what it holds, as after a truncation; once A is
//! applied, the carried state replaces it, and from there on it is the
//! leader's state plus the same entries: the state of a replica that
//! applied the whole log. A is committed (the leader applied it), so no
//! leader may ever hold another entry there, and a replica without it
//! cannot lead before it has it. The carried state is saved as this
//! replica's snapshot, so a restart of the process before A keeps it.

use bytes::Bytes;
use helix_raft::{Entry, LogIndex, Term};
use helix_wal::PartitionLog;

use super::{PartitionState, live};
use crate::error::{HelixError, Result};
use crate::metrics::{Metrics, metrics};
use crate::replica::aborted_index::AbortedIndex;
use crate::replica::entry;
use crate::replica::markers::AbortedTxn;
use crate::replica::scan::Snapshot;
use crate::replica::txn_index;

impl PartitionState {
    /// Empties the WAL so that `entries`, which start at index `at` with
    /// the leader's first held entry, are applied onto it next.
    pub fn restart(&mut self, at: LogIndex, entries: &[Entry]) -> Result<()> {
        let first = entries.first().filter(|e| e.index == at);
        let first_offset = first
            .and_then(|e| entry::stored_range(&e.data))
            .map(|(first, _)| first)
            .ok_or_else(|| {
                HelixError::CorruptState(format!(
                    "the log restarts at index {} without a stored entry there",
                    at.0
                ))
            })?;
        let carried = first.and_then(|e| carried_by(e, at));
        live(&mut self.log)?.restart_at(first_offset)?;
        self.applied = at.prev();
        self.proposed.clear();
        // A snapshot describes offsets this log no longer holds.
        Snapshot::remove(&self.dir);
        if let Some(s) = &carried
            && let Err(e) = s.save(&self.dir)
        {
            tracing::warn!(dir = %self.dir.display(), error = %e, "saving the carried state failed");
        }
        self.carried = carried;
        self.rebuild_after_cut(LogIndex(0), None)?;
        Metrics::count(&metrics().counters.wal_truncations, 1);
        tracing::warn!(dir = %self.dir.display(), index = at.0, offset = first_offset, carried_to = self.carried.as_ref().map(|s| s.index), "log started over at the leader's first held entry");
        Ok(())
    }

    /// A state to adopt once its entry is applied: carried by a restart
    /// and found at open ahead of the log (the process stopped before it
    /// got there).
    pub(crate) fn carry(&mut self, carried: Snapshot) {
        self.carried = Some(carried);
    }

    /// After the entry at `index` of `term` is applied: if it is the one
    /// the carried state describes, that state replaces the one rebuilt
    /// since the restart. A state that does not fit the log here (another
    /// term, another end offset: never, unless a bug) is dropped, loudly.
    pub(super) fn adopt_carried(&mut self, term: Term, index: LogIndex) {
        let Some(carried) = self.carried.take_if(|s| s.index <= index.0) else {
            return;
        };
        let (log_start, end) = self
            .log
            .as_ref()
            .map_or((-1, -1), |l| (l.log_start_offset(), l.next_offset()));
        if carried.index != index.0 || carried.term != term.0 || carried.covers != end {
            tracing::error!(
                dir = %self.dir.display(),
                index = index.0,
                term = term.0,
                end,
                carried_index = carried.index,
                carried_term = carried.term,
                carried_end = carried.covers,
                "the carried state does not describe this log; kept the state rebuilt from it"
            );
            return;
        }
        let mut producers = carried.producers;
        producers.set_expiration(self.producers.expiration_ms());
        let merged = self.with_carried_aborts(producers.aborted_index());
        producers.set_aborted_index(merged);
        producers.trim_aborted(log_start);
        self.producers = producers;
        if let Ok(mut m) = self.published.max_timestamp.lock() {
            *m = carried.max_timestamp;
        }
        self.publish_txns();
        tracing::info!(dir = %self.dir.display(), index = index.0, "adopted the state carried by the log restart");
    }

    /// This replica's aborted index (derived since its log restarted)
    /// with the carried entries in place of its own for the same markers:
    /// a transaction begun below the restart point was indexed here from
    /// its first batch this log holds, if at all. Every entry is derived
    /// from the records since the restart point, so the whole index is
    /// rewritten once (its size is what was aborted between the restart
    /// point and the carried entry).
    fn with_carried_aborts(&self, carried: &AbortedIndex) -> AbortedIndex {
        let dir = txn_index::dir_of(&self.dir);
        let own = match txn_index::load_all(&dir, self.producers.aborted_index()) {
            Ok(own) => own,
            Err(e) => {
                tracing::error!(dir = %self.dir.display(), error = %e, "cannot read the aborted index derived since the restart");
                Vec::new()
            }
        };
        let theirs: std::collections::HashSet<(i64, i64)> = carried
            .tail
            .iter()
            .map(|a| (a.producer_id, a.last_offset))
            .collect();
        let mut merged: Vec<AbortedTxn> = own
            .into_iter()
            .filter(|a| !theirs.contains(&(a.producer_id, a.last_offset)))
            .chain(carried.tail.iter().copied())
            .collect();
        merged.sort_by_key(|a| a.last_offset);
        txn_index::rewrite(&dir, merged)
    }

    /// The aborted entries a follower whose log starts over at this
    /// replica's first held entry cannot derive: those of transactions
    /// begun before the end of this replica's first segment holding an
    /// entry (the restart point is in it) and ended at or after the log start. Bounded by the
    /// transactions open across that segment plus those aborted in it.
    fn aborts_to_carry(&self) -> Vec<AbortedTxn> {
        let Some(log) = self.log.as_ref() else {
            return Vec::new();
        };
        let reader = log.reader();
        // The first held entry is in the first segment holding an entry.
        let upper = reader
            .segments()
            .iter()
            .find(|s| s.first_index.is_some())
            .map_or(log.next_offset(), |s| s.next_offset);
        let dir = txn_index::dir_of(&self.dir);
        match txn_index::collect(
            &dir,
            self.producers.aborted_index(),
            log.log_start_offset(),
            upper,
        ) {
            Ok(found) => found,
            Err(e) => {
                tracing::error!(dir = %self.dir.display(), error = %e, "cannot read the aborted index to carry");
                Vec::new()
            }
        }
    }

    /// The derived state to carry with a restart of a follower's log: this
    /// replica's, as of its last applied entry (`None` without a log),
    /// with only the aborted entries the follower cannot derive.
    pub fn state_to_carry(&self) -> Option<Bytes> {
        self.log.as_ref().and_then(PartitionLog::last_position)?;
        let mut producers = self.producers.clone();
        producers.set_aborted_index(AbortedIndex::in_memory(
            self.aborts_to_carry().into_iter().collect(),
        ));
        let snapshot = self.derived_state(producers);
        match snapshot.to_bytes() {
            Ok(bytes) => Some(Bytes::from(bytes)),
            Err(e) => {
                tracing::error!(dir = %self.dir.display(), error = %e, "cannot encode the state to carry");
                None
            }
        }
    }
}

/// The state the restart entry `first` (at `at`) carries, if it carries
/// one this replica will reach (at or after `at`). One it cannot read is
/// ignored: the state is then rebuilt from the log, as before.
fn carried_by(first: &Entry, at: LogIndex) -> Option<Snapshot> {
    let bytes = entry::restart_state(&first.data)?;
    match Snapshot::from_bytes(&bytes) {
        Ok(s) if s.index >= at.0 => Some(Snapshot { carried: true, ..s }),
        Ok(s) => {
            tracing::warn!(
                index = s.index,
                at = at.0,
                "ignoring a carried state from before the restart"
            );
            None
        }
        Err(e) => {
            tracing::warn!(error = %e, "ignoring an unreadable carried state");
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use helix_raft::{Entry, EntryKind, LogIndex, Term};

    use crate::offset::Offset;
    use crate::replica::entry;
    use crate::replica::markers::AbortedTxn;
    use crate::replica::txn_tests::{B, apply, open_replica, replica_with_scenario, scenario};

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

    /// The leader's WAL entry at `index` as the first entry of a restart,
    /// carrying `state`.
    fn restart_entry(r: &crate::replica::Recovered, index: u64, state: &[u8]) -> Entry {
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
            data: entry::encode_restart(held.first_offset, held.next_offset, state, &held.batches),
        }
    }

    fn normal(index: u64, data: bytes::Bytes) -> Entry {
        Entry {
            term: Term(1),
            index: LogIndex(index),
            kind: EntryKind::Normal,
            data,
        }
    }

    fn aborted(r: &crate::replica::Recovered) -> Vec<AbortedTxn> {
        r.partition
            .aborted_transactions(Offset(0), Offset(i64::MAX))
    }

    /// B's transaction begins at offset 4 (entry 2), below the follower's
    /// restart at entry 4 (offset 6, B's second batch), and is aborted at
    /// entry 5 (offset 7). From what it holds the follower would index the
    /// abort from offset 6; carried the leader's state as of entry 6, it
    /// indexes it from 4, as the leader does. It stops after entry 5 and
    /// opens again (the carried state was saved) before it reaches 6.
    #[test]
    fn a_restarted_replica_takes_the_transactions_the_leader_carried() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut leader = open_replica(&dir.path().join("leader"));
        let entries = scenario();
        for (i, data) in entries.iter().take(6).enumerate() {
            apply(&mut leader, i as u64 + 1, data.clone());
        }
        let carried = leader.state.state_to_carry().expect("a state");
        apply(&mut leader, 7, entries[6].clone());
        leader.state.acknowledged(LogIndex(7));
        let expected = vec![AbortedTxn {
            producer_id: B,
            first_offset: 4,
            last_offset: 7,
        }];
        assert_eq!(aborted(&leader), expected);

        let at = dir.path().join("follower");
        let mut follower = open_replica(&at);
        let first = restart_entry(&leader, 4, &carried);
        follower
            .state
            .restart(LogIndex(4), std::slice::from_ref(&first))
            .expect("restart");
        assert_eq!(follower.partition.log_start_offset(), Offset(6));
        follower
            .state
            .apply(vec![first, normal(5, entries[4].clone())])
            .expect("apply");
        follower.state.close();
        drop(follower);

        let mut follower = open_replica(&at);
        follower
            .state
            .apply(vec![
                normal(6, entries[5].clone()),
                normal(7, entries[6].clone()),
            ])
            .expect("apply");
        follower.state.acknowledged(LogIndex(7));
        assert_eq!(aborted(&follower), expected, "the leader's aborted index");
        assert_eq!(
            follower.partition.last_stable_offset(),
            leader.partition.last_stable_offset()
        );
        let read = |r: &crate::replica::Recovered| {
            r.partition.reader().read(6, 1 << 20).expect("read").bytes
        };
        assert_eq!(read(&follower), read(&leader), "the leader's bytes");
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
