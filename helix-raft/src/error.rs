//! The crate's error types.
//!
//! `RaftError` covers everything an input can do wrong (a message for another
//! group or node, an inconsistent restore, a corrupt batch). `ProposeError` is
//! the answer to a proposal the group cannot take now; the host maps it to a
//! retriable Kafka error (NOT_LEADER_OR_FOLLOWER, or a throttled retry).

use crate::types::{GroupId, LogIndex, NodeId};

/// An input the group (or the codec) rejects. Never a panic.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum RaftError {
    #[error("message for group {got} delivered to group {expected}")]
    WrongGroup { expected: GroupId, got: GroupId },
    #[error("message for node {got} delivered to node {expected}")]
    WrongNode { expected: NodeId, got: NodeId },
    #[error("message from node {0}, which is not a voter of this group")]
    UnknownPeer(NodeId),
    #[error("node {0} is not among the group's voters")]
    NotAVoter(NodeId),
    #[error("invalid configuration: {0}")]
    InvalidConfig(&'static str),
    #[error("inconsistent restore: {0}")]
    InvalidRestore(&'static str),
    #[error("catch-up entries rejected: {0}")]
    InvalidCatchUp(&'static str),
    #[error("durable index {durable} is beyond the applied index {applied}")]
    DurableBeyondApplied {
        durable: LogIndex,
        applied: LogIndex,
    },
    #[error("unknown group {0}")]
    UnknownGroup(GroupId),
    #[error("group {0} already exists")]
    DuplicateGroup(GroupId),
    #[error("corrupt message batch: {0}")]
    Codec(&'static str),
}

/// Why a proposal was not taken. Both are retriable by the client.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ProposeError {
    #[error("not the leader (leader hint: {leader:?})")]
    NotLeader { leader: Option<NodeId> },
    #[error("in-memory log budget is full; retry after entries are applied")]
    Backpressure,
    #[error("leadership is being transferred to {0}")]
    TransferInProgress(NodeId),
}
