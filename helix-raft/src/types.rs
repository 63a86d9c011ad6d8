//! Identifiers, positions and log entries shared by every module.
//!
//! Every identifier and position is a newtype so a term can never be passed
//! where an index is expected. Index 0 and term 0 mean "nothing": the first
//! real entry has index 1 and every elected leader has a term of at least 1.

use bytes::Bytes;
use std::fmt;

macro_rules! newtype_u64 {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
        pub struct $name(pub u64);

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                self.0.fmt(f)
            }
        }
    };
}

newtype_u64!(
    /// A node (broker) of the cluster.
    NodeId
);
newtype_u64!(
    /// A Raft group: one partition, or the controller (group 0).
    GroupId
);
newtype_u64!(
    /// A Raft term. Term 0 is "before any election".
    Term
);
newtype_u64!(
    /// A position in a group's Raft log. Index 0 is "before the first entry".
    LogIndex
);

impl LogIndex {
    /// The index right after this one.
    #[must_use]
    pub fn next(self) -> LogIndex {
        LogIndex(self.0 + 1)
    }

    /// The index right before this one (saturating at 0).
    #[must_use]
    pub fn prev(self) -> LogIndex {
        LogIndex(self.0.saturating_sub(1))
    }
}

/// The vote state a replica must persist (fsync, batched across groups)
/// before sending any message that depends on it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct HardState {
    pub term: Term,
    pub voted_for: Option<NodeId>,
    /// A learner neither votes nor campaigns. The host sets it when the
    /// replica's log lost entries it may have acknowledged (damaged storage
    /// set aside): counted in a majority for them, it must not help elect a
    /// leader that lacks them. The group clears it once its durable log
    /// holds an index the current leader acknowledged in its own term,
    /// which covers everything acknowledged before (Raft's rule for a
    /// server that lost its durable state).
    pub learner: bool,
}

/// What an entry carries.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum EntryKind {
    /// Appended by every new leader: the acknowledgement rule needs an entry
    /// of the leader's own term before anything can be acknowledged.
    Noop,
    /// A proposal from the host (one Kafka batch group for a partition).
    Normal,
}

/// One Raft log entry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    pub term: Term,
    pub index: LogIndex,
    pub kind: EntryKind,
    pub data: Bytes,
}

/// Fixed per-entry cost counted against the in-memory budget on top of the
/// payload, so that a flood of empty entries is bounded too.
pub const ENTRY_OVERHEAD_BYTES: usize = 48;

impl Entry {
    /// Bytes this entry costs in the in-memory log and in an append batch.
    #[must_use]
    pub fn cost(&self) -> usize {
        self.data.len() + ENTRY_OVERHEAD_BYTES
    }
}

/// The role of a replica in its group.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Role {
    Follower,
    /// Asking for pre-votes: its term is not raised until a majority would
    /// vote for it, so a returning partitioned node does not disrupt a leader.
    PreCandidate,
    Candidate,
    Leader,
}
