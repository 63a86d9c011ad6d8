//! CreateTopics, DeleteTopics, CreatePartitions.

use std::collections::BTreeMap;
use std::sync::Arc;

use kafka_protocol::messages::create_partitions_response::CreatePartitionsTopicResult;
use kafka_protocol::messages::create_topics_response::{
    CreatableTopicConfigs, CreatableTopicResult,
};
use kafka_protocol::messages::delete_topics_response::DeletableTopicResult;
use kafka_protocol::messages::{
    CreatePartitionsRequest, CreatePartitionsResponse, CreateTopicsRequest, CreateTopicsResponse,
    DeleteTopicsRequest, DeleteTopicsResponse,
};

use super::{wire_str, wire_topic};
use crate::broker::Broker;
use crate::controller::topic_config::{self, TOPIC_CONFIGS};
use crate::error::HelixError;

pub async fn create_topics(
    broker: &Arc<Broker>,
    req: CreateTopicsRequest,
    version: i16,
) -> CreateTopicsResponse {
    let mut resp = CreateTopicsResponse::default();
    for t in req.topics {
        let mut r = CreatableTopicResult::default();
        r.name = t.name.clone();
        r.num_partitions = -1;
        r.replication_factor = -1;
        let result = create_one(broker, &t, req.validate_only).await;
        match result {
            Ok(topic) => {
                r.topic_id = topic.id;
                r.num_partitions = if t.num_partitions == -1 {
                    broker.config.default_partitions
                } else {
                    t.num_partitions
                };
                r.replication_factor = 1;
                if version >= 5 {
                    r.configs = Some(
                        TOPIC_CONFIGS
                            .iter()
                            .filter_map(|d| {
                                let (value, source) = match topic.configs.get(d.name) {
                                    Some(v) => {
                                        (v.clone(), topic_config::ConfigSource::DynamicTopic)
                                    }
                                    None => topic_config::default_value(d.name, &broker.config)?,
                                };
                                let mut c = CreatableTopicConfigs::default();
                                c.name = wire_str(d.name);
                                c.value = Some(wire_str(&value));
                                c.config_source = source as i8;
                                Some(c)
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
    broker: &Arc<Broker>,
    t: &kafka_protocol::messages::create_topics_request::CreatableTopic,
    validate_only: bool,
) -> Result<Arc<crate::broker::Topic>, HelixError> {
    if !t.assignments.is_empty() {
        return Err(HelixError::InvalidRequest(
            "manual replica assignment is not supported".into(),
        ));
    }
    if t.replication_factor != -1 && t.replication_factor != 1 {
        return Err(HelixError::InvalidReplicationFactor(format!(
            "replication factor {} on a single node",
            t.replication_factor
        )));
    }
    let mut configs = BTreeMap::new();
    for c in &t.configs {
        if let Some(v) = &c.value {
            configs.insert(c.name.to_string(), v.to_string());
        }
    }
    broker
        .create_topic(&t.name, t.num_partitions, configs, validate_only)
        .await
}

pub async fn delete_topics(
    broker: &Arc<Broker>,
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
        let name = name.or_else(|| broker.topic_by_id(id).map(|t| t.name.clone()));
        let result = match &name {
            Some(n) => broker.delete_topic(n).await,
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
    broker: &Arc<Broker>,
    req: CreatePartitionsRequest,
) -> CreatePartitionsResponse {
    let mut resp = CreatePartitionsResponse::default();
    for t in req.topics {
        let mut r = CreatePartitionsTopicResult::default();
        r.name = t.name.clone();
        let result = if t.assignments.as_ref().is_some_and(|a| !a.is_empty()) {
            Err(HelixError::InvalidRequest(
                "manual replica assignment is not supported".into(),
            ))
        } else {
            broker
                .create_partitions(&t.name, t.count, req.validate_only)
                .await
        };
        if let Err(e) = result {
            r.error_code = e.kafka_code();
            r.error_message = Some(wire_str(&e.message()));
        }
        resp.results.push(r);
    }
    resp
}
