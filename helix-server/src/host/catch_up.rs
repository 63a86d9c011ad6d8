//! Serving catch-up from the WAL: a follower behind the leader's in-memory
//! log gets the entries it misses streamed from the leader's WAL, in chunks,
//! paced by what it has confirmed, so neither side ever holds the whole
//! range in memory. The appends these chunks become leave on the catch-up
//! lane (helix-raft puts them in `Ready.catch_up_messages`).

use std::collections::{HashMap, VecDeque};

use bytes::Bytes;
use helix_raft::{CatchUpRequest, Entry, EntryKind, GroupId, LogIndex, MultiRaft, NodeId, Term};
use helix_wal::{DeleteRecordsEntry, EntryStream, StoredEntry};

use crate::replica::entry;
use crate::replica::state::PartitionState;

/// Bytes of WAL entries fed to Raft at once (at least one entry).
const CHUNK_BYTES: usize = 1 << 20;
/// Bytes sent to one follower and not yet confirmed by it.
const WINDOW_BYTES: usize = 8 << 20;

/// One follower being caught up from one group's WAL.
struct Cursor {
    stream: EntryStream,
    /// Next index to read from the WAL.
    next: LogIndex,
    through: LogIndex,
    /// The DeleteRecords entries the leader's WAL keeps, as at the start
    /// (at most helix-wal's `KEPT_ENTRIES`): one applied later has an
    /// index past `through`, and reaches the follower from memory.
    deleted: Vec<DeleteRecordsEntry>,
    /// Chunks sent and not yet confirmed: (last index, bytes).
    in_flight: VecDeque<(LogIndex, usize)>,
    /// The follower needs entries this WAL no longer holds (deleted below
    /// the log start): the first chunk starts at the first held entry, and
    /// the follower's log starts over there (helix-raft
    /// `catch_up_restart`). That entry goes out stored, with its offsets.
    restart: bool,
    /// The leader's derived state, taken when the restart was decided, sent
    /// with the restart's first entry (`replica/state/restart.rs`).
    carried: Option<Bytes>,
}

/// The catch-ups a shard serves.
#[derive(Default)]
pub struct CatchUps {
    cursors: HashMap<(GroupId, NodeId), Cursor>,
}

impl CatchUps {
    /// A new (or renewed) request from `group`'s leader.
    pub fn start(&mut self, group: GroupId, req: CatchUpRequest, state: Option<&PartitionState>) {
        let Some(state) = state else {
            return;
        };
        // Everything below the first held entry is committed (the WAL
        // holds applied entries only), so starting the follower over
        // there drops nothing the group still needs. That entry may be
        // past `through` (also in the leader's memory): it is sent all the
        // same, and the rest comes from memory.
        let (from, through, restart) = match state.first_held_index() {
            Some(first) if req.from_index < first => (first, req.through_index.max(first), true),
            _ => (req.from_index, req.through_index, false),
        };
        let Some(stream) = state.entries_from(from) else {
            return;
        };
        let carried = if restart {
            state.state_to_carry()
        } else {
            None
        };
        tracing::info!(
            group = group.0,
            follower = req.to.0,
            from = from.0,
            through = through.0,
            restart,
            "catching a follower up from the WAL"
        );
        self.cursors.insert(
            (group, req.to),
            Cursor {
                stream,
                next: from,
                through,
                deleted: state.delete_records_entries(),
                in_flight: VecDeque::new(),
                restart,
                carried,
            },
        );
    }

    pub fn forget(&mut self, group: GroupId) {
        self.cursors.retain(|(g, _), _| *g != group);
    }

    /// Feeds every follower whose window has room; drops finished or stale
    /// cursors (leadership lost, follower probed again).
    pub fn pump(&mut self, multi: &mut MultiRaft, states: &HashMap<GroupId, PartitionState>) {
        if self.cursors.is_empty() {
            return;
        }
        self.cursors.retain(|(group, to), cursor| {
            if !states.contains_key(group) {
                return false;
            }
            let Some(g) = multi.group_mut(*group) else {
                return false;
            };
            let status = g.status();
            let Some(follower) = status
                .followers
                .iter()
                .find(|f| f.node == *to && f.catching_up)
            else {
                return false;
            };
            while cursor
                .in_flight
                .front()
                .is_some_and(|(last, _)| *last <= follower.matched)
            {
                cursor.in_flight.pop_front();
            }
            let mut pending: usize = cursor.in_flight.iter().map(|(_, b)| b).sum();
            while pending < WINDOW_BYTES && cursor.next <= cursor.through {
                let (entries, bytes) = match read_chunk(cursor) {
                    Ok(chunk) => chunk,
                    Err(e) => {
                        tracing::error!(group = group.0, follower = to.0, error = %e, "catch-up cannot read the WAL");
                        return false;
                    }
                };
                let Some(last) = entries.last().map(|e| e.index) else {
                    return false;
                };
                let count = entries.len() as u64;
                let sent = if cursor.restart {
                    g.catch_up_restart(*to, entries)
                } else {
                    g.catch_up(*to, entries)
                };
                match sent {
                    Ok(more) => {
                        cursor.restart = false;
                        crate::metrics::Metrics::count(
                            &crate::metrics::metrics().counters.catch_up_entries,
                            count,
                        );
                        cursor.in_flight.push_back((last, bytes));
                        pending += bytes;
                        if !more {
                            return false;
                        }
                    }
                    Err(e) => {
                        tracing::warn!(group = group.0, follower = to.0, error = %e, "catch-up chunk refused");
                        return false;
                    }
                }
            }
            cursor.next <= cursor.through
        });
    }
}

