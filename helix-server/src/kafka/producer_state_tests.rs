//! Transaction tooling through dispatch on one node, as
//! `kafka-transactions.sh` drives it: a transaction is opened with
//! InitProducerId, AddPartitionsToTxn and a transactional Produce; then
//! ListTransactions, DescribeTransactions and DescribeProducers show it,
//! and WriteTxnMarkers aborts it by hand (the `abort` command), refusing
//! stale epochs.

use std::sync::Arc;

use bytes::Bytes;
use kafka_protocol::messages::*;
use kafka_protocol::protocol::{Decodable, StrBytes};

use super::tests::{broker, roundtrip};
use super::wire_topic;
use crate::broker::Broker;
use crate::replica::batch::tests::{make_batch, transactional};

const TXN_ID: &str = "tools-1";

fn txn_id() -> TransactionalId {
    TransactionalId(StrBytes::from_static_str(TXN_ID))
}

pub(crate) async fn call<R: Decodable>(
    b: &Arc<Broker>,
    key: ApiKey,
    version: i16,
    body: RequestKind,
) -> R {
    let mut out = roundtrip(b, key, version, &body).await;
    R::decode(&mut out, version).expect("decode")
}

/// Opens a transaction of `TXN_ID` holding one record at offset 0 of
/// "t"-0; returns its producer id and epoch (1: initialised twice, so a
/// marker at epoch 0 is stale).
async fn open_transaction(b: &Arc<Broker>) -> (i64, i16) {
    let init = InitProducerIdRequest::default()
        .with_transactional_id(Some(txn_id()))
        .with_transaction_timeout_ms(60_000)
        .with_producer_id(ProducerId(-1))
        .with_producer_epoch(-1);
    let _: InitProducerIdResponse = call(b, ApiKey::InitProducerId, 4, init.clone().into()).await;
    let id: InitProducerIdResponse = call(b, ApiKey::InitProducerId, 4, init.into()).await;
    assert_eq!((id.error_code, id.producer_epoch), (0, 1));
    let (pid, epoch) = (id.producer_id.0, id.producer_epoch);
    let add = AddPartitionsToTxnRequest::default()
        .with_v3_and_below_transactional_id(txn_id())
        .with_v3_and_below_producer_id(ProducerId(pid))
        .with_v3_and_below_producer_epoch(epoch)
        .with_v3_and_below_topics(vec![
            add_partitions_to_txn_request::AddPartitionsToTxnTopic::default()
                .with_name(wire_topic("t"))
                .with_partitions(vec![0]),
        ]);
    let added: AddPartitionsToTxnResponse =
        call(b, ApiKey::AddPartitionsToTxn, 3, add.into()).await;
    let code = added.results_by_topic_v3_and_below[0].results_by_partition[0].partition_error_code;
    assert_eq!(code, 0);
    let batch: Bytes = transactional(&make_batch(&[b"open"], pid, 0, 1_000), epoch);
    let produce = ProduceRequest::default()
        .with_transactional_id(Some(txn_id()))
        .with_acks(-1)
        .with_timeout_ms(5_000)
        .with_topic_data(vec![
            produce_request::TopicProduceData::default()
                .with_name(wire_topic("t"))
                .with_partition_data(vec![
                    produce_request::PartitionProduceData::default()
                        .with_index(0)
                        .with_records(Some(batch)),
                ]),
        ]);
    let produced: ProduceResponse = call(b, ApiKey::Produce, 9, produce.into()).await;
    let p = &produced.responses[0].partition_responses[0];
    assert_eq!((p.error_code, p.base_offset), (0, 0));
    (pid, epoch)
}

pub(crate) fn marker(pid: i64, epoch: i16, coordinator_epoch: i32, topic: &str) -> RequestKind {
    WriteTxnMarkersRequest::default()
        .with_markers(vec![
            write_txn_markers_request::WritableTxnMarker::default()
                .with_producer_id(ProducerId(pid))
                .with_producer_epoch(epoch)
                .with_transaction_result(false)
                .with_coordinator_epoch(coordinator_epoch)
                .with_topics(vec![
                    write_txn_markers_request::WritableTxnMarkerTopic::default()
                        .with_name(wire_topic(topic))
                        .with_partition_indexes(vec![0]),
                ]),
        ])
        .into()
}

pub(crate) async fn write_marker(b: &Arc<Broker>, m: RequestKind) -> i16 {
    let resp: WriteTxnMarkersResponse = call(b, ApiKey::WriteTxnMarkers, 1, m).await;
    resp.markers[0].topics[0].partitions[0].error_code
}

