//! KIP-951 leader hints: a Produce (v10+) or Fetch (v16+) answered with
//! NOT_LEADER_OR_FOLLOWER (Fetch also FENCED_LEADER_EPOCH) carries the
//! partition's current leader and epoch as this node knows them, and the
//! endpoints of the leaders it names, so the client moves at once instead
//! of asking Metadata first (librdkafka 2.4+, the Java client 3.7+).
//!
//! The hint is what Metadata would answer ([`crate::cluster::ClusterState::leadership`]):
//! leadership by term, this node only while it holds its lease. With no
//! leader known the hint is left out (the codec's default, leader -1 and
//! epoch -1, is not sent) and the client asks Metadata as before.

use helix_raft::NodeId;

use crate::cluster::ClusterState;
use crate::cluster::Member;
use crate::error::HelixError;
use crate::replica::term_epoch;
use crate::topics::Topic;

/// The leader a client should go to for partition `index` of `topic`, with
/// its epoch; None while unknown.
pub fn current_leader(
    cluster: &ClusterState,
    topic: Option<&Topic>,
    index: i32,
) -> Option<(NodeId, i32)> {
    let p = usize::try_from(index)
        .ok()
        .and_then(|i| topic?.partitions.get(i))?;
    cluster
        .leadership(p.group, p.local.as_deref())
        .map(|l| (l.leader, term_epoch(l.term)))
}

/// Whether an error sends the client to another leader (Produce).
pub fn produce_wants_hint(e: &HelixError) -> bool {
    matches!(e, HelixError::NotLeader | HelixError::ShuttingDown)
}

/// Whether an error sends the client to another leader (Fetch: a stale
/// epoch too, as Kafka does).
pub fn fetch_wants_hint(e: &HelixError) -> bool {
    produce_wants_hint(e) || matches!(e, HelixError::FencedLeaderEpoch)
}

/// Collects the nodes named in hints, each once, for the response's
/// `node_endpoints`.
#[derive(Debug, Default)]
pub struct NamedLeaders {
    nodes: Vec<NodeId>,
}

impl NamedLeaders {
    pub fn add(&mut self, node: NodeId) {
        if !self.nodes.contains(&node) {
            self.nodes.push(node);
        }
    }

    /// The members named, in id order (unknown ids are left out).
    pub fn members<'a>(&self, cluster: &'a ClusterState) -> Vec<&'a Member> {
        let mut out: Vec<&Member> = self
            .nodes
            .iter()
            .filter_map(|n| cluster.member(*n))
            .collect();
        out.sort_by_key(|m| m.id);
        out
    }
}
