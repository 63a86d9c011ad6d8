//! What a group hands its host (`Ready`) and what it reports (`Status`).

use crate::message::{CatchUpRequest, Message};
use crate::types::{Entry, HardState, LogIndex, NodeId, Role, Term};

/// Work for the host, taken by `RaftGroup::ready()`. Do it in field order:
///
/// 1. persist `hard_state` (fsync; may be batched across groups) before
///    sending any of `messages`;
/// 2. truncate the WAL after `truncate_wal_after` (always above the
///    acknowledged index) and rebuild what was derived from the dropped
///    entries; or, when `restart_wal_at` is set, empty the WAL: the first
///    entry of `to_apply` (at that index, the leader's first held entry)
///    starts it again, at the leader's offsets;
/// 3. append `to_apply` to the WAL in order, then call
///    `durable_to(last appended)` (or after the fsync in fsync mode);
/// 4. send `messages`, and `catch_up_messages` on the catch-up channel;
/// 5. serve `catch_up` from the WAL (after the appends of step 3);
/// 6. answer proposals up to `acknowledged`.
///
/// Taking a `Ready` is the only acknowledgement needed: there is no
/// `advance`. Entries in `to_apply` count as applied from then on.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Ready {
    pub hard_state: Option<HardState>,
    pub truncate_wal_after: Option<LogIndex>,
    /// The log started over at this index (`RaftLog::restart_at`): the
    /// leader no longer holds the entries this replica needed.
    pub restart_wal_at: Option<LogIndex>,
    pub to_apply: Vec<Entry>,
    pub messages: Vec<Message>,
    /// Appends built from WAL entries the host streamed in through
    /// `RaftGroup::catch_up`: bulk that must not delay regular appends or
    /// heartbeats, so the host sends them on a channel of their own.
    pub catch_up_messages: Vec<Message>,
    pub catch_up: Vec<CatchUpRequest>,
    /// New acknowledged index (Kafka's high watermark) when it moved.
    pub acknowledged: Option<LogIndex>,
}

impl Ready {
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.hard_state.is_none()
            && self.truncate_wal_after.is_none()
            && self.restart_wal_at.is_none()
            && self.to_apply.is_empty()
            && self.messages.is_empty()
            && self.catch_up_messages.is_empty()
            && self.catch_up.is_empty()
            && self.acknowledged.is_none()
    }
}

/// Replication state of one follower, as the leader sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FollowerStatus {
    pub node: NodeId,
    pub matched: LogIndex,
    pub next: LogIndex,
    pub durable: LogIndex,
    pub inflight: usize,
    pub catching_up: bool,
    /// Leader ticks since this follower last answered.
    pub ticks_since_heard: u32,
}

/// Observability snapshot of one group; cheap to build.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Status {
    pub role: Role,
    pub term: Term,
    pub leader: Option<NodeId>,
    pub commit: LogIndex,
    /// The leader's commit index as this replica last heard it (a leader:
    /// its own); 0 until a leader of the current term was heard.
    pub leader_commit: LogIndex,
    pub applied: LogIndex,
    pub durable: LogIndex,
    pub acknowledged: LogIndex,
    pub last_index: LogIndex,
    /// First index still held in memory.
    pub mem_start: LogIndex,
    pub inmem_bytes: usize,
    /// Empty unless leader.
    pub followers: Vec<FollowerStatus>,
    pub elections_started: u64,
    pub elections_won: u64,
    pub wal_truncations: u64,
    /// The node leadership is being handed to (leader only).
    pub transferring_to: Option<NodeId>,
    /// Neither votes nor campaigns until restored ([`crate::HardState::learner`]).
    pub learner: bool,
}
