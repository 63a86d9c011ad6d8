//! The topic APIs' checks, as `KafkaApis` makes them: Produce needs Write
//! (and, transactional, Write on its transactional id), Fetch Read,
//! ListOffsets and OffsetForLeaderEpoch Describe, DeleteRecords Delete,
//! DescribeProducers Read; Metadata lists only topics the principal may
//! Describe and auto-creates only with Create on the cluster or the
//! topic; CreateTopics needs Create (cluster or topic), DeleteTopics
//! Delete, CreatePartitions Alter; DescribeConfigs / AlterConfigs need
//! DescribeConfigs / AlterConfigs on the topic, or on the cluster for a
//! broker. Denied entries get TOPIC_AUTHORIZATION_FAILED (the cluster's:
//! CLUSTER_AUTHORIZATION_FAILED).

use kafka_protocol::messages::create_topics_response::CreatableTopicResult;
use kafka_protocol::messages::delete_records_response::{
    DeleteRecordsPartitionResult, DeleteRecordsTopicResult,
};
use kafka_protocol::messages::delete_topics_response::DeletableTopicResult;
use kafka_protocol::messages::describe_configs_response::DescribeConfigsResult;
use kafka_protocol::messages::describe_producers_response::{PartitionResponse, TopicResponse};
use kafka_protocol::messages::fetch_response::{FetchableTopicResponse, PartitionData};
use kafka_protocol::messages::list_offsets_response::{
    ListOffsetsPartitionResponse, ListOffsetsTopicResponse,
};
use kafka_protocol::messages::metadata_response::MetadataResponseTopic;
use kafka_protocol::messages::offset_for_leader_epoch_response::{
    EpochEndOffset, OffsetForLeaderTopicResult,
};
use kafka_protocol::messages::produce_response::{PartitionProduceResponse, TopicProduceResponse};
use kafka_protocol::messages::{
    AlterConfigsRequest, CreatePartitionsRequest, CreateTopicsRequest, DeleteRecordsRequest,
    DeleteTopicsRequest, DescribeConfigsRequest, DescribeProducersRequest, FetchRequest,
    IncrementalAlterConfigsRequest, ListOffsetsRequest, MetadataRequest,
    OffsetForLeaderEpochRequest, ProduceRequest, ProduceResponse, RequestKind, ResponseKind,
    alter_configs_response, create_partitions_response, incremental_alter_configs_response,
};
use kafka_protocol::protocol::StrBytes;

use super::{
    Access, CLUSTER_DENIED, Checked, TOPIC_DENIED, TXN_ID_DENIED, merge, take_denied,
    take_denied_with,
};
use crate::acl::Operation;

/// Kafka's config resource types: a topic, a broker, a broker's loggers.
const CONFIG_TOPIC: i8 = 2;
const CONFIG_BROKER: i8 = 4;
const CONFIG_BROKER_LOGGER: i8 = 8;

pub(super) fn produce(access: &Access, mut req: ProduceRequest) -> Checked {
    if let Some(id) = req.transactional_id.as_ref().filter(|id| !id.0.is_empty())
        && !access.transactional_id(Operation::Write, &id.0)
    {
        let mut resp = ProduceResponse::default();
        resp.responses = req
            .topic_data
            .iter()
            .map(|t| produce_result(t.name.clone(), t.topic_id, &t.partition_data, TXN_ID_DENIED))
            .collect();
        return Checked::Refused(ResponseKind::Produce(resp));
    }
    let denied = take_denied(&mut req.topic_data, |t| {
        access
            .topic_name(&t.name.0, t.topic_id)
            .is_none_or(|name| access.topic(Operation::Write, &name))
    });
    if denied.is_empty() {
        return Checked::Pass(RequestKind::Produce(req), None);
    }
    let results: Vec<_> = denied
        .iter()
        .map(|t| produce_result(t.name.clone(), t.topic_id, &t.partition_data, TOPIC_DENIED))
        .collect();
    Checked::Pass(
        RequestKind::Produce(req),
        merge!(Produce, |resp| resp.responses.extend(results)),
    )
}

fn produce_result(
    name: kafka_protocol::messages::TopicName,
    id: uuid::Uuid,
    partitions: &[kafka_protocol::messages::produce_request::PartitionProduceData],
    code: i16,
) -> TopicProduceResponse {
    let mut t = TopicProduceResponse::default();
    t.name = name;
    t.topic_id = id;
    t.partition_responses = partitions
        .iter()
        .map(|p| {
            let mut r = PartitionProduceResponse::default();
            r.index = p.index;
            r.error_code = code;
            r.base_offset = -1;
            r.log_append_time_ms = -1;
            r.log_start_offset = -1;
            r
        })
        .collect();
    t
}

