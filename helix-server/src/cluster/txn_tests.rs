//! A transaction across three brokers in one process (their peer links in
//! memory): the coordinator of a transactional id on one node, the
//! transaction's partitions led by all three. A transactional batch on a
//! node that does not coordinate the id is verified with the coordinator
//! over a peer call, and the commit's markers reach every leader; the
//! same question asked on the wire (AddPartitionsToTxn v4) is answered by
//! the coordinator only. The same
//! over real processes and the real transport: tests/test_cluster_transactions.py.

use std::sync::Arc;

use kafka_protocol::messages::{
    AddPartitionsToTxnRequest, AddPartitionsToTxnResponse, ApiKey, EndTxnRequest, EndTxnResponse,
    FindCoordinatorRequest, FindCoordinatorResponse, InitProducerIdRequest, InitProducerIdResponse,
    ProduceRequest, ProduceResponse, ProducerId, TransactionalId, add_partitions_to_txn_request,
    produce_request,
};
use kafka_protocol::protocol::{Decodable, StrBytes};

use super::harness::{TestCluster, settled_preferred_leader, wait_until};
use crate::broker::Broker;
use crate::kafka::tests::roundtrip;
use crate::kafka::wire_topic;
use crate::replica::batch::tests::{make_batch, transactional};

const TID: &str = "tx";

/// FindCoordinator v3 for transactional id `TID` on `on`: the node, or None.
async fn txn_coordinator(on: &Arc<Broker>) -> Option<u64> {
    let req = FindCoordinatorRequest::default()
        .with_key(StrBytes::from_static_str(TID))
        .with_key_type(1);
    let mut out = roundtrip(on, ApiKey::FindCoordinator, 3, &req.into()).await;
    let resp = FindCoordinatorResponse::decode(&mut out, 3).expect("decode");
    (resp.error_code == 0).then_some(resp.node_id.0 as u64)
}

/// Produce v9 of one transactional batch of `pid` at `epoch` to `topic`-`p`
/// on `on`: the partition's error code.
async fn produce_txn(on: &Arc<Broker>, topic: &str, p: i32, pid: i64, epoch: i16) -> i16 {
    produce_txn_at(on, topic, p, (pid, epoch), 0).await
}

/// [`produce_txn`] of the batch with base sequence `seq`.
async fn produce_txn_at(
    on: &Arc<Broker>,
    topic: &str,
    p: i32,
    (pid, epoch): (i64, i16),
    seq: i32,
) -> i16 {
    let mut pd = produce_request::PartitionProduceData::default();
    pd.index = p;
    pd.records = Some(transactional(
        &make_batch(&[b"in a transaction"], pid, seq, 1000),
        epoch,
    ));
    let mut td = produce_request::TopicProduceData::default();
    td.name = wire_topic(topic);
    td.partition_data = vec![pd];
    let mut r = ProduceRequest::default();
    r.transactional_id = Some(TransactionalId(StrBytes::from_static_str(TID)));
    r.acks = -1;
    r.timeout_ms = 5000;
    r.topic_data = vec![td];
    let mut out = roundtrip(on, ApiKey::Produce, 9, &r.into()).await;
    let resp = ProduceResponse::decode(&mut out, 9).expect("decode");
    resp.responses[0].partition_responses[0].error_code
}

