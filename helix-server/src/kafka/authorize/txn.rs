//! The transaction and cluster APIs' checks, as `KafkaApis` makes them:
//! InitProducerId needs Write on its transactional id, or without one
//! IdempotentWrite on the cluster or Write on some topic (else
//! CLUSTER_AUTHORIZATION_FAILED); AddPartitionsToTxn v0-v3, AddOffsetsToTxn,
//! EndTxn and TxnOffsetCommit need Write on the transactional id, plus
//! Write on each added topic, Read on the group, Read on each committed
//! topic; DescribeTransactions and ListTransactions show only ids the
//! principal may Describe; DescribeCluster needs Describe, and
//! WriteTxnMarkers and AddPartitionsToTxn v4+ (a broker's) ClusterAction
//! on the cluster.

use kafka_protocol::messages::add_partitions_to_txn_response::{
    AddPartitionsToTxnPartitionResult, AddPartitionsToTxnTopicResult,
};
use kafka_protocol::messages::describe_transactions_response::TransactionState;
use kafka_protocol::messages::txn_offset_commit_response::{
    TxnOffsetCommitResponsePartition, TxnOffsetCommitResponseTopic,
};
use kafka_protocol::messages::write_txn_markers_response::{
    WritableTxnMarkerPartitionResult, WritableTxnMarkerResult, WritableTxnMarkerTopicResult,
};
use kafka_protocol::messages::{
    AddOffsetsToTxnRequest, AddOffsetsToTxnResponse, AddPartitionsToTxnRequest,
    AddPartitionsToTxnResponse, DescribeClusterRequest, DescribeClusterResponse,
    DescribeTransactionsRequest, EndTxnRequest, EndTxnResponse, InitProducerIdRequest,
    InitProducerIdResponse, ListTransactionsRequest, ProducerId, RequestKind, ResponseKind,
    TopicName, TxnOffsetCommitRequest, TxnOffsetCommitResponse, WriteTxnMarkersRequest,
    WriteTxnMarkersResponse,
};

use super::{
    Access, CLUSTER_DENIED, Checked, GROUP_DENIED, TOPIC_DENIED, TXN_ID_DENIED, merge, take_denied,
};
use crate::acl::{Operation, ResourceType};

/// OPERATION_NOT_ATTEMPTED: the other partitions of a refused request.
const NOT_ATTEMPTED: i16 = 55;

pub(super) fn init_producer_id(access: &Access, req: InitProducerIdRequest) -> Checked {
    let code = match req.transactional_id.as_ref().filter(|id| !id.0.is_empty()) {
        Some(id) if !access.transactional_id(Operation::Write, &id.0) => TXN_ID_DENIED,
        Some(_) => return Checked::Pass(RequestKind::InitProducerId(req), None),
        None if access.allows_cluster(Operation::IdempotentWrite)
            || access.allows_any(Operation::Write, ResourceType::Topic) =>
        {
            return Checked::Pass(RequestKind::InitProducerId(req), None);
        }
        None => CLUSTER_DENIED,
    };
    let mut resp = InitProducerIdResponse::default();
    resp.error_code = code;
    resp.producer_id = ProducerId(-1);
    resp.producer_epoch = -1;
    Checked::Refused(ResponseKind::InitProducerId(resp))
}

/// v0-v3 (the clients' versions): Write on the transactional id and on
/// each added topic. v4+ (the brokers' batches): ClusterAction on the
/// cluster only, else the top-level CLUSTER_AUTHORIZATION_FAILED.
pub(super) fn add_partitions_to_txn(
    access: &Access,
    version: i16,
    req: AddPartitionsToTxnRequest,
) -> Checked {
    if version >= 4 {
        // Broker-to-broker batches (`txn::add_partitions`).
        if access.allows_cluster(Operation::ClusterAction) {
            return Checked::Pass(RequestKind::AddPartitionsToTxn(req), None);
        }
        let mut resp = AddPartitionsToTxnResponse::default();
        resp.error_code = CLUSTER_DENIED;
        return Checked::Refused(ResponseKind::AddPartitionsToTxn(resp));
    }
    let txn_allowed =
        access.transactional_id(Operation::Write, &req.v3_and_below_transactional_id.0);
    let denied_topics: Vec<TopicName> = if txn_allowed {
        req.v3_and_below_topics
            .iter()
            .filter(|t| !access.topic(Operation::Write, &t.name.0))
            .map(|t| t.name.clone())
            .collect()
    } else {
        Vec::new()
    };
    if txn_allowed && denied_topics.is_empty() {
        return Checked::Pass(RequestKind::AddPartitionsToTxn(req), None);
    }
    let code_of = |name: &TopicName| match () {
        () if !txn_allowed => TXN_ID_DENIED,
        () if denied_topics.contains(name) => TOPIC_DENIED,
        () => NOT_ATTEMPTED,
    };
    let mut resp = AddPartitionsToTxnResponse::default();
    resp.results_by_topic_v3_and_below = req
        .v3_and_below_topics
        .iter()
        .map(|t| {
            let mut out = AddPartitionsToTxnTopicResult::default();
            out.name = t.name.clone();
            out.results_by_partition = t
                .partitions
                .iter()
                .map(|&index| {
                    let mut p = AddPartitionsToTxnPartitionResult::default();
                    p.partition_index = index;
                    p.partition_error_code = code_of(&t.name);
                    p
                })
                .collect();
            out
        })
        .collect();
    Checked::Refused(ResponseKind::AddPartitionsToTxn(resp))
}

