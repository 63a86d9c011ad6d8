//! Between the broker's Kafka dispatch and the transaction service:
//! Kafka's requests into the coordinator's own ([`super::request`]) and its
//! answers back per version (error codes through [`TxnError::code_at`]),
//! FindCoordinator for transactional ids, and the ranges ApiVersions adds.
//!
//! Served: FindCoordinator key type 1, InitProducerId with a transactional
//! id, AddPartitionsToTxn v0-v5 (`txn::add_partitions`: v0-v3 the clients',
//! v4-v5 the brokers' batched and verify-only form), AddOffsetsToTxn v0-v4
//! and EndTxn v0-v4. TxnOffsetCommit is the group coordinator's
//! (`group::txn_offsets`); before the group sees one, the dispatch asks
//! [`verify_txn_offsets`] whether the group's partition is in the
//! producer's transaction (Kafka 3.9's verification, KIP-890), so no
//! offsets are left pending without a transaction to end them.

use kafka_protocol::ResponseError;
use kafka_protocol::messages::{
    AddOffsetsToTxnRequest, AddOffsetsToTxnResponse, ApiKey, EndTxnRequest, EndTxnResponse,
    FindCoordinatorRequest, FindCoordinatorResponse, InitProducerIdRequest, InitProducerIdResponse,
    ProducerId,
};

use super::add_partitions::ADD_PARTITIONS_VERSIONS;
pub use super::add_partitions::add_partitions_to_txn;
use super::error::TxnError;
use super::request::EndTxn;
use super::service::TxnService;
use super::types::{NO_PRODUCER_EPOCH, NO_PRODUCER_ID, ProducerIdAndEpoch, TopicPartition};
use crate::group::service::{GROUPS_TOPIC, GroupService};
use crate::group::wire::{KEY_TYPE_TRANSACTION, find_coordinator_of};

/// AddOffsetsToTxn versions served (v3 is flexible; v4 adds only
/// TRANSACTION_ABORTABLE, which it never answers here).
pub const ADD_OFFSETS_VERSIONS: (i16, i16) = (0, 4);
/// EndTxn versions served (v4 adds only TRANSACTION_ABORTABLE, which EndTxn
/// never answers here).
pub const END_TXN_VERSIONS: (i16, i16) = (0, 4);

/// Every (api, min, max) the transaction service adds to ApiVersions.
pub fn advertised() -> impl Iterator<Item = (ApiKey, i16, i16)> {
    [
        (
            ApiKey::AddPartitionsToTxn,
            ADD_PARTITIONS_VERSIONS.0,
            ADD_PARTITIONS_VERSIONS.1,
        ),
        (
            ApiKey::AddOffsetsToTxn,
            ADD_OFFSETS_VERSIONS.0,
            ADD_OFFSETS_VERSIONS.1,
        ),
        (ApiKey::EndTxn, END_TXN_VERSIONS.0, END_TXN_VERSIONS.1),
    ]
    .into_iter()
    .chain(super::tooling::advertised())
}

/// The advertised range of `key`, if the transaction service serves it.
pub fn range(key: ApiKey) -> Option<(i16, i16)> {
    advertised()
        .find(|(k, _, _)| *k == key)
        .map(|(_, min, max)| (min, max))
}

/// FindCoordinator with key type 1: the leader of each transactional id's
/// `__transaction_state` partition.
pub fn find_coordinator(
    service: &TxnService,
    request: &FindCoordinatorRequest,
    version: i16,
) -> FindCoordinatorResponse {
    find_coordinator_of(
        request,
        version,
        KEY_TYPE_TRANSACTION,
        ResponseError::InvalidRequest.code(),
        |key| service.coordinator_of(key),
    )
}

/// InitProducerId with a transactional id (the caller checked there is
/// one).
pub async fn init_producer_id(
    service: &TxnService,
    req: InitProducerIdRequest,
    version: i16,
) -> InitProducerIdResponse {
    let mut resp = InitProducerIdResponse::default();
    resp.producer_id = ProducerId(NO_PRODUCER_ID);
    resp.producer_epoch = NO_PRODUCER_EPOCH;
    let transactional_id = req
        .transactional_id
        .as_ref()
        .map(|id| id.0.to_string())
        .unwrap_or_default();
    // KIP-360 (v3+): both or neither of the producer id and epoch.
    let given = (req.producer_id.0, req.producer_epoch);
    let expected = match given {
        (NO_PRODUCER_ID, NO_PRODUCER_EPOCH) => None,
        (id, epoch) if id != NO_PRODUCER_ID && epoch != NO_PRODUCER_EPOCH => {
            Some(ProducerIdAndEpoch {
                producer_id: id,
                epoch,
            })
        }
        _ => {
            resp.error_code = TxnError::InvalidRequest.code();
            return resp;
        }
    };
    match service
        .init_producer_id(transactional_id, req.transaction_timeout_ms, expected)
        .await
    {
        Ok(id) => {
            resp.producer_id = ProducerId(id.producer_id);
            resp.producer_epoch = id.epoch;
        }
        Err(e) => resp.error_code = e.code_at(ApiKey::InitProducerId, version),
    }
    resp
}

