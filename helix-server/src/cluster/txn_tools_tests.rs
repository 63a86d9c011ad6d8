//! Transaction tooling on three whole brokers in one process: nothing of
//! it assumes one node. Each node lists the transactional ids of the
//! `__transaction_state` partitions it leads, describes the producers of
//! its own replicas (leader or follower, as Kafka), and writes a
//! WriteTxnMarkers marker only on the partition's leader.

use std::time::{Duration, Instant};

use kafka_protocol::messages::{ApiKey, ListTransactionsRequest, ListTransactionsResponse};

use super::harness::{TestCluster, settled_preferred_leader, wait_until};
use crate::kafka::producer_state_tests::{call, marker, producers, write_marker};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_node_answers_transaction_tooling_for_its_own_replicas() {
    let c = TestCluster::start(3).await;
    let admin = &c.broker(1).admin;
    admin
        .create_topic("w", 1, 3, None, Default::default(), false)
        .await
        .expect("w");
    admin
        .create_topic("one", 1, 1, None, Default::default(), false)
        .await
        .expect("one");
    for id in c.ids() {
        let b = c.broker(id);
        wait_until("both topics everywhere", || {
            b.topic("w").is_some() && b.topic("one").is_some()
        })
        .await;
    }

    // Every node answers ListTransactions once its coordinator partitions
    // are loaded; none holds a transaction.
    for id in c.ids() {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let list: ListTransactionsResponse = call(
                c.broker(id),
                ApiKey::ListTransactions,
                1,
                ListTransactionsRequest::default().into(),
            )
            .await;
            if list.error_code == 0 {
                assert!(list.transaction_states.is_empty(), "node {id}");
                break;
            }
            assert_eq!(list.error_code, 14, "COORDINATOR_LOAD_IN_PROGRESS only");
            assert!(Instant::now() < deadline, "node {id} still loading");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    // A marker is written by the leader only; a follower is
    // NOT_LEADER_OR_FOLLOWER (the admin client goes to the leader).
    let leader = settled_preferred_leader(&c, "w", 0).await;
    for id in c.ids().into_iter().filter(|id| *id != leader) {
        assert_eq!(write_marker(c.broker(id), marker(77, 0, 1, "w")).await, 6);
    }
    assert_eq!(
        write_marker(c.broker(leader), marker(77, 0, 1, "w")).await,
        0
    );
    let shown = producers(c.broker(leader), "w", vec![0]).await;
    assert_eq!(shown[0].0, 0);
    assert_eq!(shown[0].1[0].producer_id.0, 77);
    assert_eq!(shown[0].1[0].coordinator_epoch, 1);

    // A partition with no replica on a node: DescribeProducers there is
    // NOT_LEADER_OR_FOLLOWER, WriteTxnMarkers UNKNOWN_TOPIC_OR_PARTITION
    // (Kafka's answers when no local log holds it).
    let holder = c.broker(1).topic("one").expect("one").partitions[0].replicas[0].0;
    for id in c.ids() {
        let shown = producers(c.broker(id), "one", vec![0]).await;
        let written = write_marker(c.broker(id), marker(78, 0, 1, "one")).await;
        if id == holder {
            assert_eq!(shown[0].0, 0, "node {id}");
        } else {
            assert_eq!((shown[0].0, written), (6, 3), "node {id}");
        }
    }
    c.close().await;
}