pub(super) fn fetch(access: &Access, mut req: FetchRequest) -> Checked {
    let denied = take_denied(&mut req.topics, |t| {
        access
            .topic_name(&t.topic.0, t.topic_id)
            .is_none_or(|name| access.topic(Operation::Read, &name))
    });
    if denied.is_empty() {
        return Checked::Pass(RequestKind::Fetch(req), None);
    }
    let results: Vec<_> = denied
        .into_iter()
        .map(|t| {
            let mut r = FetchableTopicResponse::default();
            r.topic = t.topic;
            r.topic_id = t.topic_id;
            r.partitions = t
                .partitions
                .iter()
                .map(|p| {
                    let mut d = PartitionData::default();
                    d.partition_index = p.partition;
                    d.error_code = TOPIC_DENIED;
                    d.high_watermark = -1;
                    d.last_stable_offset = -1;
                    d.log_start_offset = -1;
                    d
                })
                .collect();
            r
        })
        .collect();
    Checked::Pass(
        RequestKind::Fetch(req),
        merge!(Fetch, |resp| resp.responses.extend(results)),
    )
}

pub(super) fn list_offsets(access: &Access, mut req: ListOffsetsRequest) -> Checked {
    let denied = take_denied(&mut req.topics, |t| {
        access.topic(Operation::Describe, &t.name.0)
    });
    if denied.is_empty() {
        return Checked::Pass(RequestKind::ListOffsets(req), None);
    }
    let results: Vec<_> = denied
        .into_iter()
        .map(|t| {
            let mut r = ListOffsetsTopicResponse::default();
            r.name = t.name;
            r.partitions = t
                .partitions
                .iter()
                .map(|p| {
                    let mut d = ListOffsetsPartitionResponse::default();
                    d.partition_index = p.partition_index;
                    d.error_code = TOPIC_DENIED;
                    d.timestamp = -1;
                    d.offset = -1;
                    d.leader_epoch = -1;
                    d
                })
                .collect();
            r
        })
        .collect();
    Checked::Pass(
        RequestKind::ListOffsets(req),
        merge!(ListOffsets, |resp| resp.topics.extend(results)),
    )
}

/// Metadata: requested topics the principal may not Describe, or may not
/// create when they are missing and would be auto-created, are answered
/// TOPIC_AUTHORIZATION_FAILED and never reach the handler; a request for
/// every topic lists only the describable ones.
pub(super) fn metadata(access: &Access, version: i16, mut req: MetadataRequest) -> Checked {
    let every_topic = req
        .topics
        .as_ref()
        .is_none_or(|t| version == 0 && t.is_empty());
    let mut denied = Vec::new();
    if let Some(topics) = req.topics.as_mut().filter(|_| !every_topic) {
        let may_create = req.allow_auto_topic_creation
            && access.auto_create()
            && !access.allows_cluster(Operation::Create);
        denied = take_denied(topics, |t| {
            let Some(name) = t.name.as_ref() else {
                return true; // by id: filtered from the answer
            };
            access.topic(Operation::Describe, &name.0)
                && (!may_create
                    || access.topic_exists(&name.0)
                    || access.topic(Operation::Create, &name.0))
        });
    }
    let denied: Vec<_> = denied
        .into_iter()
        .map(|t| {
            let mut r = MetadataResponseTopic::default();
            r.error_code = TOPIC_DENIED;
            r.name = t.name;
            r
        })
        .collect();
    // v0's empty list means every topic: nothing left to ask must not
    // become "everything".
    let none_left = version == 0 && !every_topic && req.topics.as_ref().is_some_and(Vec::is_empty);
    let access = access.clone();
    Checked::Pass(
        RequestKind::Metadata(req),
        merge!(Metadata, |resp| {
            if none_left {
                resp.topics.clear();
            }
            resp.topics.retain_mut(|t| {
                let Some(name) = t.name.as_ref() else {
                    return true;
                };
                if t.error_code == TOPIC_DENIED || access.topic(Operation::Describe, &name.0) {
                    return true;
                }
                if every_topic {
                    return false;
                }
                // Asked for by id: the id is no secret, the name is.
                t.error_code = TOPIC_DENIED;
                t.name = None;
                t.partitions.clear();
                true
            });
            resp.topics.extend(denied);
        }),
    )
}