/// The node every node names coordinator of `TID`, once they agree.
async fn settled_coordinator(c: &TestCluster) -> u64 {
    for _ in 0..1500 {
        let mut named = Vec::new();
        for id in c.ids() {
            named.push(txn_coordinator(c.broker(id)).await);
        }
        if let Some(Some(first)) = named.first()
            && named.iter().all(|n| *n == Some(*first))
        {
            return *first;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    panic!("every node names one coordinator");
}

/// InitProducerId v1 for `TID` on its coordinator: (producer id, epoch).
/// Retried while the answer is one clients retry: the coordinator's
/// partition still loading (COORDINATOR_LOAD_IN_PROGRESS), or no producer
/// id block from the controller yet (COORDINATOR_NOT_AVAILABLE).
async fn init(coordinator: &Arc<Broker>) -> (i64, i16) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let init = InitProducerIdRequest::default()
            .with_transactional_id(Some(TransactionalId(StrBytes::from_static_str(TID))))
            .with_transaction_timeout_ms(60_000);
        let mut out = roundtrip(coordinator, ApiKey::InitProducerId, 1, &init.into()).await;
        let init = InitProducerIdResponse::decode(&mut out, 1).expect("decode");
        match init.error_code {
            0 => return (init.producer_id.0, init.producer_epoch),
            14 | 15 => assert!(
                std::time::Instant::now() < deadline,
                "InitProducerId still {}",
                init.error_code
            ),
            other => panic!("InitProducerId answered {other}"),
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}

/// AddPartitionsToTxn v3 of `topic`'s `partitions`: each one's code.
async fn add(
    coordinator: &Arc<Broker>,
    (pid, epoch): (i64, i16),
    topic: &str,
    partitions: Vec<i32>,
) -> Vec<i16> {
    let add = AddPartitionsToTxnRequest::default()
        .with_v3_and_below_transactional_id(TransactionalId(StrBytes::from_static_str(TID)))
        .with_v3_and_below_producer_id(ProducerId(pid))
        .with_v3_and_below_producer_epoch(epoch)
        .with_v3_and_below_topics(vec![
            add_partitions_to_txn_request::AddPartitionsToTxnTopic::default()
                .with_name(wire_topic(topic))
                .with_partitions(partitions),
        ]);
    let mut out = roundtrip(coordinator, ApiKey::AddPartitionsToTxn, 3, &add.into()).await;
    let added = AddPartitionsToTxnResponse::decode(&mut out, 3).expect("decode");
    added.results_by_topic_v3_and_below[0]
        .results_by_partition
        .iter()
        .map(|r| r.partition_error_code)
        .collect()
}

/// AddPartitionsToTxn v4, verify-only, of `topic`-`partition` for each
/// (topic, partition) on `on`: each one's code.
async fn verify_v4(
    on: &Arc<Broker>,
    (pid, epoch): (i64, i16),
    partitions: &[(&str, i32)],
) -> Vec<i16> {
    let txn = add_partitions_to_txn_request::AddPartitionsToTxnTransaction::default()
        .with_transactional_id(TransactionalId(StrBytes::from_static_str(TID)))
        .with_producer_id(ProducerId(pid))
        .with_producer_epoch(epoch)
        .with_verify_only(true)
        .with_topics(
            partitions
                .iter()
                .map(|(topic, p)| {
                    add_partitions_to_txn_request::AddPartitionsToTxnTopic::default()
                        .with_name(wire_topic(topic))
                        .with_partitions(vec![*p])
                })
                .collect(),
        );
    let req = AddPartitionsToTxnRequest::default().with_transactions(vec![txn]);
    let mut out = roundtrip(on, ApiKey::AddPartitionsToTxn, 4, &req.into()).await;
    let resp = AddPartitionsToTxnResponse::decode(&mut out, 4).expect("decode");
    assert_eq!(resp.error_code, 0);
    resp.results_by_transaction[0]
        .topic_results
        .iter()
        .flat_map(|t| &t.results_by_partition)
        .map(|p| p.partition_error_code)
        .collect()
}

/// EndTxn v3: its code.
async fn end(coordinator: &Arc<Broker>, (pid, epoch): (i64, i16), commit: bool) -> i16 {
    let end = EndTxnRequest::default()
        .with_transactional_id(TransactionalId(StrBytes::from_static_str(TID)))
        .with_producer_id(ProducerId(pid))
        .with_producer_epoch(epoch)
        .with_committed(commit);
    let mut out = roundtrip(coordinator, ApiKey::EndTxn, 3, &end.into()).await;
    EndTxnResponse::decode(&mut out, 3)
        .expect("decode")
        .error_code
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_transaction_is_verified_and_ended_on_partitions_led_by_other_nodes() {
    let c = TestCluster::start(3).await;
    for topic in ["t", "u"] {
        c.broker(1)
            .admin
            .create_topic(topic, 3, 3, None, Default::default(), false)
            .await
            .expect("topic");
    }
    let mut leaders = Vec::new();
    for p in 0..3 {
        leaders.push(settled_preferred_leader(&c, "t", p).await);
        settled_preferred_leader(&c, "u", p).await;
    }
    let at = settled_coordinator(&c).await;
    let coordinator = c.broker(at);
    let (pid, epoch) = init(coordinator).await;
    assert_eq!(
        add(coordinator, (pid, epoch), "t", vec![0, 1, 2]).await,
        vec![0, 0, 0]
    );
    // The same question on the wire (AddPartitionsToTxn v4, verify-only):
    // the coordinator answers per partition, another node NOT_COORDINATOR
    // (it never forwards).
    let asked = [("t", 0), ("u", 0)];
    assert_eq!(verify_v4(coordinator, (pid, epoch), &asked).await, [0, 120]);
    for other in c.ids().into_iter().filter(|id| *id != at) {
        let codes = verify_v4(c.broker(other), (pid, epoch), &asked).await;
        assert_eq!(codes, [16, 16], "node {other}");
    }

    for p in 0..3 {
        let leader = c.broker(leaders[p as usize]);
        // Added: the leader (on another node for two of the three) verifies
        // it with the coordinator and appends.
        assert_eq!(produce_txn(leader, "t", p, pid, epoch).await, 0, "t-{p}");
        // Never added: refused, wherever the coordinator is.
        assert_eq!(
            produce_txn(c.broker(leaders[p as usize]), "u", p, pid, epoch).await,
            48,
            "u-{p}: INVALID_TXN_STATE"
        );
    }
    for p in 0..3 {
        let part = c.broker(leaders[p as usize]).topic("t").expect("t");
        let part = part.local(p).expect("local").clone();
        assert_eq!(part.last_stable_offset().0, 0, "t-{p} held open");
    }

    assert_eq!(end(coordinator, (pid, epoch), true).await, 0);
    // The commit marker lands on every leader: the batch and the marker,
    // both stable.
    for p in 0..3 {
        let part = c
            .broker(leaders[p as usize])
            .topic("t")
            .expect("t")
            .local(p)
            .expect("local")
            .clone();
        wait_until("the commit marker on every leader", || {
            part.log_end_offset().0 == 2 && part.last_stable_offset().0 == 2
        })
        .await;
    }
    c.close().await;
}

/// KIP-890 part 1, as Kafka: a transaction's first batch on a partition is
/// verified with the coordinator (a peer call here: the partition is led
/// by another node); later batches find the transaction ongoing for that
/// producer and epoch in the partition's replicated producer state and go
/// straight to the log. The next transaction's first batch is verified
/// again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_a_transactions_first_batch_on_a_partition_is_verified() {
    let c = TestCluster::start(3).await;
    c.broker(1)
        .admin
        .create_topic("t", 3, 3, None, Default::default(), false)
        .await
        .expect("topic");
    let mut leaders = Vec::new();
    for p in 0..3 {
        leaders.push(settled_preferred_leader(&c, "t", p).await);
    }
    let at = settled_coordinator(&c).await;
    let coordinator = c.broker(at);
    let p = (0..3)
        .find(|p| leaders[*p as usize] != at)
        .expect("a partition led by another node");
    let leader = c.broker(leaders[p as usize]);
    let part = leader
        .topic("t")
        .expect("t")
        .local(p)
        .expect("local")
        .clone();
    let producer = init(coordinator).await;

    assert_eq!(add(coordinator, producer, "t", vec![p]).await, vec![0]);
    for seq in 0..3 {
        assert_eq!(produce_txn_at(leader, "t", p, producer, seq).await, 0);
    }
    assert_eq!(part.verifications_asked(), 1, "the first batch only");
    assert_eq!(end(coordinator, producer, true).await, 0);
    wait_until("the commit marker", || {
        part.log_end_offset().0 == 4 && part.last_stable_offset().0 == 4
    })
    .await;

    // The next transaction, same producer and epoch: its first batch is
    // verified again (the marker ended the one the partition knew). The
    // coordinator takes it once it has completed the commit
    // (CONCURRENT_TRANSACTIONS until then, which clients retry).
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        match add(coordinator, producer, "t", vec![p]).await[..] {
            [0] => break,
            [51] => assert!(std::time::Instant::now() < deadline, "never completed"),
            ref other => panic!("AddPartitionsToTxn answered {other:?}"),
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    for seq in 3..5 {
        assert_eq!(produce_txn_at(leader, "t", p, producer, seq).await, 0);
    }
    assert_eq!(part.verifications_asked(), 2);
    assert_eq!(end(coordinator, producer, false).await, 0);
    wait_until("the abort marker", || part.last_stable_offset().0 == 7).await;
    c.close().await;
}
