//! CreateTopics, DeleteTopics, CreatePartitions.

use std::collections::BTreeMap;

use kafka_protocol::messages::create_partitions_response::CreatePartitionsTopicResult;
use kafka_protocol::messages::create_topics_response::{
    CreatableTopicConfigs, CreatableTopicResult,
};
use kafka_protocol::messages::delete_topics_response::DeletableTopicResult;
use kafka_protocol::messages::{
    CreatePartitionsRequest, CreatePartitionsResponse, CreateTopicsRequest, CreateTopicsResponse,
    DeleteTopicsRequest, DeleteTopicsResponse,
};

use super::context::Administering;
use super::{wire_str, wire_topic};
use crate::admin::NewTopic;
use crate::controller::topic_config;
use crate::error::HelixError;

pub async fn create_topics(
    node: Administering<'_>,
    req: CreateTopicsRequest,
    version: i16,
) -> CreateTopicsResponse {
    let mut resp = CreateTopicsResponse::default();
    for t in req.topics {
        let mut r = CreatableTopicResult::default();
        r.name = t.name.clone();
        r.num_partitions = -1;
        r.replication_factor = -1;
        let result = create_one(node, &t, req.validate_only).await;
        match result {
            Ok(topic) => {
                r.topic_id = topic.id;
                r.num_partitions = topic.partitions;
                r.replication_factor = topic.replication_factor;
                if version >= 5 {
                    r.configs = Some(
                        topic_config::describe(
                            &topic.configs,
                            node.config,
                            topic.replication_factor as usize,
                        )
                        .map(|(d, value, source)| {
                            let mut c = CreatableTopicConfigs::default();
                            c.name = wire_str(d.name);
                            c.value = Some(wire_str(&value));
                            c.config_source = source as i8;
                            c
                        })
                        .collect(),
                    );
                }
            }
            Err(e) => {
                r.error_code = e.kafka_code();
                r.error_message = Some(wire_str(&e.message()));
            }
        }
        resp.topics.push(r);
    }
    resp
}

async fn create_one(
    node: Administering<'_>,
    t: &kafka_protocol::messages::create_topics_request::CreatableTopic,
    validate_only: bool,
) -> Result<NewTopic, HelixError> {
    let assignments = if t.assignments.is_empty() {
        None
    } else {
        let mut sets: Vec<(i32, Vec<u64>)> = t
            .assignments
            .iter()
            .map(|a| node_ids(&a.broker_ids).map(|ids| (a.partition_index, ids)))
            .collect::<Result<_, _>>()?;
        sets.sort_by_key(|(p, _)| *p);
        if sets.iter().enumerate().any(|(i, (p, _))| *p != i as i32) {
            return Err(HelixError::InvalidReplicaAssignment(
                "partition indexes must be 0..n, each once".into(),
            ));
        }
        Some(sets.into_iter().map(|(_, s)| s).collect())
    };
    let mut configs = BTreeMap::new();
    for c in &t.configs {
        if let Some(v) = &c.value {
            configs.insert(c.name.to_string(), v.to_string());
        }
    }
    node.admin
        .create_topic(
            &t.name,
            t.num_partitions,
            t.replication_factor,
            assignments,
            configs,
            validate_only,
        )
        .await
}

/// Broker ids of a manual assignment as node ids.
fn node_ids(ids: &[kafka_protocol::messages::BrokerId]) -> Result<Vec<u64>, HelixError> {
    ids.iter()
        .map(|b| {
            u64::try_from(b.0)
                .map_err(|_| HelixError::InvalidReplicaAssignment(format!("broker id {}", b.0)))
        })
        .collect()
}

pub async fn delete_topics(
    node: Administering<'_>,
    req: DeleteTopicsRequest,
    version: i16,
) -> DeleteTopicsResponse {
    let mut resp = DeleteTopicsResponse::default();
    // v6 names topics by name or id in `topics`; earlier versions by name.
    let targets: Vec<(Option<String>, uuid::Uuid)> = if version >= 6 {
        req.topics
            .iter()
            .map(|t| (t.name.as_ref().map(|n| n.to_string()), t.topic_id))
            .collect()
    } else {
        req.topic_names
            .iter()
            .map(|n| (Some(n.to_string()), uuid::Uuid::nil()))
            .collect()
    };
    for (name, id) in targets {
        let mut r = DeletableTopicResult::default();
        let name = name.or_else(|| node.topics.by_id(id).map(|t| t.name.clone()));
        let result = match &name {
            Some(n) => node.admin.delete_topic(n).await,
            None => Err(HelixError::UnknownTopicId),
        };
        r.name = name.as_deref().map(wire_topic);
        match result {
            Ok(deleted) => r.topic_id = deleted,
            Err(e) => {
                r.topic_id = id;
                r.error_code = e.kafka_code();
                r.error_message = Some(wire_str(&e.message()));
            }
        }
        resp.responses.push(r);
    }
    resp
}

pub async fn create_partitions(
    node: Administering<'_>,
    req: CreatePartitionsRequest,
) -> CreatePartitionsResponse {
    let mut resp = CreatePartitionsResponse::default();
    for t in req.topics {
        let mut r = CreatePartitionsTopicResult::default();
        r.name = t.name.clone();
        let assignments = t
            .assignments
            .as_ref()
            .filter(|a| !a.is_empty())
            .map(|a| {
                a.iter()
                    .map(|p| node_ids(&p.broker_ids))
                    .collect::<Result<Vec<_>, _>>()
            })
            .transpose();
        let result = match assignments {
            Ok(assignments) => {
                node.admin
                    .create_partitions(&t.name, t.count, assignments, req.validate_only)
                    .await
            }
            Err(e) => Err(e),
        };
        if let Err(e) = result {
            r.error_code = e.kafka_code();
            r.error_message = Some(wire_str(&e.message()));
        }
        resp.results.push(r);
    }
    resp
}