pub(super) fn delete_records(access: &Access, mut req: DeleteRecordsRequest) -> Checked {
    let denied = take_denied(&mut req.topics, |t| {
        access.topic(Operation::Delete, &t.name.0)
    });
    if denied.is_empty() {
        return Checked::Pass(RequestKind::DeleteRecords(req), None);
    }
    let results: Vec<_> = denied
        .into_iter()
        .map(|t| {
            let mut r = DeleteRecordsTopicResult::default();
            r.name = t.name;
            r.partitions = t
                .partitions
                .iter()
                .map(|p| {
                    let mut d = DeleteRecordsPartitionResult::default();
                    d.partition_index = p.partition_index;
                    d.low_watermark = -1;
                    d.error_code = TOPIC_DENIED;
                    d
                })
                .collect();
            r
        })
        .collect();
    Checked::Pass(
        RequestKind::DeleteRecords(req),
        merge!(DeleteRecords, |resp| resp.topics.extend(results)),
    )
}

pub(super) fn offset_for_leader_epoch(
    access: &Access,
    mut req: OffsetForLeaderEpochRequest,
) -> Checked {
    let denied = take_denied(&mut req.topics, |t| {
        access.topic(Operation::Describe, &t.topic.0)
    });
    if denied.is_empty() {
        return Checked::Pass(RequestKind::OffsetForLeaderEpoch(req), None);
    }
    let results: Vec<_> = denied
        .into_iter()
        .map(|t| {
            let mut r = OffsetForLeaderTopicResult::default();
            r.topic = t.topic;
            r.partitions = t
                .partitions
                .iter()
                .map(|p| {
                    let mut d = EpochEndOffset::default();
                    d.partition = p.partition;
                    d.error_code = TOPIC_DENIED;
                    d.leader_epoch = -1;
                    d.end_offset = -1;
                    d
                })
                .collect();
            r
        })
        .collect();
    Checked::Pass(
        RequestKind::OffsetForLeaderEpoch(req),
        merge!(OffsetForLeaderEpoch, |resp| resp.topics.extend(results)),
    )
}

pub(super) fn describe_producers(access: &Access, mut req: DescribeProducersRequest) -> Checked {
    let denied = take_denied(&mut req.topics, |t| {
        access.topic(Operation::Read, &t.name.0)
    });
    if denied.is_empty() {
        return Checked::Pass(RequestKind::DescribeProducers(req), None);
    }
    let results: Vec<_> = denied
        .into_iter()
        .map(|t| {
            let mut r = TopicResponse::default();
            r.name = t.name;
            r.partitions = t
                .partition_indexes
                .iter()
                .map(|&index| {
                    let mut d = PartitionResponse::default();
                    d.partition_index = index;
                    d.error_code = TOPIC_DENIED;
                    d
                })
                .collect();
            r
        })
        .collect();
    Checked::Pass(
        RequestKind::DescribeProducers(req),
        merge!(DescribeProducers, |resp| resp.topics.extend(results)),
    )
}

pub(super) fn create_topics(access: &Access, mut req: CreateTopicsRequest) -> Checked {
    let by_cluster = access.allows_cluster(Operation::Create);
    let denied = take_denied(&mut req.topics, |t| {
        by_cluster || access.topic(Operation::Create, &t.name.0)
    });
    let results: Vec<_> = denied
        .into_iter()
        .map(|t| {
            let mut r = CreatableTopicResult::default();
            r.name = t.name;
            r.error_code = TOPIC_DENIED;
            r.error_message = Some(StrBytes::from_static_str("Authorization failed."));
            r.topic_config_error_code = TOPIC_DENIED;
            r.num_partitions = -1;
            r.replication_factor = -1;
            r
        })
        .collect();
    let access = access.clone();
    Checked::Pass(
        RequestKind::CreateTopics(req),
        merge!(CreateTopics, |resp| {
            // The created topic's configs are shown only with
            // DescribeConfigs on it.
            for t in resp.topics.iter_mut() {
                if t.error_code == 0 && !access.topic(Operation::DescribeConfigs, &t.name.0) {
                    t.topic_config_error_code = TOPIC_DENIED;
                    t.configs = None;
                }
            }
            resp.topics.extend(results);
        }),
    )
}

pub(super) fn delete_topics(access: &Access, mut req: DeleteTopicsRequest) -> Checked {
    let mut results = Vec::new();
    for name in take_denied(&mut req.topic_names, |n| {
        access.topic(Operation::Delete, &n.0)
    }) {
        let mut r = DeletableTopicResult::default();
        r.name = Some(name);
        r.error_code = TOPIC_DENIED;
        results.push(r);
    }
    for t in take_denied(&mut req.topics, |t| {
        let name = match &t.name {
            Some(n) => Some(n.0.to_string()),
            None => access.topic_name("", t.topic_id),
        };
        name.is_none_or(|n| access.topic(Operation::Delete, &n))
    }) {
        // By id, without Describe on it: the name stays unsaid.
        let by_id_hidden = t.name.is_none()
            && access
                .topic_name("", t.topic_id)
                .is_some_and(|n| !access.topic(Operation::Describe, &n));
        let mut r = DeletableTopicResult::default();
        r.name = if by_id_hidden {
            None
        } else {
            t.name.or_else(|| {
                access
                    .topic_name("", t.topic_id)
                    .map(|n| StrBytes::from_string(n).into())
            })
        };
        r.topic_id = t.topic_id;
        r.error_code = TOPIC_DENIED;
        results.push(r);
    }
    if results.is_empty() {
        return Checked::Pass(RequestKind::DeleteTopics(req), None);
    }
    Checked::Pass(
        RequestKind::DeleteTopics(req),
        merge!(DeleteTopics, |resp| resp.responses.extend(results)),
    )
}

