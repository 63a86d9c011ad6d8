//! A transaction open across a follower's log restart (catch-up below the
//! leader's deleted segments, `replica/state/restart.rs`): the follower
//! must end with the leader's transactions, as if it had applied the
//! whole log. It begins below the restart point and is aborted above it,
//! so the follower sees the abort marker but not the transaction's first
//! batch; only the leader's producer state, carried with the restart,
//! tells it that the marker ends a transaction begun at offset 0.

use std::time::{Duration, Instant};

use kafka_protocol::messages::{ApiKey, BrokerId, FetchRequest, FetchResponse, fetch_request};

use super::harness::{
    TestCluster, leader_of, produce, queue_verified, settled_preferred_leader, wait_until,
};
use crate::broker::Broker;
use crate::kafka::producer_state_tests::{call, marker, write_marker};
use crate::kafka::wire_topic;
use crate::offset::Offset;
use crate::replica::Partition;
use crate::replica::batch::tests::{make_batch, transactional};
use crate::replica::markers::AbortedTxn;

const PRODUCER: i64 = 77;

fn replica(b: &Broker) -> Option<std::sync::Arc<Partition>> {
    b.topic("d").and_then(|t| t.local(0).ok().cloned())
}

/// `b`'s replica of d-0 as (log start, log end, high watermark), or -1s.
fn offsets(b: &Broker) -> (i64, i64, i64) {
    replica(b).map_or((-1, -1, -1), |p| {
        (
            p.log_start_offset().0,
            p.log_end_offset().0,
            p.high_watermark().0,
        )
    })
}

fn lso(b: &Broker) -> i64 {
    replica(b).map_or(-1, |p| p.last_stable_offset().0)
}

fn aborted(b: &Broker) -> Vec<AbortedTxn> {
    replica(b).map_or_else(Vec::new, |p| {
        p.aborted_transactions(Offset(0), Offset(i64::MAX))
    })
}

/// A read_committed Fetch v11 of d-0 from `from` on `b`: its error code and
/// the aborted transactions it is told of, as (producer, first offset).
async fn fetch_committed(b: &std::sync::Arc<Broker>, from: i64) -> (i16, Vec<(i64, i64)>) {
    let req = FetchRequest::default()
        .with_replica_id(BrokerId(-1))
        .with_max_bytes(1 << 20)
        .with_isolation_level(1)
        .with_topics(vec![
            fetch_request::FetchTopic::default()
                .with_topic(wire_topic("d"))
                .with_partitions(vec![
                    fetch_request::FetchPartition::default()
                        .with_partition(0)
                        .with_fetch_offset(from)
                        .with_partition_max_bytes(1 << 20),
                ]),
        ]);
    let resp: FetchResponse = call(b, ApiKey::Fetch, 11, req.into()).await;
    let p = &resp.responses[0].partitions[0];
    let told = p
        .aborted_transactions
        .iter()
        .flatten()
        .map(|a| (a.producer_id.0, a.first_offset))
        .collect();
    (p.error_code, told)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_follower_takes_the_leaders_transactions_with_its_log() {
    let mut c = TestCluster::start(3).await;
    let configs = [("segment.bytes".to_string(), "1024".to_string())].into();
    c.broker(1)
        .admin
        .create_topic("d", 1, 3, None, configs, false)
        .await
        .expect("created");
    // The preferred replica falls behind; leadership comes back to it once
    // it has caught up, so it ends up serving what it rebuilt.
    let behind = settled_preferred_leader(&c, "d", 0).await;
    let ids = c.ids();
    let others: Vec<u64> = ids.iter().copied().filter(|n| *n != behind).collect();
    wait_until("every replica open", || {
        ids.iter().all(|n| offsets(c.broker(*n)).1 >= 0)
    })
    .await;
    c.isolate(behind);
    wait_until("a leader among the others", || {
        others
            .iter()
            .any(|n| leader_of(c.broker(*n), "d", 0) == Some(*n))
    })
    .await;
    let leader = *others
        .iter()
        .find(|n| leader_of(c.broker(**n), "d", 0) == Some(**n))
        .expect("leader");

    // Producer 77's transaction opens at offset 0 (its batch verified, as
    // the coordinator would); 20 records of 300 bytes follow, a few per
    // 1 KiB segment; then everything below 9 is deleted.
    let part = replica(c.broker(leader)).expect("leader replica");
    let guard = part.begin_verification(PRODUCER);
    let opening = transactional(&make_batch(&[&[7; 300]], PRODUCER, 0, 1000), 0);
    let at = queue_verified(c.broker(leader), "d", 0, opening, Some(guard))
        .await
        .expect("the transaction's batch");
    assert_eq!(at, 0);
    for i in 0..20u8 {
        produce(c.broker(leader), "d", 0, &[&[i; 300]])
            .await
            .expect("acked by two");
    }
    part.delete_records(Offset(9)).await.expect("deleted");
    // Restarted, the others hold the deleted range in no memory either:
    // the follower's log must start over at the first held entry.
    for n in &others {
        c.restart_with(*n, |_| {}).await;
    }
    wait_until("a leader among the others again", || {
        others
            .iter()
            .any(|n| leader_of(c.broker(*n), "d", 0) == Some(*n))
    })
    .await;
    wait_until("the others to hold 9..21", || {
        others.iter().all(|n| offsets(c.broker(*n)) == (9, 21, 21))
    })
    .await;
    for n in &others {
        assert_eq!(lso(c.broker(*n)), 9, "node {n}: held at the log start");
    }

    c.heal();
    // Caught up, the preferred replica is handed leadership back, and its
    // first record is applied after everything its log restart carried.
    settled_preferred_leader(&c, "d", 0).await;
    let at = produce(c.broker(behind), "d", 0, &[b"after"])
        .await
        .expect("acked by all");
    assert_eq!(at, 21);
    wait_until("every replica to hold 9..22", || {
        ids.iter().all(|n| offsets(c.broker(*n)) == (9, 22, 22))
    })
    .await;
    for n in &ids {
        assert_eq!(
            lso(c.broker(*n)),
            9,
            "node {n}: the open transaction holds the last stable offset at the log start"
        );
    }

    // The new leader aborts the transaction.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let code = write_marker(c.broker(behind), marker(PRODUCER, 0, 1, "d")).await;
        if code == 0 {
            break;
        }
        assert_eq!(code, 6, "NOT_LEADER_OR_FOLLOWER only");
        assert!(Instant::now() < deadline, "the abort marker never taken");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    wait_until("the marker everywhere", || {
        ids.iter().all(|n| offsets(c.broker(*n)) == (9, 23, 23))
    })
    .await;
    let expected = vec![AbortedTxn {
        producer_id: PRODUCER,
        first_offset: 0,
        last_offset: 22,
    }];
    for n in &ids {
        assert_eq!(aborted(c.broker(*n)), expected, "node {n}");
        assert_eq!(lso(c.broker(*n)), 23, "node {n}");
    }
    assert_eq!(
        fetch_committed(c.broker(behind), 9).await,
        (0, vec![(PRODUCER, 0)]),
        "a read_committed reader of the new leader is told of the abort"
    );
    c.close().await;
}