/// Reads up to [`CHUNK_BYTES`] of entries (at least one) from the cursor.
fn read_chunk(cursor: &mut Cursor) -> crate::error::Result<(Vec<Entry>, usize)> {
    let mut entries = Vec::new();
    let mut bytes = 0usize;
    while cursor.next <= cursor.through && (entries.is_empty() || bytes < CHUNK_BYTES) {
        let Some(item) = cursor.stream.next_stored() else {
            break;
        };
        let stored = item?;
        if stored.pos.index != cursor.next.0 {
            return Err(crate::error::HelixError::CorruptState(format!(
                "catch-up read index {} where {} was expected",
                stored.pos.index, cursor.next.0
            )));
        }
        bytes += stored.batches.len();
        let deleted = cursor
            .deleted
            .iter()
            .find(|d| d.index == stored.pos.index)
            .map(|d| d.offset);
        let restarts_here = cursor.restart && entries.is_empty();
        entries.push(if restarts_here {
            stored_entry(stored, cursor.carried.take().as_deref())
        } else {
            wal_entry(stored, deleted)?
        });
        cursor.next = cursor.next.next();
    }
    Ok((entries, bytes))
}

/// A WAL entry as a Raft entry: a DeleteRecords entry to `deleted` when
/// the WAL keeps it as one (an entry with no batches, which would
/// otherwise go out as a no-op and leave the follower's log start behind
/// the leader's); a marker entry when it holds a transaction
/// marker's control batch (applied as a produce entry, the follower would
/// store the same bytes but keep the transaction open: its last stable
/// offset stuck, its aborted index short; found by the Jepsen transactional
/// workload), else its stored batches as a produce entry of one request per
/// batch, or a no-op when it holds none. Applying it again
/// yields the same bytes at the same offsets: the batches were accepted
/// once, in this order, and every replica derives the same producer state.
/// One request per batch, not one for all: the stored batches may come
/// from several requests of one producer, and the sequence check of a
/// request's later batches does not see its earlier ones (a follower would
/// refuse them as out of order and store nothing).
///
/// All of that holds only while the batches cover the entry's offset
/// range one after another, each holding a record per offset it spans:
/// applying them again assigns the same offsets. An entry of a compacted
/// segment (ADR 0027 §5) may leave gaps, hold emptied batches, or hold
/// none at all; it is sent as a stored entry, which keeps every base
/// offset and the range. Entries that cover their range keep the older
/// kinds, so a follower of an older version is only ever sent a stored
/// entry by a leader whose log was compacted.
fn wal_entry(stored: StoredEntry, deleted: Option<i64>) -> crate::error::Result<Entry> {
    let StoredEntry {
        pos,
        first_offset,
        next_offset,
        batches,
    } = stored;
    let (term, index) = (pos.term, pos.index);
    let (kind, data) = if let Some(before) = deleted
        && batches.is_empty()
        && first_offset == next_offset
    {
        (EntryKind::Normal, entry::encode_delete_records(before))
    } else if !covers_range(&batches, first_offset, next_offset) {
        (
            EntryKind::Normal,
            entry::encode_stored(first_offset, next_offset, &batches),
        )
    } else if batches.is_empty() {
        (EntryKind::Noop, Bytes::new())
    } else if let Some(marker) = stored_marker(&batches) {
        (EntryKind::Normal, entry::encode_marker(&marker))
    } else {
        let each = split_batches(&batches)?;
        (
            EntryKind::Normal,
            entry::encode_produce(each.iter().map(std::slice::from_ref)),
        )
    };
    Ok(Entry {
        term: Term(term),
        index: LogIndex(index),
        kind,
        data,
    })
}

/// A WAL entry as a stored entry, whatever it holds: it carries its
/// offset range, which a follower whose log starts over at it starts at,
/// and the leader's derived state when `carried` (a restart entry).
fn stored_entry(stored: StoredEntry, carried: Option<&[u8]>) -> Entry {
    let (first, next, batches) = (stored.first_offset, stored.next_offset, &stored.batches);
    Entry {
        term: Term(stored.pos.term),
        index: LogIndex(stored.pos.index),
        kind: EntryKind::Normal,
        data: match carried {
            Some(state) => entry::encode_restart(first, next, state, batches),
            None => entry::encode_stored(first, next, batches),
        },
    }
}

