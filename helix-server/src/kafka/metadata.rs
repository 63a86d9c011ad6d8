//! Metadata: the live brokers, the cluster id, the controller, and topics
//! with their partitions' leaders, epochs, replicas and ISR as this node
//! knows them (see `cluster`), creating requested topics on first use when
//! allowed. Internal topics (`__consumer_offsets`) are marked so.

use std::sync::Arc;
use std::time::Duration;

use helix_raft::Role;

use kafka_protocol::messages::metadata_response::{
    MetadataResponseBroker, MetadataResponsePartition, MetadataResponseTopic,
};
use kafka_protocol::messages::{BrokerId, MetadataRequest, MetadataResponse};

use super::context::Routing;
use super::{wire_str, wire_topic};
use crate::error::{HelixError, NONE, code};
use crate::replica::term_epoch;
use crate::topics::Topic;
use kafka_protocol::error::ResponseError;

pub async fn handle(node: Routing<'_>, req: MetadataRequest, version: i16) -> MetadataResponse {
    let mut resp = MetadataResponse::default();
    // A node that hears no majority (starting, or cut off) answers with
    // what it can vouch for: every member it knows, no leader for any
    // partition (LEADER_NOT_AVAILABLE, retriable), no topic created. The
    // client retries and reaches the nodes that serve; it is never
    // disconnected (Kafka's brokers keep answering Metadata too, issue 30
    // item 7).
    let cut_off = !node.cluster.hears_majority();
    // A node whose topic table has not caught up with the controller's log
    // (just started) cannot say a topic does not exist: asked for one it
    // does not know, it waits a moment to catch up; still behind, it
    // answers LEADER_NOT_AVAILABLE (retriable) and creates none (Kafka's
    // brokers open their listener only once caught up with the metadata
    // log).
    let behind = !node.controller.caught_up() && (cut_off || !settle_topic_table(node, &req).await);
    // Before v4 the field does not exist and Kafka auto-creates.
    let allow_create = (version < 4 || req.allow_auto_topic_creation) && !cut_off && !behind;
    // v0 has no null: an empty list asks for every topic.
    let every_topic = req
        .topics
        .as_ref()
        .is_none_or(|t| version == 0 && t.is_empty());
    let found: Vec<Result<Arc<Topic>, MetadataResponseTopic>> = match req.topics {
        _ if every_topic => node.topics.all().into_iter().map(Ok).collect(),
        None => Vec::new(),
        Some(requested) => {
            let mut out = Vec::with_capacity(requested.len());
            for r in requested {
                let found = match &r.name {
                    Some(name) if allow_create => node.admin.topic_or_create(name).await,
                    Some(name) => node
                        .topics
                        .get(name)
                        .ok_or(HelixError::UnknownTopicOrPartition),
                    None => node
                        .topics
                        .by_id(r.topic_id)
                        .ok_or(HelixError::UnknownTopicId),
                };
                out.push(found.map_err(|e| {
                    let mut t = MetadataResponseTopic::default();
                    t.error_code = match e {
                        HelixError::UnknownTopicOrPartition | HelixError::UnknownTopicId
                            if behind =>
                        {
                            code(ResponseError::LeaderNotAvailable)
                        }
                        e => e.kafka_code(),
                    };
                    t.name = r.name.clone();
                    t.topic_id = r.topic_id;
                    t
                }));
            }
            out
        }
    };
    if !cut_off {
        settle_elections(found.iter().filter_map(|f| f.as_ref().ok())).await;
    }
    let entries = |cut_off| -> Vec<MetadataResponseTopic> {
        found
            .iter()
            .map(|f| match f {
                Ok(t) => topic_entry(node, t, cut_off),
                Err(t) => t.clone(),
            })
            .collect()
    };
    resp.topics = entries(cut_off);
    // Decided again once the leaders are read: a node that learnt it is
    // cut off meanwhile (its lease went with the same news) answers as
    // cut off, never as a member that names no leader, which would keep a
    // client that asks only it waiting (ADR 0023, fourth attempt).
    let cut_off = cut_off || !node.cluster.hears_majority();
    if cut_off && resp.topics.iter().any(names_a_leader) {
        resp.topics = entries(true);
    }
    resp.brokers = node
        .cluster
        .members_to_offer()
        .into_iter()
        .map(|m| {
            let mut b = MetadataResponseBroker::default();
            b.node_id = broker_id(m.id);
            b.host = wire_str(&m.host);
            b.port = m.port;
            b
        })
        .collect();
    resp.cluster_id = Some(wire_str(node.cluster_id));
    // Kafka's NO_CONTROLLER_ID (-1) where it cannot vouch for one.
    resp.controller_id = if cut_off {
        BrokerId(-1)
    } else {
        broker_id(node.controller_id())
    };
    resp
}

/// Longest a Metadata answer that names a topic this node does not know
/// waits for its topic table to catch up with the controller's log (a node
/// just started or just formed its cluster: measured under a second).
const CATCH_UP_WAIT: Duration = Duration::from_secs(2);
const CATCH_UP_POLL: Duration = Duration::from_millis(10);