pub(super) fn add_offsets_to_txn(access: &Access, req: AddOffsetsToTxnRequest) -> Checked {
    let code = if !access.transactional_id(Operation::Write, &req.transactional_id.0) {
        TXN_ID_DENIED
    } else if !access.group(Operation::Read, &req.group_id.0) {
        GROUP_DENIED
    } else {
        return Checked::Pass(RequestKind::AddOffsetsToTxn(req), None);
    };
    let mut resp = AddOffsetsToTxnResponse::default();
    resp.error_code = code;
    Checked::Refused(ResponseKind::AddOffsetsToTxn(resp))
}

pub(super) fn end_txn(access: &Access, req: EndTxnRequest) -> Checked {
    if access.transactional_id(Operation::Write, &req.transactional_id.0) {
        return Checked::Pass(RequestKind::EndTxn(req), None);
    }
    let mut resp = EndTxnResponse::default();
    resp.error_code = TXN_ID_DENIED;
    resp.producer_id = ProducerId(-1);
    resp.producer_epoch = -1;
    Checked::Refused(ResponseKind::EndTxn(resp))
}

fn txn_commit_result(
    name: TopicName,
    partitions: impl Iterator<Item = i32>,
    code: i16,
) -> TxnOffsetCommitResponseTopic {
    let mut t = TxnOffsetCommitResponseTopic::default();
    t.name = name;
    t.partitions = partitions
        .map(|index| {
            let mut p = TxnOffsetCommitResponsePartition::default();
            p.partition_index = index;
            p.error_code = code;
            p
        })
        .collect();
    t
}

pub(super) fn txn_offset_commit(access: &Access, mut req: TxnOffsetCommitRequest) -> Checked {
    let whole = if !access.transactional_id(Operation::Write, &req.transactional_id.0) {
        Some(TXN_ID_DENIED)
    } else if !access.group(Operation::Read, &req.group_id.0) {
        Some(GROUP_DENIED)
    } else {
        None
    };
    if let Some(code) = whole {
        let mut resp = TxnOffsetCommitResponse::default();
        resp.topics = req
            .topics
            .into_iter()
            .map(|t| {
                let indexes = t.partitions.iter().map(|p| p.partition_index);
                txn_commit_result(t.name, indexes, code)
            })
            .collect();
        return Checked::Refused(ResponseKind::TxnOffsetCommit(resp));
    }
    let denied = take_denied(&mut req.topics, |t| {
        access.topic(Operation::Read, &t.name.0)
    });
    if denied.is_empty() {
        return Checked::Pass(RequestKind::TxnOffsetCommit(req), None);
    }
    let results: Vec<_> = denied
        .into_iter()
        .map(|t| {
            let indexes = t.partitions.iter().map(|p| p.partition_index);
            txn_commit_result(t.name, indexes, TOPIC_DENIED)
        })
        .collect();
    Checked::Pass(
        RequestKind::TxnOffsetCommit(req),
        merge!(TxnOffsetCommit, |resp| resp.topics.extend(results)),
    )
}

pub(super) fn describe_transactions(
    access: &Access,
    mut req: DescribeTransactionsRequest,
) -> Checked {
    let denied: Vec<_> = take_denied(&mut req.transactional_ids, |id| {
        access.transactional_id(Operation::Describe, &id.0)
    })
    .into_iter()
    .map(|id| {
        let mut s = TransactionState::default();
        s.transactional_id = id;
        s.error_code = TXN_ID_DENIED;
        s
    })
    .collect();
    let access = access.clone();
    Checked::Pass(
        RequestKind::DescribeTransactions(req),
        merge!(DescribeTransactions, |resp| {
            // Only the partitions of topics the principal may Describe.
            for s in resp.transaction_states.iter_mut() {
                s.topics
                    .retain(|t| access.topic(Operation::Describe, &t.topic.0));
            }
            resp.transaction_states.extend(denied);
        }),
    )
}

pub(super) fn list_transactions(access: &Access, req: ListTransactionsRequest) -> Checked {
    let access = access.clone();
    Checked::Pass(
        RequestKind::ListTransactions(req),
        merge!(ListTransactions, |resp| resp.transaction_states.retain(
            |s| { access.transactional_id(Operation::Describe, &s.transactional_id.0) }
        )),
    )
}

pub(super) fn describe_cluster(access: &Access, req: DescribeClusterRequest) -> Checked {
    if access.allows_cluster(Operation::Describe) {
        return Checked::Pass(RequestKind::DescribeCluster(req), None);
    }
    let mut resp = DescribeClusterResponse::default();
    resp.error_code = CLUSTER_DENIED;
    Checked::Refused(ResponseKind::DescribeCluster(resp))
}

pub(super) fn write_txn_markers(access: &Access, req: WriteTxnMarkersRequest) -> Checked {
    if access.allows_cluster(Operation::ClusterAction) {
        return Checked::Pass(RequestKind::WriteTxnMarkers(req), None);
    }
    let mut resp = WriteTxnMarkersResponse::default();
    resp.markers = req
        .markers
        .iter()
        .map(|m| {
            let mut out = WritableTxnMarkerResult::default();
            out.producer_id = m.producer_id;
            out.topics = m
                .topics
                .iter()
                .map(|t| {
                    let mut topic = WritableTxnMarkerTopicResult::default();
                    topic.name = t.name.clone();
                    topic.partitions = t
                        .partition_indexes
                        .iter()
                        .map(|&index| {
                            let mut p = WritableTxnMarkerPartitionResult::default();
                            p.partition_index = index;
                            p.error_code = CLUSTER_DENIED;
                            p
                        })
                        .collect();
                    topic
                })
                .collect();
            out
        })
        .collect();
    Checked::Refused(ResponseKind::WriteTxnMarkers(resp))
}
