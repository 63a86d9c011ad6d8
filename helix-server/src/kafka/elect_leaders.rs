//! ElectLeaders (`kafka-leader-election.sh`), as KRaft's controller
//! answers it (`ReplicationControlManager.electLeaders`), without moving
//! leadership on request: a partition whose preferred replica (its first)
//! leads answers ELECTION_NOT_NEEDED; another, PREFERRED_LEADER_NOT_AVAILABLE
//! (Helix hands leadership back to the preferred replica by itself once it
//! is caught up: leader balancing in `host/shard/leadership.rs`). Unclean
//! elections never happen (Raft elects only from a majority holding every
//! committed entry): a partition with a leader answers ELECTION_NOT_NEEDED,
//! one without ELIGIBLE_LEADERS_NOT_AVAILABLE. Asked for every partition,
//! those that need no election are left out, as Kafka does.

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::elect_leaders_response::{PartitionResult, ReplicaElectionResult};
use kafka_protocol::messages::{ElectLeadersRequest, ElectLeadersResponse};

use super::wire_topic;
use crate::cluster::ClusterState;
use crate::error::code;
use crate::topics::{Topic, TopicTable};

/// Kafka's `ElectionType.PREFERRED`; 1 is UNCLEAN.
const PREFERRED: i8 = 0;

pub fn elect(
    topics: &TopicTable,
    cluster: &ClusterState,
    req: &ElectLeadersRequest,
) -> ElectLeadersResponse {
    let preferred = req.election_type == PREFERRED;
    let mut resp = ElectLeadersResponse::default();
    let Some(asked) = &req.topic_partitions else {
        for topic in topics.all() {
            let results: Vec<PartitionResult> = topic
                .partitions
                .iter()
                .map(|p| result(cluster, &topic, p.index, preferred))
                .filter(|r| r.error_code != code(ResponseError::ElectionNotNeeded))
                .collect();
            if !results.is_empty() {
                resp.replica_election_results
                    .push(topic_result(&topic.name, results));
            }
        }
        return resp;
    };
    for t in asked {
        let name = t.topic.0.as_str();
        let topic = topics.get(name);
        let results = t
            .partitions
            .iter()
            .map(|&index| match &topic {
                Some(topic) => result(cluster, topic, index, preferred),
                None => failed(index, ResponseError::UnknownTopicOrPartition),
            })
            .collect();
        resp.replica_election_results
            .push(topic_result(name, results));
    }
    resp
}

fn topic_result(name: &str, results: Vec<PartitionResult>) -> ReplicaElectionResult {
    let mut r = ReplicaElectionResult::default();
    r.topic = wire_topic(name);
    r.partition_result = results;
    r
}

fn result(cluster: &ClusterState, topic: &Topic, index: i32, preferred: bool) -> PartitionResult {
    let Some(p) = topic.partitions.iter().find(|p| p.index == index) else {
        return failed(index, ResponseError::UnknownTopicOrPartition);
    };
    let leader = cluster
        .leadership(p.group, p.local.as_deref())
        .map(|l| l.leader);
    let error = match (preferred, leader) {
        (true, Some(l)) if p.replicas.first() == Some(&l) => ResponseError::ElectionNotNeeded,
        (true, _) => ResponseError::PreferredLeaderNotAvailable,
        (false, Some(_)) => ResponseError::ElectionNotNeeded,
        (false, None) => ResponseError::EligibleLeadersNotAvailable,
    };
    failed(index, error)
}

fn failed(index: i32, error: ResponseError) -> PartitionResult {
    let mut r = PartitionResult::default();
    r.partition_id = index;
    r.error_code = code(error);
    r
}
