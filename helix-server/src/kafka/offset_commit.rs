//! OffsetCommit's and TxnOffsetCommit's check of the topics, before the
//! group coordinator sees the request: a partition of a topic this node
//! does not know (or past its partition count) is answered
//! UNKNOWN_TOPIC_OR_PARTITION, as Kafka's `KafkaApis` does from its
//! metadata cache; the rest goes to the coordinator, and the two answers
//! are joined.

use kafka_protocol::ResponseError;
use kafka_protocol::messages::offset_commit_response::{
    OffsetCommitResponsePartition, OffsetCommitResponseTopic,
};
use kafka_protocol::messages::txn_offset_commit_response::{
    TxnOffsetCommitResponsePartition, TxnOffsetCommitResponseTopic,
};
use kafka_protocol::messages::{OffsetCommitRequest, TxnOffsetCommitRequest};

use crate::error::code;
use crate::topics::TopicTable;

/// Takes the unknown partitions out of `request` and returns their answers.
pub fn take_unknown(
    topics: &TopicTable,
    request: &mut OffsetCommitRequest,
) -> Vec<OffsetCommitResponseTopic> {
    let unknown = code(ResponseError::UnknownTopicOrPartition);
    let mut answers = Vec::new();
    for topic in &mut request.topics {
        let count = topics.get(&topic.name.0).map_or(0, |t| t.partitions.len());
        let (known, missing): (Vec<_>, Vec<_>) = std::mem::take(&mut topic.partitions)
            .into_iter()
            .partition(|p| usize::try_from(p.partition_index).is_ok_and(|i| i < count));
        topic.partitions = known;
        if !missing.is_empty() {
            let partitions = missing
                .iter()
                .map(|p| {
                    OffsetCommitResponsePartition::default()
                        .with_partition_index(p.partition_index)
                        .with_error_code(unknown)
                })
                .collect();
            answers.push(
                OffsetCommitResponseTopic::default()
                    .with_name(topic.name.clone())
                    .with_partitions(partitions),
            );
        }
    }
    request.topics.retain(|t| !t.partitions.is_empty());
    answers
}

/// [`take_unknown`] for TxnOffsetCommit.
pub fn take_unknown_txn(
    topics: &TopicTable,
    request: &mut TxnOffsetCommitRequest,
) -> Vec<TxnOffsetCommitResponseTopic> {
    let unknown = code(ResponseError::UnknownTopicOrPartition);
    let mut answers = Vec::new();
    for topic in &mut request.topics {
        let count = topics.get(&topic.name.0).map_or(0, |t| t.partitions.len());
        let (known, missing): (Vec<_>, Vec<_>) = std::mem::take(&mut topic.partitions)
            .into_iter()
            .partition(|p| usize::try_from(p.partition_index).is_ok_and(|i| i < count));
        topic.partitions = known;
        if !missing.is_empty() {
            let partitions = missing
                .iter()
                .map(|p| {
                    TxnOffsetCommitResponsePartition::default()
                        .with_partition_index(p.partition_index)
                        .with_error_code(unknown)
                })
                .collect();
            answers.push(
                TxnOffsetCommitResponseTopic::default()
                    .with_name(topic.name.clone())
                    .with_partitions(partitions),
            );
        }
    }
    request.topics.retain(|t| !t.partitions.is_empty());
    answers
}

/// Every partition of `request` answered `error_code` (a TxnOffsetCommit
/// refused before the group coordinator sees it).
pub fn txn_all_failed(
    request: &TxnOffsetCommitRequest,
    error_code: i16,
) -> Vec<TxnOffsetCommitResponseTopic> {
    request
        .topics
        .iter()
        .map(|t| {
            TxnOffsetCommitResponseTopic::default()
                .with_name(t.name.clone())
                .with_partitions(
                    t.partitions
                        .iter()
                        .map(|p| {
                            TxnOffsetCommitResponsePartition::default()
                                .with_partition_index(p.partition_index)
                                .with_error_code(error_code)
                        })
                        .collect(),
                )
        })
        .collect()
}