pub(crate) async fn producers(
    b: &Arc<Broker>,
    topic: &str,
    partitions: Vec<i32>,
) -> Vec<(i16, Vec<describe_producers_response::ProducerState>)> {
    let req = DescribeProducersRequest::default().with_topics(vec![
        describe_producers_request::TopicRequest::default()
            .with_name(wire_topic(topic))
            .with_partition_indexes(partitions),
    ]);
    let resp: DescribeProducersResponse = call(b, ApiKey::DescribeProducers, 0, req.into()).await;
    resp.topics[0]
        .partitions
        .iter()
        .map(|p| (p.error_code, p.active_producers.clone()))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_open_transaction_is_listed_described_and_its_producer_shown() {
    let dir = tempfile::tempdir().expect("tempdir");
    let b = broker(dir.path()).await;
    let (pid, epoch) = open_transaction(&b).await;

    for version in 0..=1 {
        let list: ListTransactionsResponse = call(
            &b,
            ApiKey::ListTransactions,
            version,
            ListTransactionsRequest::default().into(),
        )
        .await;
        assert_eq!(list.error_code, 0);
        let rows: Vec<(&str, i64, &str)> = list
            .transaction_states
            .iter()
            .map(|s| {
                (
                    &*s.transactional_id.0,
                    s.producer_id.0,
                    &*s.transaction_state,
                )
            })
            .collect();
        assert_eq!(rows, [(TXN_ID, pid, "Ongoing")], "v{version}");
    }
    let filtered = ListTransactionsRequest::default().with_state_filters(vec![
        StrBytes::from_static_str("CompleteCommit"),
        StrBytes::from_static_str("Sleeping"),
    ]);
    let list: ListTransactionsResponse =
        call(&b, ApiKey::ListTransactions, 1, filtered.into()).await;
    assert!(list.transaction_states.is_empty());
    assert_eq!(
        list.unknown_state_filters,
        [StrBytes::from_static_str("Sleeping")]
    );
    // v1: only transactions running longer than an hour.
    let long = ListTransactionsRequest::default().with_duration_filter(3_600_000);
    let list: ListTransactionsResponse = call(&b, ApiKey::ListTransactions, 1, long.into()).await;
    assert!(list.transaction_states.is_empty());

    let describe = DescribeTransactionsRequest::default().with_transactional_ids(vec![
        txn_id(),
        TransactionalId(StrBytes::from_static_str("nobody")),
    ]);
    let resp: DescribeTransactionsResponse =
        call(&b, ApiKey::DescribeTransactions, 0, describe.into()).await;
    let found = &resp.transaction_states[0];
    assert_eq!(found.error_code, 0);
    assert_eq!(&*found.transaction_state, "Ongoing");
    assert_eq!((found.producer_id.0, found.producer_epoch), (pid, epoch));
    assert_eq!(found.transaction_timeout_ms, 60_000);
    assert!(found.transaction_start_time_ms > 0);
    assert_eq!(&*found.topics[0].topic.0, "t");
    assert_eq!(found.topics[0].partitions, [0]);
    assert_eq!(
        resp.transaction_states[1].error_code, 105,
        "TRANSACTIONAL_ID_NOT_FOUND"
    );

    let shown = producers(&b, "t", vec![0, 7]).await;
    assert_eq!(shown[0].0, 0);
    let p = &shown[0].1[0];
    assert_eq!((p.producer_id.0, p.producer_epoch), (pid, i32::from(epoch)));
    assert_eq!((p.last_sequence, p.last_timestamp), (0, 1_000));
    assert_eq!((p.coordinator_epoch, p.current_txn_start_offset), (-1, 0));
    assert_eq!(shown[1].0, 3, "UNKNOWN_TOPIC_OR_PARTITION");
    assert_eq!(producers(&b, "nope", vec![0]).await[0].0, 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn write_txn_markers_aborts_by_hand_and_refuses_stale_epochs() {
    let dir = tempfile::tempdir().expect("tempdir");
    let b = broker(dir.path()).await;
    let (pid, epoch) = open_transaction(&b).await;
    let replica = b.topic("t").expect("t").local(0).expect("local").clone();
    assert_eq!(replica.high_watermark().0, 1);

    assert_eq!(
        write_marker(&b, marker(pid, epoch - 1, 0, "t")).await,
        47,
        "INVALID_PRODUCER_EPOCH"
    );
    assert_eq!(write_marker(&b, marker(pid, epoch, 0, "nope")).await, 3);
    assert_eq!(
        write_marker(&b, marker(pid, epoch, 0, "__transaction_state")).await,
        42,
        "INVALID_REQUEST: coordinator records only"
    );

    // What `kafka-transactions.sh abort` sends: the producer's epoch, and
    // its coordinator epoch or 0.
    assert_eq!(write_marker(&b, marker(pid, epoch, 5, "t")).await, 0);
    assert_eq!(
        replica.high_watermark().0,
        2,
        "the abort marker follows the record"
    );
    let shown = producers(&b, "t", vec![0]).await;
    let p = &shown[0].1[0];
    assert_eq!((p.coordinator_epoch, p.current_txn_start_offset), (5, -1));
    // The last stable offset moved past the transaction.
    let latest = ListOffsetsRequest::default()
        .with_isolation_level(1)
        .with_topics(vec![
            list_offsets_request::ListOffsetsTopic::default()
                .with_name(wire_topic("t"))
                .with_partitions(vec![
                    list_offsets_request::ListOffsetsPartition::default()
                        .with_partition_index(0)
                        .with_timestamp(-1),
                ]),
        ]);
    let offsets: ListOffsetsResponse = call(&b, ApiKey::ListOffsets, 5, latest.into()).await;
    assert_eq!(offsets.topics[0].partitions[0].offset, 2);

    assert_eq!(
        write_marker(&b, marker(pid, epoch, 4, "t")).await,
        52,
        "TRANSACTION_COORDINATOR_FENCED"
    );
}
