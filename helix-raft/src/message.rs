//! Messages exchanged between replicas of a group, and catch-up requests to
//! the host.
//!
//! Every response carries the sender's durable index *as verified against
//! the current leader*: `min(WAL end, highest index known to match the
//! leader's log this term)`. That makes the report safe to take as a maximum
//! at the leader even when responses are reordered or duplicated.

use crate::types::{Entry, GroupId, LogIndex, NodeId, Term};

/// One Raft message of one group.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Message {
    pub group: GroupId,
    pub from: NodeId,
    pub to: NodeId,
    /// The sender's term; for `PreVote` the term it would campaign at, and
    /// for a granted `PreVoteResponse` that same term.
    pub term: Term,
    pub body: MessageBody,
}

/// What a message says.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MessageBody {
    PreVote {
        last_index: LogIndex,
        last_term: Term,
    },
    PreVoteResponse {
        reject: bool,
    },
    Vote {
        last_index: LogIndex,
        last_term: Term,
        /// Sent after `TimeoutNow`: voters skip their leader-lease check.
        transfer: bool,
    },
    VoteResponse {
        reject: bool,
    },
    Append {
        prev_index: LogIndex,
        prev_term: Term,
        entries: Vec<Entry>,
        commit: LogIndex,
        acknowledged: LogIndex,
    },
    AppendResponse {
        reject: bool,
        /// Success: the highest index now known to match the leader.
        /// Reject: the `prev_index` of the rejected append.
        index: LogIndex,
        /// Reject only: where the leader should probe next (fast backtracking):
        /// the follower's highest index whose term is at most `hint_term`.
        hint_index: LogIndex,
        hint_term: Term,
        /// The follower's last index (lets the leader see a lost tail).
        last_index: LogIndex,
        durable: LogIndex,
    },
    /// A leader's periodic liveness message. Coalesced per node pair by the
    /// codec: a few bytes per group.
    Heartbeat {
        commit: LogIndex,
        acknowledged: LogIndex,
    },
    HeartbeatResponse {
        /// Highest index known to match the leader's log this term.
        matched: LogIndex,
        durable: LogIndex,
    },
    /// A new commit (and acknowledged) index sent at once, for a follower
    /// whose append pipeline is full. No response.
    Commit {
        commit: LogIndex,
        acknowledged: LogIndex,
    },
    /// Leader transfer: campaign now, skipping pre-vote and the lease check.
    TimeoutNow,
}

impl MessageBody {
    /// An append with entries: bulk data rather than control traffic.
    #[must_use]
    pub fn carries_entries(&self) -> bool {
        matches!(self, MessageBody::Append { entries, .. } if !entries.is_empty())
    }

    /// Short name for logs and tests.
    #[must_use]
    pub fn name(&self) -> &'static str {
        match self {
            MessageBody::PreVote { .. } => "PreVote",
            MessageBody::PreVoteResponse { .. } => "PreVoteResponse",
            MessageBody::Vote { .. } => "Vote",
            MessageBody::VoteResponse { .. } => "VoteResponse",
            MessageBody::Append { .. } => "Append",
            MessageBody::AppendResponse { .. } => "AppendResponse",
            MessageBody::Heartbeat { .. } => "Heartbeat",
            MessageBody::HeartbeatResponse { .. } => "HeartbeatResponse",
            MessageBody::Commit { .. } => "Commit",
            MessageBody::TimeoutNow => "TimeoutNow",
        }
    }
}

/// The leader no longer holds `from_index..` in memory: the host streams
/// entries `from_index..=through_index` from its WAL, in order, in chunks of
/// its choosing, through `RaftGroup::catch_up`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CatchUpRequest {
    pub to: NodeId,
    pub from_index: LogIndex,
    pub through_index: LogIndex,
}
