//! Metadata: the live brokers, the cluster id, the controller, and topics
//! with their partitions' leaders, epochs, replicas and ISR as this node
//! knows them (see `cluster`), creating requested topics on first use when
//! allowed. Internal topics (`__consumer_offsets`) are marked so.

use std::sync::Arc;

use kafka_protocol::messages::metadata_response::{
    MetadataResponseBroker, MetadataResponsePartition, MetadataResponseTopic,
};
use kafka_protocol::messages::{BrokerId, MetadataRequest, MetadataResponse};

use super::{wire_str, wire_topic};
use crate::broker::Broker;
use crate::error::{HelixError, NONE};
use crate::partition::term_epoch;
use crate::topics::Topic;

pub async fn handle(broker: &Arc<Broker>, req: MetadataRequest, version: i16) -> MetadataResponse {
    let mut resp = MetadataResponse::default();
    resp.brokers = broker
        .cluster
        .live_members()
        .into_iter()
        .map(|m| {
            let mut b = MetadataResponseBroker::default();
            b.node_id = broker_id(m.id);
            b.host = wire_str(&m.host);
            b.port = m.port;
            b
        })
        .collect();
    resp.cluster_id = Some(wire_str(&broker.cluster_id));
    resp.controller_id = broker_id(broker.controller_id());
    // Before v4 the field does not exist and Kafka auto-creates.
    let allow_create = version < 4 || req.allow_auto_topic_creation;
    // v0 has no null: an empty list asks for every topic.
    let every_topic = req
        .topics
        .as_ref()
        .is_none_or(|t| version == 0 && t.is_empty());
    resp.topics = match req.topics {
        _ if every_topic => broker
            .all_topics()
            .iter()
            .map(|t| topic_entry(broker, t))
            .collect(),
        None => Vec::new(),
        Some(requested) => {
            let mut out = Vec::with_capacity(requested.len());
            for r in requested {
                let found = match &r.name {
                    Some(name) if allow_create => broker.topic_or_create(name).await,
                    Some(name) => broker
                        .topic(name)
                        .ok_or(HelixError::UnknownTopicOrPartition),
                    None => broker
                        .topic_by_id(r.topic_id)
                        .ok_or(HelixError::UnknownTopicId),
                };
                out.push(match found {
                    Ok(t) => topic_entry(broker, &t),
                    Err(e) => {
                        let mut t = MetadataResponseTopic::default();
                        t.error_code = e.kafka_code();
                        t.name = r.name.clone();
                        t.topic_id = r.topic_id;
                        t
                    }
                });
            }
            out
        }
    };
    resp
}

pub fn broker_id(node: helix_raft::NodeId) -> BrokerId {
    BrokerId(i32::try_from(node.0).unwrap_or(-1))
}

/// LEADER_NOT_AVAILABLE: a partition whose leader is unknown or down.
const LEADER_NOT_AVAILABLE: i16 = 5;

fn topic_entry(broker: &Broker, t: &Topic) -> MetadataResponseTopic {
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
            match broker.cluster.leadership(p.group, p.local.as_deref()) {
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
                    m.error_code = LEADER_NOT_AVAILABLE;
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
                    !broker.cluster.is_alive(**n)
                        || (**n == broker.cluster.me && p.refused.is_some())
                })
                .map(|n| broker_id(*n))
                .collect();
            m
        })
        .collect();
    out
}
