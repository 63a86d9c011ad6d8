//! Offsets in a transaction through dispatch on one node (ADR 0026
//! "Offsets in transactions as built"): TxnOffsetCommit is refused until
//! AddOffsetsToTxn puts the group's partition in the transaction, its
//! offsets are pending (UNSTABLE_OFFSET_COMMIT with require_stable) until
//! EndTxn's marker reaches `__consumer_offsets`, and an unknown topic's
//! partition is answered UNKNOWN_TOPIC_OR_PARTITION. Both APIs at every
//! advertised version (0-4). An admin's WriteTxnMarkers on the group's
//! `__consumer_offsets` partition (`kafka-transactions.sh abort`) ends the
//! pending offsets as the coordinator's own marker does.

use std::time::Duration;

use kafka_protocol::messages::*;
use kafka_protocol::protocol::{Decodable, StrBytes};

use super::tests::{broker, roundtrip};

const INVALID_TXN_STATE: i16 = 48;
const UNKNOWN_TOPIC_OR_PARTITION: i16 = 3;
const UNSTABLE_OFFSET_COMMIT: i16 = 88;

fn s(text: &'static str) -> StrBytes {
    StrBytes::from_static_str(text)
}

fn txn_commit(producer: ProducerId, epoch: i16, topic: &'static str) -> TxnOffsetCommitRequest {
    let partition = txn_offset_commit_request::TxnOffsetCommitRequestPartition::default()
        .with_partition_index(0)
        .with_committed_offset(5);
    TxnOffsetCommitRequest::default()
        .with_transactional_id(TransactionalId(s("tx-o")))
        .with_group_id(GroupId(s("g-o")))
        .with_producer_id(producer)
        .with_producer_epoch(epoch)
        .with_topics(vec![
            txn_offset_commit_request::TxnOffsetCommitRequestTopic::default()
                .with_name(TopicName(s(topic)))
                .with_partitions(vec![partition]),
        ])
}

fn codes(response: &TxnOffsetCommitResponse) -> Vec<i16> {
    response
        .topics
        .iter()
        .flat_map(|t| t.partitions.iter().map(|p| p.error_code))
        .collect()
}

/// (offset, error) of t-0 for group g-o, OffsetFetch v7.
async fn fetch(b: &std::sync::Arc<crate::broker::Broker>, require_stable: bool) -> (i64, i16) {
    let request = OffsetFetchRequest::default()
        .with_group_id(GroupId(s("g-o")))
        .with_require_stable(require_stable)
        .with_topics(Some(vec![
            offset_fetch_request::OffsetFetchRequestTopic::default()
                .with_name(TopicName(s("t")))
                .with_partition_indexes(vec![0]),
        ]));
    let mut out = roundtrip(b, ApiKey::OffsetFetch, 7, &request.into()).await;
    let response = OffsetFetchResponse::decode(&mut out, 7).expect("decode");
    let p = &response.topics[0].partitions[0];
    (p.committed_offset, p.error_code)
}