/// Whether `batches` cover `[first_offset, next_offset)` as apply wrote
/// them: back to back from `first_offset`, each holding one record per
/// offset it spans (apply advances by the record count), none carrying a
/// cleaner's delete horizon (a marker entry rebuilds its control batch
/// without it: sent stored, the follower keeps the leader's bytes).
/// Anything it cannot parse counts as covering: the older path refuses it
/// as today.
fn covers_range(batches: &[u8], first_offset: i64, next_offset: i64) -> bool {
    let mut expected = first_offset;
    let mut at = 0usize;
    while at < batches.len() {
        let Ok(h) = crate::replica::batch::parse_header(&batches[at..]) else {
            return true;
        };
        let spans = i64::from(h.last_offset_delta) + 1;
        if h.base_offset != expected
            || i64::from(h.record_count) != spans
            || h.delete_horizon_ms().is_some()
        {
            return false;
        }
        expected += spans;
        at += h.total_len();
    }
    expected == next_offset
}

/// The marker a WAL entry stores, if it is one: a marker entry stores one
/// control batch and nothing else (a produce entry never holds a control
/// batch: clients cannot send one).
fn stored_marker(batches: &Bytes) -> Option<crate::replica::markers::Marker> {
    let h = crate::replica::batch::parse_header(batches).ok()?;
    if !h.is_control() || h.total_len() != batches.len() {
        return None;
    }
    crate::replica::markers::read_marker(batches)
}

/// The record batches stored back to back in `batches`, each as a slice.
fn split_batches(batches: &Bytes) -> crate::error::Result<Vec<Bytes>> {
    let mut out = Vec::new();
    let mut at = 0usize;
    while at < batches.len() {
        let len = crate::replica::batch::parse_header(&batches[at..])?.total_len();
        if len == 0 || at + len > batches.len() {
            return Err(crate::error::HelixError::CorruptState(format!(
                "a stored batch at byte {at} runs past its entry"
            )));
        }
        out.push(batches.slice(at..at + len));
        at += len;
    }
    Ok(out)
}

