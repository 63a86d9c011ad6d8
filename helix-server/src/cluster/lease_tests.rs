//! The leader lease in what clients are told (ADR 0019), on three whole
//! brokers in one process (the harness of `tests.rs`): a leader cut off
//! from its majority stops naming itself and serving once its lease ends,
//! and NOT_LEADER_OR_FOLLOWER answers carry KIP-951's leader hints.

use std::sync::Arc;

use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::{BrokerId, FetchRequest, ProduceRequest};

use super::harness::{TestCluster, leader_of, wait_until};
use crate::broker::Broker;
use crate::error::HelixError;
use crate::kafka::{fetch, produce, wire_topic};

const NOT_LEADER_OR_FOLLOWER: i16 = 6;

/// A Produce request of `version` for partition 0 of `topic`.
fn produce_request(topic: &str) -> ProduceRequest {
    let batch = crate::replica::batch::tests::make_batch(&[b"v"], -1, -1, 1000);
    ProduceRequest::default()
        .with_acks(-1)
        .with_timeout_ms(5000)
        .with_topic_data(vec![
            TopicProduceData::default()
                .with_name(wire_topic(topic))
                .with_partition_data(vec![
                    PartitionProduceData::default()
                        .with_index(0)
                        .with_records(Some(batch)),
                ]),
        ])
}

/// A Fetch request of partition 0 of `topic` (by name and, for v13+, id)
/// that does not wait.
fn fetch_request(topic: &str, id: uuid::Uuid) -> FetchRequest {
    FetchRequest::default()
        .with_max_wait_ms(0)
        .with_max_bytes(1 << 20)
        .with_topics(vec![
            FetchTopic::default()
                .with_topic(wire_topic(topic))
                .with_topic_id(id)
                .with_partitions(vec![
                    FetchPartition::default()
                        .with_partition(0)
                        .with_partition_max_bytes(1 << 20),
                ]),
        ])
}

/// (error, hinted leader, hinted epoch, endpoint ids) of a Produce v10.
async fn produce_v10(b: &Arc<Broker>, topic: &str) -> (i16, i32, i32, Vec<i32>) {
    let resp = produce::enqueue(
        crate::kafka::context::Producing::of(b),
        produce_request(topic),
        10,
    )
    .await
    .await
    .expect("answered")
    .expect("acks=all has an answer");
    let r = &resp.responses[0].partition_responses[0];
    (
        r.error_code,
        r.current_leader.leader_id.0,
        r.current_leader.leader_epoch,
        resp.node_endpoints.iter().map(|e| e.node_id.0).collect(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cut_off_leader_stops_naming_itself_and_answers_point_to_the_new_leader() {
    let c = TestCluster::start(3).await;
    c.broker(1)
        .admin
        .create_topic("l", 1, 3, None, Default::default(), false)
        .await
        .expect("created");
    wait_until("a leader", || leader_of(c.broker(1), "l", 0).is_some()).await;
    let old = leader_of(c.broker(1), "l", 0).expect("leader");
    let local = |id: u64| {
        c.broker(id)
            .topic("l")
            .expect("topic")
            .local(0)
            .expect("local")
            .clone()
    };
    wait_until("the old leader serving", || {
        local(old).check_leader(-1).is_ok()
    })
    .await;
    assert!(local(old).holds_lease());
    c.isolate(old);
    // Its lease ends before check-quorum steps it down: from then on it
    // names no leader (Metadata) and refuses writes and reads, although
    // its Raft replica may still lead.
    wait_until("the isolated node to stop naming itself", || {
        leader_of(c.broker(old), "l", 0).is_none()
    })
    .await;
    assert!(matches!(
        local(old).check_leader(-1),
        Err(HelixError::NotLeader)
    ));
    let (err, hinted, _, endpoints) = produce_v10(c.broker(old), "l").await;
    assert_eq!(err, NOT_LEADER_OR_FOLLOWER);
    assert_eq!(
        hinted, -1,
        "cut off, it knows no leader to send the client to"
    );
    assert!(endpoints.is_empty());
    // The majority elects; its follower points clients at the new leader.
    let others: Vec<u64> = c.ids().into_iter().filter(|n| *n != old).collect();
    wait_until("a new leader among the majority", || {
        others
            .iter()
            .all(|o| leader_of(c.broker(*o), "l", 0).is_some_and(|l| l != old))
    })
    .await;
    let new = leader_of(c.broker(others[0]), "l", 0).expect("new leader");
    let follower = *others.iter().find(|o| **o != new).expect("a follower");
    let epoch = local(new).leader_epoch();
    let (err, hinted, hinted_epoch, endpoints) = produce_v10(c.broker(follower), "l").await;
    assert_eq!(err, NOT_LEADER_OR_FOLLOWER);
    assert_eq!((hinted, hinted_epoch), (new as i32, epoch));
    assert_eq!(endpoints, vec![new as i32]);
    let id = c.broker(follower).topic("l").expect("topic").id;
    let resp = fetch::handle(
        crate::kafka::context::Partitions::of(c.broker(follower)),
        fetch_request("l", id),
        16,
    )
    .await;
    let p = &resp.responses[0].partitions[0];
    assert_eq!(p.error_code, NOT_LEADER_OR_FOLLOWER);
    assert_eq!(p.current_leader.leader_id, BrokerId(new as i32));
    assert_eq!(p.current_leader.leader_epoch, epoch);
    let ep = &resp.node_endpoints;
    assert_eq!(ep.len(), 1);
    assert_eq!(ep[0].node_id, BrokerId(new as i32));
    assert_eq!(ep[0].port, 19000 + new as i32, "the node's Kafka address");
    // Versions before the hints exist carry none (the codec drops them).
    let resp = fetch::handle(
        crate::kafka::context::Partitions::of(c.broker(follower)),
        fetch_request("l", id),
        15,
    )
    .await;
    assert!(resp.node_endpoints.is_empty());
    c.close().await;
}