/// AddOffsetsToTxn: the group's `__consumer_offsets` partition joins the
/// transaction, answered once durable.
pub async fn add_offsets_to_txn(
    service: &TxnService,
    req: AddOffsetsToTxnRequest,
    version: i16,
) -> AddOffsetsToTxnResponse {
    let mut resp = AddOffsetsToTxnResponse::default();
    let added = service
        .add_offsets(
            req.transactional_id.0.to_string(),
            req.producer_id.0,
            req.producer_epoch,
            req.group_id.0.to_string(),
        )
        .await;
    if let Err(e) = added {
        resp.error_code = e.code_at(ApiKey::AddOffsetsToTxn, version);
    }
    resp
}

/// Whether a TxnOffsetCommit of this producer may be appended to the
/// group's `__consumer_offsets` partition: the partition must be in the
/// producer's ongoing transaction (AddOffsetsToTxn). Otherwise the code
/// every partition of the request is answered with (Kafka 3.9's
/// verification answers through `maybeConvertOffsetCommitError`).
pub async fn verify_txn_offsets(
    service: &TxnService,
    groups: &GroupService,
    transactional_id: &str,
    producer_id: i64,
    epoch: i16,
    group_id: &str,
    version: i16,
) -> Result<(), i16> {
    let partition = groups.offsets_partition_of(group_id);
    let tp = TopicPartition::new(GROUPS_TOPIC, partition);
    service
        .verify(transactional_id, producer_id, epoch, tp)
        .await
        .map_err(|e| txn_offsets_error(e, version))
}

/// TxnOffsetCommit's code for a failed verification: not in the
/// transaction, INVALID_TXN_STATE (v4: TRANSACTION_ABORTABLE); an old
/// epoch, INVALID_PRODUCER_EPOCH; the coordinator loading, moving or
/// elsewhere, COORDINATOR_NOT_AVAILABLE (the client finds the coordinator
/// again and retries).
fn txn_offsets_error(error: TxnError, version: i16) -> i16 {
    match error {
        TxnError::TransactionAbortable if version >= 4 => {
            ResponseError::TransactionAbortable.code()
        }
        TxnError::NotCoordinator | TxnError::LoadInProgress | TxnError::ConcurrentTransactions => {
            ResponseError::CoordinatorNotAvailable.code()
        }
        other => other.produce_code(),
    }
}

/// EndTxn: answered once the transaction's Prepare state is durable.
pub async fn end_txn(service: &TxnService, req: EndTxnRequest, version: i16) -> EndTxnResponse {
    let request = EndTxn {
        transactional_id: req.transactional_id.0.to_string(),
        producer_id: req.producer_id.0,
        epoch: req.producer_epoch,
        commit: req.committed,
    };
    let mut resp = EndTxnResponse::default();
    if let Err(e) = service.end_txn(request).await {
        resp.error_code = e.code_at(ApiKey::EndTxn, version);
    }
    resp
}

/// Whether a transactional batch of `producer_id` and `epoch` may be
/// appended to `topic`'s `partition`: the transactional id's coordinator
/// (on this node or another) must hold the partition in the producer's
/// ongoing transaction at that epoch. Otherwise the Produce error code for
/// it ([`TxnError::produce_code`]).
pub async fn verify_produce(
    service: &TxnService,
    transactional_id: &str,
    producer_id: i64,
    epoch: i16,
    topic: &str,
    partition: i32,
) -> Result<(), i16> {
    service
        .verify(
            transactional_id,
            producer_id,
            epoch,
            TopicPartition::new(topic, partition),
        )
        .await
        .map_err(TxnError::produce_code)
}

#[cfg(test)]
mod tests {
    use kafka_protocol::protocol::StrBytes;

    use super::*;

    #[test]
    fn txn_offset_commit_verification_answers_as_kafka() {
        assert_eq!(txn_offsets_error(TxnError::TransactionAbortable, 3), 48);
        assert_eq!(txn_offsets_error(TxnError::TransactionAbortable, 4), 120);
        assert_eq!(txn_offsets_error(TxnError::ProducerFenced, 3), 47);
        assert_eq!(txn_offsets_error(TxnError::NotCoordinator, 0), 15);
        assert_eq!(txn_offsets_error(TxnError::LoadInProgress, 4), 15);
    }

    #[test]
    fn add_offsets_to_txn_is_advertised_v0_to_v4() {
        assert_eq!(range(ApiKey::AddOffsetsToTxn), Some((0, 4)));
    }

    #[test]
    fn find_coordinator_answers_transactional_ids_at_every_version() {
        let node = crate::group::wire::NodeAddress {
            node_id: 3,
            host: "h".into(),
            port: 9092,
        };
        for version in 1..=4 {
            let mut request = FindCoordinatorRequest::default().with_key_type(1);
            if version >= 4 {
                request.coordinator_keys = vec![
                    StrBytes::from_static_str("t1"),
                    StrBytes::from_static_str(""),
                ];
            } else {
                request.key = StrBytes::from_static_str("t1");
            }
            let response = find_coordinator_of(&request, version, 1, 42, |_| Some(node.clone()));
            if version >= 4 {
                assert_eq!(response.coordinators[0].node_id.0, 3);
                assert_eq!(response.coordinators[1].error_code, 42);
            } else {
                assert_eq!((response.error_code, response.node_id.0), (0, 3));
            }
        }
        // A group key type is not the transaction service's.
        let group = FindCoordinatorRequest::default().with_key(StrBytes::from_static_str("g"));
        assert_eq!(
            find_coordinator_of(&group, 3, 1, 42, |_| Some(node.clone())).error_code,
            15
        );
    }
}
