//! A gap a replica's own refusal left is answered NOT_LEADER, not
//! OUT_OF_ORDER (ADR 0024, "Refused, then decided"), on three whole
//! brokers in one process: the refusal here comes from the replica's shard
//! (`readiness`), where `tests/test_cluster_refused_gap.py` exercises the
//! refusal at the door (`Partition::check_writable`).

use super::harness::{TestCluster, leader_of, queue, settled_preferred_leader, wait_until};
use crate::error::HelixError;
use crate::replica::batch::tests::make_batch;

const PRODUCER: i64 = 42;

fn from_producer(seq: i32) -> bytes::Bytes {
    make_batch(&[format!("s{seq}").as_bytes()], PRODUCER, seq, 1000)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_follower_that_refused_a_batch_and_then_leads_excuses_only_that_gap() {
    let c = TestCluster::start(3).await;
    c.broker(1)
        .admin
        .create_topic("r", 1, 3, None, Default::default(), false)
        .await
        .expect("created");
    let old = settled_preferred_leader(&c, "r", 0).await;
    queue(c.broker(old), "r", 0, from_producer(0))
        .await
        .expect("the first batch is stored");
    let others: Vec<u64> = c.ids().into_iter().filter(|n| *n != old).collect();
    for f in &others {
        let refused = queue(c.broker(*f), "r", 0, from_producer(1)).await;
        assert!(
            matches!(refused, Err(HelixError::NotLeader)),
            "a follower's replica refuses: {refused:?}"
        );
    }
    c.isolate(old);
    wait_until("a new leader among the majority", || {
        leader_of(c.broker(others[0]), "r", 0).is_some_and(|l| l != old)
    })
    .await;
    let new = c.broker(leader_of(c.broker(others[0]), "r", 0).expect("leader"));
    // It takes writes (a batch without a producer), so what follows is its
    // decision.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while queue(new, "r", 0, make_batch(&[b"probe"], -1, -1, 1000))
        .await
        .is_err()
    {
        assert!(
            std::time::Instant::now() < deadline,
            "the new leader never took writes"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    let third = queue(new, "r", 0, from_producer(2)).await;
    assert!(
        matches!(third, Err(HelixError::NotLeader)),
        "the batch after the refused one: {third:?} (OUT_OF_ORDER makes librdkafka renumber)"
    );
    queue(new, "r", 0, from_producer(1))
        .await
        .expect("the refused batch, sent again");
    queue(new, "r", 0, from_producer(2))
        .await
        .expect("then the next");
    let gap = queue(new, "r", 0, from_producer(4)).await;
    assert!(
        matches!(
            gap,
            Err(HelixError::OutOfOrderSequence {
                expected: 3,
                got: 4
            })
        ),
        "a gap this replica did not leave is reported: {gap:?}"
    );
    c.close().await;
}
