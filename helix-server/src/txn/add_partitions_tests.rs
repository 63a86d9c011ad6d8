//! AddPartitionsToTxn v4-v5 through dispatch on one broker, as a partition
//! leader of Kafka 3.9 sends it (`AddPartitionsToTxnManager`): several
//! transactions in one request, verify-only ones answered per partition
//! from the acknowledged state and changing nothing, added ones taking
//! effect; an unknown transactional id, a wrong epoch and an unknown topic
//! answered as Kafka answers them. A node that is not the
//! coordinator: `cluster::txn_tests`.

use std::sync::Arc;

use kafka_protocol::messages::add_partitions_to_txn_request::{
    AddPartitionsToTxnTopic, AddPartitionsToTxnTransaction,
};
use kafka_protocol::messages::*;
use kafka_protocol::protocol::{Decodable, StrBytes};

use crate::broker::Broker;
use crate::kafka::tests::{broker, roundtrip};
use crate::kafka::wire_topic;

const NONE: i16 = 0;
const UNKNOWN_TOPIC_OR_PARTITION: i16 = 3;
const INVALID_REQUEST: i16 = 42;
const OPERATION_NOT_ATTEMPTED: i16 = 55;
const INVALID_PRODUCER_ID_MAPPING: i16 = 49;
const PRODUCER_FENCED: i16 = 90;
const TRANSACTION_ABORTABLE: i16 = 120;

fn id(s: &str) -> TransactionalId {
    TransactionalId(StrBytes::from_string(s.to_owned()))
}

/// InitProducerId v4 for `tid`: (producer id, epoch).
async fn init(b: &Arc<Broker>, tid: &str) -> (i64, i16) {
    let init = InitProducerIdRequest::default()
        .with_transactional_id(Some(id(tid)))
        .with_transaction_timeout_ms(60_000)
        .with_producer_id(ProducerId(-1))
        .with_producer_epoch(-1);
    let mut out = roundtrip(b, ApiKey::InitProducerId, 4, &init.into()).await;
    let r = InitProducerIdResponse::decode(&mut out, 4).expect("decode");
    assert_eq!(r.error_code, 0, "InitProducerId {tid}");
    (r.producer_id.0, r.producer_epoch)
}

/// One transaction of a v4+ request: `partitions` of topic "v".
fn txn(
    tid: &str,
    (pid, epoch): (i64, i16),
    verify_only: bool,
    topics: &[(&str, &[i32])],
) -> AddPartitionsToTxnTransaction {
    AddPartitionsToTxnTransaction::default()
        .with_transactional_id(id(tid))
        .with_producer_id(ProducerId(pid))
        .with_producer_epoch(epoch)
        .with_verify_only(verify_only)
        .with_topics(
            topics
                .iter()
                .map(|(name, partitions)| {
                    AddPartitionsToTxnTopic::default()
                        .with_name(wire_topic(name))
                        .with_partitions(partitions.to_vec())
                })
                .collect(),
        )
}

/// Sends the batch at `version`; per transaction (id, every partition's
/// code in request order), and the top-level code.
async fn send(
    b: &Arc<Broker>,
    version: i16,
    transactions: Vec<AddPartitionsToTxnTransaction>,
) -> (i16, Vec<(String, Vec<i16>)>) {
    let req = AddPartitionsToTxnRequest::default().with_transactions(transactions);
    let mut out = roundtrip(b, ApiKey::AddPartitionsToTxn, version, &req.into()).await;
    let resp = AddPartitionsToTxnResponse::decode(&mut out, version).expect("decode");
    assert!(resp.results_by_topic_v3_and_below.is_empty());
    let results = resp
        .results_by_transaction
        .iter()
        .map(|t| {
            let codes = t
                .topic_results
                .iter()
                .flat_map(|topic| &topic.results_by_partition)
                .map(|p| p.partition_error_code)
                .collect();
            (t.transactional_id.0.to_string(), codes)
        })
        .collect();
    (resp.error_code, results)
}