#[cfg(test)]
mod compacted_tests;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::replica::apply::apply_produce;
    use crate::replica::batch::tests::make_batch;
    use crate::replica::entry::{PartitionEntry, decode};
    use crate::replica::producers::ProducerTable;
    use helix_wal::{AppendCheck, LogConfig, PartitionLog, RaftPosition};

    /// A WAL entry of term 2 at `index` covering `[first, next)`.
    fn held_at(index: u64, first: i64, next: i64, batches: Bytes) -> StoredEntry {
        StoredEntry {
            pos: RaftPosition { term: 2, index },
            first_offset: first,
            next_offset: next,
            batches,
        }
    }

    /// Applies a produce entry's data as a replica would.
    fn apply(
        log: &mut PartitionLog,
        producers: &mut ProducerTable,
        index: u64,
        data: Bytes,
    ) -> Vec<i64> {
        let PartitionEntry::Produce { lengths, data } = decode(data).expect("decode") else {
            panic!("not a produce entry");
        };
        apply_produce(
            log,
            producers,
            RaftPosition { term: 2, index },
            &lengths,
            data,
            &mut None,
            AppendCheck::Full,
        )
        .expect("apply")
    }

    /// Two empty logs in `dir`: a leader's and a follower's.
    fn leader_and_follower(dir: &std::path::Path) -> (PartitionLog, PartitionLog) {
        let open = |name: &str| {
            PartitionLog::open(dir.join(name).as_path(), LogConfig::default())
                .expect("open")
                .0
        };
        (open("l"), open("f"))
    }

    #[test]
    fn a_caught_up_entry_of_several_requests_of_one_producer_is_stored_whole() {
        // Both replicas hold producer 7's first batch (sequence 0). Then the
        // leader applies two more requests of it (sequences 1-2 and 3) as
        // one entry; its WAL holds both batches back to back.
        let dir = tempfile::tempdir().expect("tempdir");
        let (mut leader, mut follower) = leader_and_follower(dir.path());
        let (mut on_leader, mut on_follower) = (ProducerTable::default(), ProducerTable::default());
        let first = entry::encode_produce(
            [vec![make_batch(&[b"0"], 7, 0, 10)]]
                .iter()
                .map(Vec::as_slice),
        );
        apply(&mut leader, &mut on_leader, 1, first.clone());
        apply(&mut follower, &mut on_follower, 1, first);
        let a = make_batch(&[b"1", b"2"], 7, 1, 11);
        let b = make_batch(&[b"3"], 7, 3, 12);
        let original = entry::encode_produce([vec![a], vec![b]].iter().map(Vec::as_slice));
        let out = apply(&mut leader, &mut on_leader, 2, original);
        assert_eq!(out, vec![1, 3]);
        let held = leader
            .entries_from(2)
            .next_stored()
            .expect("entry")
            .expect("read");
        let stored = held.batches.clone();

        // The follower, behind the leader's memory, gets it from the WAL.
        let caught_up = wal_entry(held, None).expect("entry");
        let out = apply(&mut follower, &mut on_follower, 2, caught_up.data);
        assert_eq!(out, vec![1, 3]);
        assert_eq!(follower.next_offset(), 4);
        let (_, copied) = follower
            .entries_from(2)
            .next()
            .expect("entry")
            .expect("read");
        assert_eq!(copied, stored, "the follower stores the leader's bytes");
    }

    #[test]
    fn a_caught_up_marker_is_applied_as_a_marker() {
        use crate::replica::apply::apply_marker;
        use crate::replica::batch::tests::transactional;
        use crate::replica::markers::Marker;
        let dir = tempfile::tempdir().expect("tempdir");
        let (mut leader, mut follower) = leader_and_follower(dir.path());
        let (mut on_leader, mut on_follower) = (ProducerTable::default(), ProducerTable::default());
        // Producer 7 opens a transaction on both.
        let open_txn = entry::encode_produce(
            [vec![transactional(&make_batch(&[b"0"], 7, 0, 10), 0)]]
                .iter()
                .map(Vec::as_slice),
        );
        apply(&mut leader, &mut on_leader, 1, open_txn.clone());
        apply(&mut follower, &mut on_follower, 1, open_txn);
        assert_eq!(on_follower.first_unstable(), Some(0));
        // The leader commits it; the follower gets the marker from the WAL.
        let marker = Marker {
            producer_id: 7,
            producer_epoch: 0,
            commit: true,
            coordinator_epoch: 3,
            timestamp: 20,
        };
        let pos = RaftPosition { term: 2, index: 2 };
        apply_marker(&mut leader, &mut on_leader, pos, &marker, &mut None).expect("marker");
        let held = leader
            .entries_from(2)
            .next_stored()
            .expect("entry")
            .expect("read");
        let (pos, stored) = (held.pos, held.batches.clone());
        let caught_up = wal_entry(held, None).expect("entry");
        let PartitionEntry::Marker(read) = decode(caught_up.data).expect("decode") else {
            panic!("a marker caught up as another entry");
        };
        assert_eq!(read, marker);
        apply_marker(&mut follower, &mut on_follower, pos, &read, &mut None).expect("marker");
        assert_eq!(on_follower.first_unstable(), None, "the transaction ended");
        let (_, copied) = follower
            .entries_from(2)
            .next()
            .expect("entry")
            .expect("read");
        assert_eq!(copied, stored, "the follower stores the leader's bytes");
    }

    #[test]
    fn the_kept_delete_records_entry_is_caught_up_as_itself() {
        let e = wal_entry(held_at(4, 12, 12, Bytes::new()), Some(9)).expect("entry");
        let PartitionEntry::DeleteRecords { before } = decode(e.data).expect("decode") else {
            panic!("a DeleteRecords entry caught up as another kind");
        };
        assert_eq!((e.kind, before), (EntryKind::Normal, 9));
        // Any other entry with no batches is a no-op, as before.
        let other = wal_entry(held_at(5, 12, 12, Bytes::new()), None).expect("entry");
        assert_eq!(other.kind, EntryKind::Noop);
    }

    #[test]
    fn a_restarts_first_entry_goes_out_stored_with_its_range() {
        let batch = make_batch(&[b"1", b"2"], -1, -1, 10);
        let e = stored_entry(held_at(7, 40, 42, batch.clone()), None);
        assert_eq!(
            (e.index, e.term, e.kind),
            (LogIndex(7), Term(2), EntryKind::Normal)
        );
        assert_eq!(entry::stored_range(&e.data), Some((40, 42)));
        // Even an entry with no batches (a DeleteRecords or no-op entry).
        let empty = stored_entry(held_at(8, 42, 42, Bytes::new()), Some(b"{}"));
        assert_eq!(entry::stored_range(&empty.data), Some((42, 42)));
    }

    #[test]
    fn a_stored_batch_that_runs_past_its_entry_is_refused() {
        let a = make_batch(&[b"1"], -1, -1, 10);
        let cut = a.slice(..a.len() - 1);
        assert!(wal_entry(held_at(1, 0, 1, cut), None).is_err());
        assert_eq!(
            wal_entry(held_at(1, 0, 0, Bytes::new()), None)
                .expect("noop")
                .kind,
            EntryKind::Noop
        );
    }
}