/// Polls OffsetFetch (require_stable) until it answers `want`.
async fn await_fetched(b: &std::sync::Arc<crate::broker::Broker>, want: (i64, i16)) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let fetched = fetch(b, true).await;
        if fetched == want {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "still {fetched:?}, waiting for {want:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// WriteTxnMarkers v1 of one marker for `producer` on the group's
/// `__consumer_offsets` partition, as `kafka-transactions.sh abort` sends
/// it (coordinator epoch 0): its code.
async fn admin_marker(
    b: &std::sync::Arc<crate::broker::Broker>,
    (producer, epoch): (ProducerId, i16),
    commit: bool,
) -> i16 {
    let partition = b.groups.offsets_partition_of("g-o");
    let request = WriteTxnMarkersRequest::default().with_markers(vec![
        write_txn_markers_request::WritableTxnMarker::default()
            .with_producer_id(producer)
            .with_producer_epoch(epoch)
            .with_transaction_result(commit)
            .with_coordinator_epoch(0)
            .with_topics(vec![
                write_txn_markers_request::WritableTxnMarkerTopic::default()
                    .with_name(TopicName(s("__consumer_offsets")))
                    .with_partition_indexes(vec![partition]),
            ]),
    ]);
    let mut out = roundtrip(b, ApiKey::WriteTxnMarkers, 1, &request.into()).await;
    let response = WriteTxnMarkersResponse::decode(&mut out, 1).expect("decode");
    response.markers[0].topics[0].partitions[0].error_code
}

/// A transaction of `tx-o` holding offset 5 of t-0 for g-o, pending.
async fn pending_offsets(b: &std::sync::Arc<crate::broker::Broker>) -> (ProducerId, i16) {
    let init = InitProducerIdRequest::default()
        .with_transactional_id(Some(TransactionalId(s("tx-o"))))
        .with_transaction_timeout_ms(60_000)
        .with_producer_id(ProducerId(-1))
        .with_producer_epoch(-1);
    let mut out = roundtrip(b, ApiKey::InitProducerId, 4, &init.into()).await;
    let init = InitProducerIdResponse::decode(&mut out, 4).expect("decode");
    assert_eq!(init.error_code, 0);
    let (producer, epoch) = (init.producer_id, init.producer_epoch);
    let add = AddOffsetsToTxnRequest::default()
        .with_transactional_id(TransactionalId(s("tx-o")))
        .with_producer_id(producer)
        .with_producer_epoch(epoch)
        .with_group_id(GroupId(s("g-o")));
    let mut out = roundtrip(b, ApiKey::AddOffsetsToTxn, 3, &add.into()).await;
    let added = AddOffsetsToTxnResponse::decode(&mut out, 3).expect("decode");
    assert_eq!(added.error_code, 0);
    let commit = txn_commit(producer, epoch, "t");
    let mut out = roundtrip(b, ApiKey::TxnOffsetCommit, 3, &commit.into()).await;
    let accepted = TxnOffsetCommitResponse::decode(&mut out, 3).expect("decode");
    assert_eq!(codes(&accepted), vec![0]);
    assert_eq!(fetch(b, true).await, (-1, UNSTABLE_OFFSET_COMMIT));
    (producer, epoch)
}

/// `kafka-transactions.sh abort` of a transaction whose open partition is
/// the group's `__consumer_offsets` partition: the abort marker is written
/// there as on any partition, and the group drops the producer's pending
/// offsets (a commit marker makes them the committed ones), as Kafka's
/// group coordinator does with the markers it reads.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_admins_marker_on_the_offsets_partition_ends_the_pending_offsets() {
    for (commit, after) in [(false, (-1, 0)), (true, (5, 0))] {
        let dir = tempfile::tempdir().expect("tempdir");
        let b = broker(dir.path()).await;
        let producer = pending_offsets(&b).await;
        assert_eq!(admin_marker(&b, producer, commit).await, 0);
        await_fetched(&b, after).await;
        b.close_all().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn transactional_offsets_are_pending_until_the_commit_marker() {
    let dir = tempfile::tempdir().expect("tempdir");
    let b = broker(dir.path()).await;
    let init = InitProducerIdRequest::default()
        .with_transactional_id(Some(TransactionalId(s("tx-o"))))
        .with_transaction_timeout_ms(60_000)
        .with_producer_id(ProducerId(-1))
        .with_producer_epoch(-1);
    let mut out = roundtrip(&b, ApiKey::InitProducerId, 4, &init.into()).await;
    let init = InitProducerIdResponse::decode(&mut out, 4).expect("decode");
    assert_eq!(init.error_code, 0);
    let (producer, epoch) = (init.producer_id, init.producer_epoch);

    // Not in a transaction yet: refused before the group sees it.
    let commit = txn_commit(producer, epoch, "t");
    let mut out = roundtrip(&b, ApiKey::TxnOffsetCommit, 3, &commit.clone().into()).await;
    let refused = TxnOffsetCommitResponse::decode(&mut out, 3).expect("decode");
    assert_eq!(codes(&refused), vec![INVALID_TXN_STATE]);

    let add = AddOffsetsToTxnRequest::default()
        .with_transactional_id(TransactionalId(s("tx-o")))
        .with_producer_id(producer)
        .with_producer_epoch(epoch)
        .with_group_id(GroupId(s("g-o")));
    // Every version; after the first the partition is in already (NONE).
    for version in 0..=4 {
        let body = add.clone().into();
        let mut out = roundtrip(&b, ApiKey::AddOffsetsToTxn, version, &body).await;
        let added = AddOffsetsToTxnResponse::decode(&mut out, version).expect("decode");
        assert_eq!(added.error_code, 0, "AddOffsetsToTxn v{version}");
    }
    // Every version; a retry is no error.
    for version in 0..=4 {
        let body = commit.clone().into();
        let mut out = roundtrip(&b, ApiKey::TxnOffsetCommit, version, &body).await;
        let accepted = TxnOffsetCommitResponse::decode(&mut out, version).expect("decode");
        assert_eq!(codes(&accepted), vec![0], "TxnOffsetCommit v{version}");
    }
    let unknown = txn_commit(producer, epoch, "no-such-topic");
    let mut out = roundtrip(&b, ApiKey::TxnOffsetCommit, 3, &unknown.into()).await;
    let unknown = TxnOffsetCommitResponse::decode(&mut out, 3).expect("decode");
    assert_eq!(codes(&unknown), vec![UNKNOWN_TOPIC_OR_PARTITION]);

    assert_eq!(fetch(&b, false).await, (-1, 0));
    assert_eq!(fetch(&b, true).await, (-1, UNSTABLE_OFFSET_COMMIT));

    let end = EndTxnRequest::default()
        .with_transactional_id(TransactionalId(s("tx-o")))
        .with_producer_id(producer)
        .with_producer_epoch(epoch)
        .with_committed(true);
    let mut out = roundtrip(&b, ApiKey::EndTxn, 3, &end.into()).await;
    assert_eq!(
        EndTxnResponse::decode(&mut out, 3)
            .expect("decode")
            .error_code,
        0
    );
    // The marker is written after EndTxn's answer; the group reads it back.
    await_fetched(&b, (5, 0)).await;
}