fn owned(expected: &[(&str, &[i16])]) -> Vec<(String, Vec<i16>)> {
    expected
        .iter()
        .map(|(tid, codes)| ((*tid).to_owned(), codes.to_vec()))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_is_answered_per_transaction_as_kafka_answers_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    let b = broker(dir.path()).await;
    b.admin
        .create_topic("v", 3, -1, None, Default::default(), false)
        .await
        .expect("topic v");
    let a = init(&b, "a").await;
    let fenced = init(&b, "fenced").await;
    let grows = init(&b, "grows").await;
    // "a" adds v-0 (a broker's v4 add, not verify-only), once durable.
    let (top, added) = send(&b, 4, vec![txn("a", a, false, &[("v", &[0])])]).await;
    assert_eq!((top, added), (NONE, owned(&[("a", &[NONE])])));

    for version in [4, 5] {
        let (top, results) = send(
            &b,
            version,
            vec![
                // In the transaction, and not (Kafka 3.9's coordinator
                // answers TRANSACTION_ABORTABLE at v4 and v5).
                txn("a", a, true, &[("v", &[0, 1])]),
                // A transactional id the coordinator never saw.
                txn("nobody", a, true, &[("v", &[0])]),
                // An epoch that is not the producer's.
                txn("fenced", (fenced.0, fenced.1 + 1), true, &[("v", &[0])]),
                // A topic that does not exist: the coordinator is not asked.
                txn("grows", grows, false, &[("v", &[2]), ("gone", &[0])]),
            ],
        )
        .await;
        assert_eq!(top, NONE);
        assert_eq!(
            results,
            owned(&[
                ("a", &[NONE, TRANSACTION_ABORTABLE]),
                ("nobody", &[INVALID_PRODUCER_ID_MAPPING]),
                ("fenced", &[PRODUCER_FENCED]),
                (
                    "grows",
                    &[OPERATION_NOT_ATTEMPTED, UNKNOWN_TOPIC_OR_PARTITION]
                ),
            ]),
            "v{version}"
        );
    }

    // Verifying changed nothing ("a" still holds v-0 only); the refused add
    // added nothing; a batch's add takes effect.
    let (_, results) = send(
        &b,
        4,
        vec![
            txn("a", a, true, &[("v", &[1])]),
            txn("grows", grows, true, &[("v", &[2])]),
            txn("fenced", fenced, false, &[("v", &[1, 2])]),
        ],
    )
    .await;
    assert_eq!(
        results,
        owned(&[
            ("a", &[TRANSACTION_ABORTABLE]),
            ("grows", &[TRANSACTION_ABORTABLE]),
            ("fenced", &[NONE, NONE]),
        ])
    );
    let (_, results) = send(&b, 5, vec![txn("fenced", fenced, true, &[("v", &[1, 2])])]).await;
    assert_eq!(results, owned(&[("fenced", &[NONE, NONE])]));
    let described = b.txn.describe("a").expect("described");
    assert_eq!(described.partitions.len(), 1, "{described:?}");
}

/// Every advertised version decodes and is answered in its own shape: a
/// client's v0-v3 and a broker's v4-v5 add of a partition already in the
/// transaction (NONE at once).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_advertised_version_is_served() {
    let dir = tempfile::tempdir().expect("tempdir");
    let b = broker(dir.path()).await;
    let a = init(&b, "a").await;
    assert_eq!(
        crate::txn::wire::range(ApiKey::AddPartitionsToTxn),
        Some((0, 5))
    );
    for version in 0..=5 {
        let codes = if version >= 4 {
            let (top, results) = send(&b, version, vec![txn("a", a, false, &[("t", &[0])])]).await;
            assert_eq!(top, NONE);
            results.into_iter().flat_map(|(_, codes)| codes).collect()
        } else {
            let req = AddPartitionsToTxnRequest::default()
                .with_v3_and_below_transactional_id(id("a"))
                .with_v3_and_below_producer_id(ProducerId(a.0))
                .with_v3_and_below_producer_epoch(a.1)
                .with_v3_and_below_topics(vec![
                    AddPartitionsToTxnTopic::default()
                        .with_name(wire_topic("t"))
                        .with_partitions(vec![0]),
                ]);
            let mut out = roundtrip(&b, ApiKey::AddPartitionsToTxn, version, &req.into()).await;
            let resp = AddPartitionsToTxnResponse::decode(&mut out, version).expect("decode");
            assert!(resp.results_by_transaction.is_empty());
            resp.results_by_topic_v3_and_below
                .iter()
                .flat_map(|t| &t.results_by_partition)
                .map(|p| p.partition_error_code)
                .collect::<Vec<_>>()
        };
        assert_eq!(codes, [NONE], "v{version}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_empty_transactional_id_is_invalid_request() {
    let dir = tempfile::tempdir().expect("tempdir");
    let b = broker(dir.path()).await;
    // Kafka's coordinator checks the id before anything else.
    for verify_only in [true, false] {
        let (top, results) = send(&b, 4, vec![txn("", (1, 0), verify_only, &[("t", &[0])])]).await;
        assert_eq!((top, results), (NONE, owned(&[("", &[INVALID_REQUEST])])));
    }
}
