//! Serving catch-up from the WAL: a follower behind the leader's in-memory
//! log gets the entries it misses streamed from the leader's WAL, in chunks,
//! paced by what it has confirmed, so neither side ever holds the whole
//! range in memory. The appends these chunks become leave on the catch-up
//! lane (helix-raft puts them in `Ready.catch_up_messages`).

use std::collections::{HashMap, VecDeque};

use bytes::Bytes;
use helix_raft::{CatchUpRequest, Entry, EntryKind, GroupId, LogIndex, MultiRaft, NodeId, Term};
use helix_wal::EntryStream;

use crate::partition::entry;
use crate::partition::state::PartitionState;

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
    /// Chunks sent and not yet confirmed: (last index, bytes).
    in_flight: VecDeque<(LogIndex, usize)>,
}

/// The catch-ups a shard serves.
#[derive(Default)]
pub struct CatchUps {
    cursors: HashMap<(GroupId, NodeId), Cursor>,
}

impl CatchUps {
    /// A new (or renewed) request from `group`'s leader.
    pub fn start(&mut self, group: GroupId, req: CatchUpRequest, state: Option<&PartitionState>) {
        let Some(stream) = state.and_then(|s| s.entries_from(req.from_index)) else {
            return;
        };
        tracing::info!(
            group = group.0,
            follower = req.to.0,
            from = req.from_index.0,
            through = req.through_index.0,
            "catching a follower up from the WAL"
        );
        self.cursors.insert(
            (group, req.to),
            Cursor {
                stream,
                next: req.from_index,
                through: req.through_index,
                in_flight: VecDeque::new(),
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
                match g.catch_up(*to, entries) {
                    Ok(more) => {
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
        let Some(item) = cursor.stream.next() else {
            break;
        };
        let (pos, batches) = item?;
        if pos.index != cursor.next.0 {
            return Err(crate::error::HelixError::CorruptState(format!(
                "catch-up read index {} where {} was expected",
                pos.index, cursor.next.0
            )));
        }
        bytes += batches.len();
        entries.push(wal_entry(pos.term, pos.index, batches));
        cursor.next = cursor.next.next();
    }
    Ok((entries, bytes))
}

/// A WAL entry as a Raft entry: its stored batches as one produce request
/// (applying it again yields the same bytes at the same offsets: the
/// batches were accepted once, and every replica derives the same producer
/// state), or a no-op when it holds none.
fn wal_entry(term: u64, index: u64, batches: Bytes) -> Entry {
    let (kind, data) = if batches.is_empty() {
        (EntryKind::Noop, Bytes::new())
    } else {
        (
            EntryKind::Normal,
            entry::encode_produce(std::iter::once(std::slice::from_ref(&batches))),
        )
    };
    Entry {
        term: Term(term),
        index: LogIndex(index),
        kind,
        data,
    }
}