/// Whether this node's topic table caught up with the controller's log,
/// waiting at most [`CATCH_UP_WAIT`] when `req` names a topic the table
/// does not hold: only a caught-up node may say a topic does not exist
/// (UNKNOWN_TOPIC_OR_PARTITION) or create it. Kafka's broker opens its
/// listener only once caught up, so a client never hears a retriable
/// LEADER_NOT_AVAILABLE for a topic that does not exist; holding the answer
/// briefly is the nearest to that (franz-go's TestIssue648 expects the
/// UNKNOWN_TOPIC_OR_PARTITION right after the cluster starts).
async fn settle_topic_table(node: Routing<'_>, req: &MetadataRequest) -> bool {
    let names_unknown = req.topics.as_ref().is_some_and(|topics| {
        topics.iter().any(|t| match &t.name {
            Some(name) => node.topics.get(name).is_none(),
            None => node.topics.by_id(t.topic_id).is_none(),
        })
    });
    if !names_unknown {
        return false;
    }
    let deadline = tokio::time::Instant::now() + CATCH_UP_WAIT;
    while tokio::time::Instant::now() < deadline {
        if node.controller.caught_up() {
            return true;
        }
        if !node.cluster.hears_majority() {
            return false;
        }
        tokio::time::sleep(CATCH_UP_POLL).await;
    }
    node.controller.caught_up()
}

/// Longest a Metadata answer waits for the elections under way among the
/// partitions it describes.
const ELECTION_WAIT: Duration = Duration::from_millis(100);
const ELECTION_POLL: Duration = Duration::from_millis(5);

/// Waits, at most [`ELECTION_WAIT`], while a local replica of `topics` is
/// in an election (no leader known, this node not leading). Typically a
/// leader was just killed and its followers, told by the peer transport,
/// are electing the next one (milliseconds; ADR 0017). Answering at once
/// would name the dead leader (its report is still fresh) and costs
/// librdkafka clients about a second: they stop their fast leader query at
/// the first answer that names a leader for every partition, and look
/// again only at their one-second scan.
async fn settle_elections<'a>(topics: impl Iterator<Item = &'a Arc<Topic>> + Clone) {
    let electing = || {
        topics.clone().any(|t| {
            t.partitions.iter().any(|p| {
                p.local.as_ref().is_some_and(|r| {
                    let l = r.leadership();
                    l.leader.is_none() && l.role != Role::Leader && r.voters().len() > 1
                })
            })
        })
    };
    if !electing() {
        return;
    }
    crate::metrics::Metrics::count(
        &crate::metrics::metrics().counters.metadata_election_waits,
        1,
    );
    let deadline = tokio::time::Instant::now() + ELECTION_WAIT;
    while electing() && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(ELECTION_POLL).await;
    }
}

fn names_a_leader(t: &MetadataResponseTopic) -> bool {
    t.partitions.iter().any(|p| p.leader_id.0 >= 0)
}

pub fn broker_id(node: helix_raft::NodeId) -> BrokerId {
    BrokerId(i32::try_from(node.0).unwrap_or(-1))
}

fn topic_entry(node: Routing<'_>, t: &Topic, cut_off: bool) -> MetadataResponseTopic {
    let mut out = MetadataResponseTopic::default();
    out.error_code = NONE;
    out.name = Some(wire_topic(&t.name));
    out.topic_id = t.id;
    out.is_internal = t.internal;
    out.partitions = t
        .partitions
        .iter()
        .map(|p| {
            let mut m = MetadataResponsePartition::default();
            m.partition_index = p.index;
            m.replica_nodes = p.replicas.iter().map(|n| broker_id(*n)).collect();
            let vouched = if cut_off {
                None
            } else {
                node.cluster.leadership(p.group, p.local.as_deref())
            };
            match vouched {
                Some(l) => {
                    m.leader_id = broker_id(l.leader);
                    m.leader_epoch = term_epoch(l.term);
                    // The leader's ISR when known; otherwise the leader alone
                    // is known to be in sync.
                    let isr = if l.isr.is_empty() {
                        vec![l.leader]
                    } else {
                        l.isr
                    };
                    m.isr_nodes = isr.into_iter().map(broker_id).collect();
                }
                None => {
                    // Unknown, down, this node leading without its lease,
                    // or this node hearing no majority: none it can vouch for.
                    m.error_code = code(ResponseError::LeaderNotAvailable);
                    m.leader_id = BrokerId(-1);
                    // The term this replica last saw: a client that already
                    // knows a newer leader (a higher epoch) ignores this
                    // answer from a node cut off from the majority.
                    m.leader_epoch = p
                        .local
                        .as_ref()
                        .map_or(-1, |r| term_epoch(r.leadership().term));
                    m.isr_nodes = Vec::new();
                }
            }
            m.offline_replicas = p
                .replicas
                .iter()
                .filter(|n| {
                    !node.cluster.is_alive(**n) || (**n == node.cluster.me && p.refused.is_some())
                })
                .map(|n| broker_id(*n))
                .collect();
            m
        })
        .collect();
    out
}