pub(super) fn create_partitions(access: &Access, mut req: CreatePartitionsRequest) -> Checked {
    let denied = take_denied(&mut req.topics, |t| {
        access.topic(Operation::Alter, &t.name.0)
    });
    if denied.is_empty() {
        return Checked::Pass(RequestKind::CreatePartitions(req), None);
    }
    let results: Vec<_> = denied
        .into_iter()
        .map(|t| {
            let mut r = create_partitions_response::CreatePartitionsTopicResult::default();
            r.name = t.name;
            r.error_code = TOPIC_DENIED;
            r.error_message = Some(StrBytes::from_static_str(
                "The topic authorization is failed.",
            ));
            r
        })
        .collect();
    Checked::Pass(
        RequestKind::CreatePartitions(req),
        merge!(CreatePartitions, |resp| resp.results.extend(results)),
    )
}

/// The error code when `op` on the config resource is denied (None:
/// allowed; other resource types are the handler's to answer).
fn config_access(access: &Access, op: Operation, resource_type: i8, name: &str) -> Option<i16> {
    match resource_type {
        CONFIG_TOPIC if !access.topic(op, name) => Some(TOPIC_DENIED),
        CONFIG_BROKER | CONFIG_BROKER_LOGGER if !access.allows_cluster(op) => Some(CLUSTER_DENIED),
        _ => None,
    }
}

pub(super) fn describe_configs(access: &Access, mut req: DescribeConfigsRequest) -> Checked {
    let results: Vec<_> = take_denied_with(&mut req.resources, |r| {
        config_access(
            access,
            Operation::DescribeConfigs,
            r.resource_type,
            &r.resource_name,
        )
    })
    .into_iter()
    .map(|(r, code)| {
        let mut out = DescribeConfigsResult::default();
        out.error_code = code;
        out.resource_type = r.resource_type;
        out.resource_name = r.resource_name;
        out
    })
    .collect();
    if results.is_empty() {
        return Checked::Pass(RequestKind::DescribeConfigs(req), None);
    }
    Checked::Pass(
        RequestKind::DescribeConfigs(req),
        merge!(DescribeConfigs, |resp| resp.results.extend(results)),
    )
}

pub(super) fn alter_configs(access: &Access, mut req: AlterConfigsRequest) -> Checked {
    let results: Vec<_> = take_denied_with(&mut req.resources, |r| {
        config_access(
            access,
            Operation::AlterConfigs,
            r.resource_type,
            &r.resource_name,
        )
    })
    .into_iter()
    .map(|(r, code)| {
        let mut out = alter_configs_response::AlterConfigsResourceResponse::default();
        out.error_code = code;
        out.resource_type = r.resource_type;
        out.resource_name = r.resource_name;
        out
    })
    .collect();
    if results.is_empty() {
        return Checked::Pass(RequestKind::AlterConfigs(req), None);
    }
    Checked::Pass(
        RequestKind::AlterConfigs(req),
        merge!(AlterConfigs, |resp| resp.responses.extend(results)),
    )
}

pub(super) fn incremental_alter_configs(
    access: &Access,
    mut req: IncrementalAlterConfigsRequest,
) -> Checked {
    let results: Vec<_> = take_denied_with(&mut req.resources, |r| {
        config_access(
            access,
            Operation::AlterConfigs,
            r.resource_type,
            &r.resource_name,
        )
    })
    .into_iter()
    .map(|(r, code)| {
        let mut out = incremental_alter_configs_response::AlterConfigsResourceResponse::default();
        out.error_code = code;
        out.resource_type = r.resource_type;
        out.resource_name = r.resource_name;
        out
    })
    .collect();
    if results.is_empty() {
        return Checked::Pass(RequestKind::IncrementalAlterConfigs(req), None);
    }
    Checked::Pass(
        RequestKind::IncrementalAlterConfigs(req),
        merge!(IncrementalAlterConfigs, |resp| resp
            .responses
            .extend(results)),
    )
}
