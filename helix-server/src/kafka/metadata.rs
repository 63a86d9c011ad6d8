//! Metadata: brokers (this node), the cluster id, and topics with their
//! partitions, creating requested topics on first use when allowed.

use std::sync::Arc;

use kafka_protocol::messages::metadata_response::{
    MetadataResponseBroker, MetadataResponsePartition, MetadataResponseTopic,
};
use kafka_protocol::messages::{BrokerId, MetadataRequest, MetadataResponse};

use super::{wire_str, wire_topic};
use crate::broker::{Broker, Topic};
use crate::error::{HelixError, NONE};

pub async fn handle(broker: &Arc<Broker>, req: MetadataRequest, version: i16) -> MetadataResponse {
    let node = broker.config.node_id;
    let (host, port) = broker.config.advertised_host_port();
    let mut resp = MetadataResponse::default();
    let mut b = MetadataResponseBroker::default();
    b.node_id = BrokerId(node);
    b.host = wire_str(&host);
    b.port = port;
    resp.brokers = vec![b];
    resp.cluster_id = Some(wire_str(&broker.cluster_id));
    resp.controller_id = BrokerId(node);
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
            .map(|t| topic_entry(t, node))
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
                    Ok(t) => topic_entry(&t, node),
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

fn topic_entry(t: &Topic, node: i32) -> MetadataResponseTopic {
    let mut out = MetadataResponseTopic::default();
    out.error_code = NONE;
    out.name = Some(wire_topic(&t.name));
    out.topic_id = t.id;
    out.partitions = t
        .partitions
        .iter()
        .map(|p| {
            let mut m = MetadataResponsePartition::default();
            m.partition_index = p.index;
            m.leader_id = BrokerId(node);
            m.leader_epoch = p.leader_epoch();
            m.replica_nodes = vec![BrokerId(node)];
            m.isr_nodes = vec![BrokerId(node)];
            m
        })
        .collect();
    out
}
