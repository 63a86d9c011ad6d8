//! ElectLeaders (`kafka-leader-election.sh`), as KRaft's controller
//! answers it (`ReplicationControlManager.electLeaders`). Preferred: a
//! partition whose preferred replica (its first) leads answers
//! ELECTION_NOT_NEEDED; one whose preferred replica is in the leader's ISR
//! has its leader asked to hand leadership over (`controller/election.rs`)
//! and answers NONE once the preferred replica leads, within the request's
//! timeout (at most [`MAX_WAIT`]); otherwise PREFERRED_LEADER_NOT_AVAILABLE.
//! Unclean elections never happen (Raft elects only from a majority holding
//! every committed entry): a partition with a leader answers
//! ELECTION_NOT_NEEDED, one without ELIGIBLE_LEADERS_NOT_AVAILABLE. Asked
//! for every partition, those that need no election are left out, as
//! Kafka does.

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::elect_leaders_response::{PartitionResult, ReplicaElectionResult};
use kafka_protocol::messages::{ElectLeadersRequest, ElectLeadersResponse};

use std::sync::Arc;
use std::time::Duration;

use helix_raft::{GroupId, NodeId};

use super::wire_topic;
use crate::cluster::ClusterState;
use crate::cluster::peers::LinkSlot;
use crate::controller::election;
use crate::error::code;
use crate::host::ReplicaHost;
use crate::replica::Partition;
use crate::topics::{Topic, TopicTable};

/// Kafka's `ElectionType.PREFERRED`; 1 is UNCLEAN.
const PREFERRED: i8 = 0;

/// The longest an answer waits for the elections it asked for.
pub const MAX_WAIT: Duration = Duration::from_secs(15);
/// How often the wait looks at who leads.
const POLL: Duration = Duration::from_millis(50);

pub async fn elect(
    topics: &TopicTable,
    cluster: &ClusterState,
    host: &ReplicaHost,
    link: &LinkSlot,
    req: &ElectLeadersRequest,
) -> ElectLeadersResponse {
    let preferred = req.election_type == PREFERRED;
    let all = req.topic_partitions.is_none();
    let asked: Vec<(String, Option<Arc<Topic>>, Vec<i32>)> = match &req.topic_partitions {
        None => topics
            .all()
            .into_iter()
            .map(|t| {
                (
                    t.name.clone(),
                    Some(t.clone()),
                    t.partitions.iter().map(|p| p.index).collect(),
                )
            })
            .collect(),
        Some(asked) => asked
            .iter()
            .map(|t| {
                (
                    t.topic.0.to_string(),
                    topics.get(t.topic.0.as_str()),
                    t.partitions.clone(),
                )
            })
            .collect(),
    };
    // Ask every leader first, then wait for them together.
    let mut results: Vec<(String, Vec<(i32, Outcome)>)> = Vec::with_capacity(asked.len());
    for (name, topic, indexes) in &asked {
        let mut out = Vec::with_capacity(indexes.len());
        for &index in indexes {
            let outcome = match topic {
                Some(topic) => start(cluster, host, link, topic, index, preferred).await,
                None => Outcome::Done(ResponseError::UnknownTopicOrPartition),
            };
            out.push((index, outcome));
        }
        results.push((name.clone(), out));
    }
    let wait = Duration::from_millis(u64::try_from(req.timeout_ms).unwrap_or(0)).min(MAX_WAIT);
    let deadline = tokio::time::Instant::now() + wait;
    loop {
        let waiting = results
            .iter_mut()
            .flat_map(|(_, r)| r.iter_mut())
            .filter(|(_, o)| matches!(o, Outcome::Waiting(..)))
            .fold(0, |n, (_, o)| {
                if let Outcome::Waiting(group, local, to) = o
                    && leader_of(cluster, *group, local.as_deref()) == Some(*to)
                {
                    *o = Outcome::Elected;
                    return n;
                }
                n + 1
            });
        if waiting == 0 || tokio::time::Instant::now() >= deadline {
            break;
        }
        tokio::time::sleep(POLL).await;
    }
    let mut resp = ElectLeadersResponse::default();
    for (name, outcomes) in results {
        let partitions: Vec<PartitionResult> = outcomes
            .into_iter()
            .map(|(index, o)| match o {
                Outcome::Elected => failed(index, None),
                Outcome::Done(e) => failed(index, Some(e)),
                Outcome::Waiting(..) => {
                    failed(index, Some(ResponseError::PreferredLeaderNotAvailable))
                }
            })
            .filter(|r| !all || r.error_code != code(ResponseError::ElectionNotNeeded))
            .collect();
        if !all || !partitions.is_empty() {
            resp.replica_election_results
                .push(topic_result(&name, partitions));
        }
    }
    resp
}

/// Where one partition's election stands.
enum Outcome {
    /// Answered: this error.
    Done(ResponseError),
    /// Its leader was asked to hand over to this node.
    Waiting(GroupId, Option<Arc<Partition>>, NodeId),
    /// The preferred replica leads now.
    Elected,
}

fn leader_of(cluster: &ClusterState, group: GroupId, local: Option<&Partition>) -> Option<NodeId> {
    cluster.leadership(group, local).map(|l| l.leader)
}

/// Starts one partition's election, or answers it at once.
async fn start(
    cluster: &ClusterState,
    host: &ReplicaHost,
    link: &LinkSlot,
    topic: &Topic,
    index: i32,
    preferred: bool,
) -> Outcome {
    let Some(p) = topic.partitions.iter().find(|p| p.index == index) else {
        return Outcome::Done(ResponseError::UnknownTopicOrPartition);
    };
    let view = cluster.leadership(p.group, p.local.as_deref());
    let (Some(view), true) = (view.clone(), preferred) else {
        return Outcome::Done(match (preferred, view) {
            (false, Some(_)) => ResponseError::ElectionNotNeeded,
            (false, None) => ResponseError::EligibleLeadersNotAvailable,
            (true, _) => ResponseError::PreferredLeaderNotAvailable,
        });
    };
    let Some(&first) = p.replicas.first() else {
        return Outcome::Done(ResponseError::PreferredLeaderNotAvailable);
    };
    if view.leader == first {
        return Outcome::Done(ResponseError::ElectionNotNeeded);
    }
    if !view.isr.contains(&first) {
        return Outcome::Done(ResponseError::PreferredLeaderNotAvailable);
    }
    election::hand_back(link, host, cluster.me, view.leader, p.group).await;
    Outcome::Waiting(p.group, p.local.clone(), first)
}

fn topic_result(name: &str, results: Vec<PartitionResult>) -> ReplicaElectionResult {
    let mut r = ReplicaElectionResult::default();
    r.topic = wire_topic(name);
    r.partition_result = results;
    r
}

fn failed(index: i32, error: Option<ResponseError>) -> PartitionResult {
    let mut r = PartitionResult::default();
    r.partition_id = index;
    r.error_code = error.map_or(0, code);
    r
}
