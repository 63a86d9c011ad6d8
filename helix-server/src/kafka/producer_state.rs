//! DescribeProducers (API 61) and WriteTxnMarkers (API 27): the data
//! partition's side of transaction tooling. `kafka-transactions.sh
//! describe-producers` and `find-hanging` read a partition's producers
//! (open transactions and their first offsets); `abort` takes a producer's
//! id and epochs from that answer and writes an abort marker with
//! WriteTxnMarkers, as a coordinator would, so a transaction the
//! coordinator lost track of stops holding the last stable offset back.
//!
//! Both act on this node's replicas only: the admin client sends each
//! partition's request to its leader.

use std::sync::Arc;

use kafka_protocol::messages::describe_producers_response::{
    PartitionResponse, ProducerState, TopicResponse,
};
use kafka_protocol::messages::write_txn_markers_response::{
    WritableTxnMarkerPartitionResult, WritableTxnMarkerResult, WritableTxnMarkerTopicResult,
};
use kafka_protocol::messages::{
    DescribeProducersRequest, DescribeProducersResponse, ProducerId, TopicName,
    WriteTxnMarkersRequest, WriteTxnMarkersResponse,
};

use crate::error::{HelixError, NONE};
use crate::group::service::GROUPS_TOPIC;
use crate::replica::Partition;
use crate::replica::markers::Marker;
use crate::replica::producers::ActiveProducer;
use crate::topics::TopicTable;

/// DescribeProducers versions served (Kafka 3.9 has only v0).
pub const DESCRIBE_PRODUCERS_VERSIONS: (i16, i16) = (0, 0);
/// WriteTxnMarkers versions served: v1 only (v0 is v1 without flexible
/// fields; the codec, like Kafka 4 after KIP-896, decodes v1 only, and
/// Kafka 3.9's admin client and brokers send v1).
pub const WRITE_TXN_MARKERS_VERSIONS: (i16, i16) = (1, 1);

/// DescribeProducers: each partition's producers from this node's replica
/// of it, leader or follower (Kafka answers from any local log).
/// UNKNOWN_TOPIC_OR_PARTITION for a topic or partition that does not
/// exist, NOT_LEADER_OR_FOLLOWER when no replica of it is here.
pub async fn describe_producers(
    topics: &TopicTable,
    req: DescribeProducersRequest,
) -> DescribeProducersResponse {
    let mut resp = DescribeProducersResponse::default();
    for t in req.topics {
        let topic = topics.get(&t.name.0);
        let mut out = TopicResponse::default().with_name(t.name.clone());
        for index in t.partition_indexes {
            let replica = topic
                .as_ref()
                .ok_or(HelixError::UnknownTopicOrPartition)
                .and_then(|topic| topic.local(index).cloned());
            let producers = match replica {
                Ok(p) => p.describe_producers().await,
                Err(e) => Err(e),
            };
            let mut answer = PartitionResponse::default().with_partition_index(index);
            match producers {
                Ok(list) => answer.active_producers = list.iter().map(producer_state).collect(),
                Err(e) => answer.error_code = e.kafka_code(),
            }
            out.partitions.push(answer);
        }
        resp.topics.push(out);
    }
    resp
}

fn producer_state(p: &ActiveProducer) -> ProducerState {
    ProducerState::default()
        .with_producer_id(ProducerId(p.producer_id))
        .with_producer_epoch(i32::from(p.epoch))
        .with_last_sequence(p.last_sequence)
        .with_last_timestamp(p.last_timestamp)
        .with_coordinator_epoch(p.coordinator_epoch)
        .with_current_txn_start_offset(p.txn_start_offset.unwrap_or(-1))
}

/// The local leader replica a WriteTxnMarkers marker for `topic`'s
/// `partition` is written to: the one place the handler resolves
/// partitions. No such partition, or no replica of it here, is
/// UNKNOWN_TOPIC_OR_PARTITION (Kafka's `getMagic` finding no local log); a
/// local follower answers NOT_LEADER_OR_FOLLOWER when written to.
///
/// A marker on a `__consumer_offsets` partition is written as on any
/// partition, as Kafka does: the group coordinator reads it back from the
/// log and commits or drops the producer's pending transactional offsets,
/// as for the transaction coordinator's own markers (ADR 0026, "Offsets
/// in transactions"). `__transaction_state` holds coordinator records
/// only: a marker there would corrupt them, so it is refused
/// (INVALID_REQUEST).
pub fn marker_replica(
    topics: &TopicTable,
    topic: &str,
    partition: i32,
) -> Result<Arc<Partition>, HelixError> {
    let found = topics
        .get(topic)
        .ok_or(HelixError::UnknownTopicOrPartition)?;
    if found.internal && topic != GROUPS_TOPIC {
        return Err(HelixError::InvalidRequest(format!(
            "transaction markers cannot be written to {topic} by WriteTxnMarkers"
        )));
    }
    match found.local(partition) {
        Ok(p) => Ok(p.clone()),
        Err(HelixError::NotLeader) => Err(HelixError::UnknownTopicOrPartition),
        Err(e) => Err(e),
    }
}

/// WriteTxnMarkers: every marker to every partition it names, written
/// concurrently through each partition's Raft group; each partition gets
/// its own code (a stale producer epoch is INVALID_PRODUCER_EPOCH, a stale
/// coordinator epoch TRANSACTION_COORDINATOR_FENCED). Results are grouped
/// by producer id, as Kafka's response map is.
pub async fn write_txn_markers(
    topics: &TopicTable,
    req: WriteTxnMarkersRequest,
) -> WriteTxnMarkersResponse {
    let timestamp = crate::clock::now_ms();
    let mut writes = Vec::new();
    for m in &req.markers {
        let marker = Marker {
            producer_id: m.producer_id.0,
            producer_epoch: m.producer_epoch,
            commit: m.transaction_result,
            coordinator_epoch: m.coordinator_epoch,
            timestamp,
        };
        for t in &m.topics {
            for &index in &t.partition_indexes {
                let replica = marker_replica(topics, &t.name.0, index);
                let write = tokio::spawn(async move { replica?.write_marker(marker).await });
                writes.push((marker.producer_id, t.name.clone(), index, write));
            }
        }
    }
    let mut resp = WriteTxnMarkersResponse::default();
    for (producer_id, topic, index, write) in writes {
        let code = match write.await {
            Ok(Ok(_offset)) => NONE,
            Ok(Err(e)) => e.kafka_code(),
            // The write task panicked or was cancelled at shutdown.
            Err(_) => HelixError::ShuttingDown.kafka_code(),
        };
        result_of(&mut resp, producer_id, topic).push(
            WritableTxnMarkerPartitionResult::default()
                .with_partition_index(index)
                .with_error_code(code),
        );
    }
    resp
}

/// The partition results of `topic` under `producer_id`, added if new.
fn result_of(
    resp: &mut WriteTxnMarkersResponse,
    producer_id: i64,
    topic: TopicName,
) -> &mut Vec<WritableTxnMarkerPartitionResult> {
    let at = match resp
        .markers
        .iter()
        .position(|m| m.producer_id.0 == producer_id)
    {
        Some(at) => at,
        None => {
            resp.markers
                .push(WritableTxnMarkerResult::default().with_producer_id(ProducerId(producer_id)));
            resp.markers.len() - 1
        }
    };
    let topics = &mut resp.markers[at].topics;
    let at = match topics.iter().position(|t| t.name == topic) {
        Some(at) => at,
        None => {
            topics.push(WritableTxnMarkerTopicResult::default().with_name(topic));
            topics.len() - 1
        }
    };
    &mut topics[at].partitions
}
