//! A transaction across three brokers in one process (their peer links in
//! memory): the coordinator of a transactional id on one node, the
//! transaction's partitions led by all three. A transactional batch on a
//! node that does not coordinate the id is verified with the coordinator
//! over a peer call, and the commit's markers reach every leader. The same
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
    let mut pd = produce_request::PartitionProduceData::default();
    pd.index = p;
    pd.records = Some(transactional(
        &make_batch(&[b"in a transaction"], pid, 0, 1000),
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
    let mut coordinator = None;
    for _ in 0..1500 {
        let mut named = Vec::new();
        for id in c.ids() {
            named.push(txn_coordinator(c.broker(id)).await);
        }
        if named.iter().all(|n| n.is_some() && *n == named[0]) {
            coordinator = named[0];
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    let coordinator = c.broker(coordinator.expect("every node names one coordinator"));

    let init = InitProducerIdRequest::default()
        .with_transactional_id(Some(TransactionalId(StrBytes::from_static_str(TID))))
        .with_transaction_timeout_ms(60_000);
    let mut out = roundtrip(coordinator, ApiKey::InitProducerId, 1, &init.into()).await;
    let init = InitProducerIdResponse::decode(&mut out, 1).expect("decode");
    assert_eq!(init.error_code, 0);
    let (pid, epoch) = (init.producer_id.0, init.producer_epoch);

    let add = AddPartitionsToTxnRequest::default()
        .with_v3_and_below_transactional_id(TransactionalId(StrBytes::from_static_str(TID)))
        .with_v3_and_below_producer_id(ProducerId(pid))
        .with_v3_and_below_producer_epoch(epoch)
        .with_v3_and_below_topics(vec![
            add_partitions_to_txn_request::AddPartitionsToTxnTopic::default()
                .with_name(wire_topic("t"))
                .with_partitions(vec![0, 1, 2]),
        ]);
    let mut out = roundtrip(coordinator, ApiKey::AddPartitionsToTxn, 3, &add.into()).await;
    let added = AddPartitionsToTxnResponse::decode(&mut out, 3).expect("decode");
    let codes: Vec<i16> = added.results_by_topic_v3_and_below[0]
        .results_by_partition
        .iter()
        .map(|r| r.partition_error_code)
        .collect();
    assert_eq!(codes, vec![0, 0, 0]);

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

    let end = EndTxnRequest::default()
        .with_transactional_id(TransactionalId(StrBytes::from_static_str(TID)))
        .with_producer_id(ProducerId(pid))
        .with_producer_epoch(epoch)
        .with_committed(true);
    let mut out = roundtrip(coordinator, ApiKey::EndTxn, 3, &end.into()).await;
    assert_eq!(
        EndTxnResponse::decode(&mut out, 3)
            .expect("decode")
            .error_code,
        0
    );
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
