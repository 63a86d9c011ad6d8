//! DescribeQuorum (`kafka-metadata-quorum.sh describe`): the controller's
//! Raft group (group 0) as KRaft describes `__cluster_metadata`
//! partition 0: its leader and epoch, the high watermark, and the voters
//! with their log end offsets, in Raft log indexes (the controller's log is
//! its Raft log, as KRaft's is). Helix has no observers: every member is a
//! voter of group 0.
//!
//! Any node answers, as a KRaft broker forwards the request to the active
//! controller: group 0's leader from what it tracks of its followers,
//! another node with what it asks of the leader (`controller/quorum.rs`).
//! When the leader does not answer, a node answers with what it knows
//! itself (the leader and epoch it follows, the commit index it last
//! heard, its own log end) and -1 for what only the leader knows (ADR
//! 0013, "Operator tools as built").

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::describe_quorum_response::{
    Listener, Node, PartitionData, ReplicaState, TopicData,
};
use kafka_protocol::messages::{DescribeQuorumRequest, DescribeQuorumResponse};

use super::metadata::broker_id;
use super::{wire_str, wire_topic};
use crate::cluster::ClusterState;
use crate::cluster::peers::LinkSlot;
use crate::controller::service::Controller;
use crate::error::code;
use crate::replica::{Partition, QuorumProgress};

/// KRaft's metadata log, the name operators' tools ask for.
pub const METADATA_TOPIC: &str = "__cluster_metadata";

/// The answer on this node (`link`: the peer transport, to ask the leader).
pub async fn describe(
    controller: &Controller,
    link: &LinkSlot,
    cluster: &ClusterState,
    req: &DescribeQuorumRequest,
    version: i16,
) -> DescribeQuorumResponse {
    let mut resp = DescribeQuorumResponse::default();
    let valid = matches!(req.topics.as_slice(), [t] if t.topic_name.0.as_str() == METADATA_TOPIC
        && matches!(t.partitions.as_slice(), [p] if p.partition_index == 0));
    if !valid {
        // As KafkaRaftClient: every partition asked for is unknown.
        resp.topics = req
            .topics
            .iter()
            .map(|t| {
                let mut out = TopicData::default();
                out.topic_name = t.topic_name.clone();
                out.partitions = t
                    .partitions
                    .iter()
                    .map(|p| {
                        let mut d = PartitionData::default();
                        d.partition_index = p.partition_index;
                        d.error_code = code(ResponseError::UnknownTopicOrPartition);
                        d
                    })
                    .collect();
                out
            })
            .collect();
        return resp;
    }
    let replica = controller.partition();
    let data = match controller.leader_progress(link).await {
        Some(lp) => partition_data(replica, &lp.progress, lp.leader, lp.leader, lp.epoch),
        None => {
            // No answer from the leader: what this node knows itself.
            let (Some(leader), Some(own)) =
                (replica.leadership().leader, replica.quorum_progress())
            else {
                resp.error_code = code(ResponseError::NotLeaderOrFollower);
                return resp;
            };
            partition_data(replica, &own, leader, cluster.me, replica.leader_epoch())
        }
    };
    let mut topic = TopicData::default();
    topic.topic_name = wire_topic(METADATA_TOPIC);
    topic.partitions = vec![data];
    resp.topics = vec![topic];
    if version >= 2 {
        resp.nodes = controller
            .partition()
            .voters()
            .iter()
            .filter_map(|&id| cluster.member(id))
            .map(|m| {
                let mut l = Listener::default();
                l.name = wire_str("PLAINTEXT");
                l.host = wire_str(&m.host);
                l.port = u16::try_from(m.port).unwrap_or(0);
                let mut n = Node::default();
                n.node_id = broker_id(m.id);
                n.listeners = vec![l];
                n
            })
            .collect();
    }
    resp
}

/// Group 0 as `progress` (taken on node `from`, leading when it is
/// `leader`) shows it.
fn partition_data(
    replica: &Partition,
    progress: &QuorumProgress,
    leader: helix_raft::NodeId,
    from: helix_raft::NodeId,
    epoch: i32,
) -> PartitionData {
    let mut data = PartitionData::default();
    data.partition_index = 0;
    data.leader_id = broker_id(leader);
    data.leader_epoch = epoch;
    data.high_watermark = i64::try_from(progress.commit).unwrap_or(i64::MAX);
    data.current_voters = replica
        .voters()
        .iter()
        .map(|&node| voter_state(node, from, from == leader, progress))
        .collect();
    data
}

/// One voter as this node knows it: itself from its own log; another
/// from the leader's progress when this node leads, else unknown (-1).
fn voter_state(
    node: helix_raft::NodeId,
    me: helix_raft::NodeId,
    leading: bool,
    progress: &QuorumProgress,
) -> ReplicaState {
    let idx = |i: u64| i64::try_from(i).unwrap_or(i64::MAX);
    let mut s = ReplicaState::default();
    s.replica_id = broker_id(node);
    s.log_end_offset = -1;
    s.last_fetch_timestamp = -1;
    s.last_caught_up_timestamp = -1;
    if node == me {
        s.log_end_offset = idx(progress.last_index);
        if leading {
            s.last_fetch_timestamp = progress.at_ms;
            s.last_caught_up_timestamp = progress.at_ms;
        }
    } else if leading && let Some(f) = progress.followers.iter().find(|f| f.node == node) {
        s.log_end_offset = idx(f.matched);
        s.last_fetch_timestamp = f.heard_ms;
        if f.matched >= progress.last_index {
            s.last_caught_up_timestamp = f.heard_ms;
        }
    }
    s
}
