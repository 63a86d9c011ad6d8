//! What a shard is asked to do: the one queue every shard thread reads,
//! fed by the host (installs, peer messages, campaigns, shutdown), the timer
//! (ticks) and the syncer (a finished round).

use std::sync::Arc;

use helix_raft::{GroupId, MessageBatch, NodeId, RaftGroup};
use tokio::sync::oneshot;

use crate::batcher::Work;
use crate::error::Result;
use crate::replica::Published;
use crate::replica::state::PartitionState;

/// What a shard is asked to do.
pub enum ShardInput {
    Tick,
    Install {
        group: Box<RaftGroup>,
        state: Box<PartitionState>,
        /// Where the shard publishes the replica's leader lease.
        published: Arc<Published>,
        reply: oneshot::Sender<Result<()>>,
    },
    Work(GroupId, Work),
    Peer(MessageBatch),
    Campaign(GroupId),
    /// Hand the group's leadership to its preferred replica now, if this
    /// node leads it and that replica is in sync (ElectLeaders).
    HandBack(GroupId),
    /// The connection to this node broke (its process likely died).
    PeerLost(NodeId),
    /// Graceful shutdown: hand every led group to its best follower.
    StepDownAll,
    /// The syncer finished a round asked for by this shard.
    Synced,
    /// The Raft status of every group of the shard (metrics).
    Observe(oneshot::Sender<Vec<(GroupId, helix_raft::Status)>>),
    Stop,
}
