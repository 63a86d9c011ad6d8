//! DeleteRecords reaching a follower caught up from the leader's WAL: the
//! entry moves the log start on every replica, so a follower that was cut
//! off while it was applied must end with the leader's log start and never
//! serve the deleted records, as leader or after a restart.

use std::sync::atomic::Ordering;

use super::harness::{TestCluster, leader_of, produce, wait_until};
use crate::broker::Broker;
use crate::offset::Offset;

fn replica(b: &Broker) -> Option<std::sync::Arc<crate::replica::Partition>> {
    b.topic("d").and_then(|t| t.local(0).ok().cloned())
}

fn log_end(b: &Broker) -> i64 {
    replica(b).map_or(-1, |p| p.log_end_offset().0)
}

fn log_start(b: &Broker) -> i64 {
    replica(b).map_or(-1, |p| p.log_start_offset().0)
}

/// The bytes of the DeleteRecords entries `b`'s WAL of partition 0 keeps
/// (docs/wal.md): two entries, 40 bytes with the count and checksum.
fn kept_delete_records(b: &Broker) -> Vec<u8> {
    let topics = b.config.data_dir.join("topics");
    let topic = std::fs::read_dir(&topics)
        .expect("topics")
        .next()
        .expect("one topic")
        .expect("entry")
        .path();
    let kept = std::fs::read(topic.join("0").join("wal").join("delete-records-entries"))
        .expect("kept entries");
    assert_eq!(kept.len(), 4 + 8 + 2 * 16 + 4);
    kept
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_follower_caught_up_from_the_wal_takes_the_deleted_log_start() {
    let mut c = TestCluster::start_with(3, false).await;
    c.broker(1)
        .admin
        .create_topic("d", 1, 3, None, Default::default(), false)
        .await
        .expect("created");
    wait_until("a leader", || leader_of(c.broker(1), "d", 0).is_some()).await;
    let leader = leader_of(c.broker(1), "d", 0).expect("leader");
    let ids = c.ids();
    let behind = *ids.iter().find(|n| **n != leader).expect("follower");
    let other = *ids
        .iter()
        .find(|n| **n != leader && **n != behind)
        .expect("third");
    wait_until("every replica open", || {
        ids.iter().all(|n| log_end(c.broker(*n)) >= 0)
    })
    .await;

    c.isolate(behind);
    // Two DeleteRecords, both kept by the WAL and both caught up as such.
    for (from, to, before) in [(0u8, 5u8, 3), (5, 10, 6)] {
        for i in from..to {
            produce(c.broker(leader), "d", 0, &[&[i]])
                .await
                .expect("acked by two");
        }
        let moved = replica(c.broker(leader))
            .expect("leader replica")
            .delete_records(Offset(before))
            .await
            .expect("deleted");
        assert_eq!(moved, Offset(before));
    }
    for i in 10..20u8 {
        produce(c.broker(leader), "d", 0, &[&[i]])
            .await
            .expect("acked by two");
    }
    // Restarted, both hold nothing of the group's log in memory: the
    // follower can only be caught up from a WAL.
    c.restart_with(leader, |_| {}).await;
    c.restart_with(other, |_| {}).await;
    wait_until("a leader again", || {
        leader_of(c.broker(other), "d", 0).is_some_and(|l| l != behind)
    })
    .await;
    let now_leader = leader_of(c.broker(other), "d", 0).expect("leader");
    assert_eq!(log_start(c.broker(now_leader)), 6);

    let streamed = crate::metrics::metrics()
        .counters
        .catch_up_entries
        .load(Ordering::Relaxed);
    c.heal();
    wait_until("the follower to catch up", || {
        log_end(c.broker(behind)) == 20
    })
    .await;
    let now = crate::metrics::metrics()
        .counters
        .catch_up_entries
        .load(Ordering::Relaxed);
    assert!(now > streamed, "the entries came from the leader's WAL");
    assert_eq!(
        log_start(c.broker(behind)),
        6,
        "the follower's log start is the leader's"
    );
    assert_eq!(
        kept_delete_records(c.broker(behind)),
        kept_delete_records(c.broker(now_leader)),
        "the follower keeps the same DeleteRecords entries"
    );
    // What it would serve as leader: ListOffsets earliest is its log
    // start, and a fetch below it is out of range.
    let reader = replica(c.broker(behind)).expect("replica").reader();
    assert!(reader.read(0, 1 << 20).is_err(), "deleted records served");

    // The moved log start survives the follower's restart.
    c.restart_with(behind, |_| {}).await;
    wait_until("the follower reopened", || log_end(c.broker(behind)) == 20).await;
    assert_eq!(log_start(c.broker(behind)), 6);
    c.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_preferred_replica_caught_up_across_delete_records_leads_without_them() {
    // Leader balancing on: once caught up, the preferred replica takes its
    // leadership back, so the replica caught up from the WAL is the one
    // that then answers Fetch and ListOffsets.
    let mut c = TestCluster::start(3).await;
    c.broker(1)
        .admin
        .create_topic("d", 1, 3, None, Default::default(), false)
        .await
        .expect("created");
    let behind = super::harness::settled_preferred_leader(&c, "d", 0).await;
    let ids = c.ids();
    let others: Vec<u64> = ids.iter().copied().filter(|n| *n != behind).collect();
    wait_until("every replica open", || {
        ids.iter().all(|n| log_end(c.broker(*n)) >= 0)
    })
    .await;

    c.isolate(behind);
    wait_until("a leader among the others", || {
        leader_of(c.broker(others[0]), "d", 0).is_some_and(|l| l != behind)
    })
    .await;
    let leader = leader_of(c.broker(others[0]), "d", 0).expect("leader");
    for i in 0..10u8 {
        produce(c.broker(leader), "d", 0, &[&[i]])
            .await
            .expect("acked by two");
    }
    replica(c.broker(leader))
        .expect("leader replica")
        .delete_records(Offset(6))
        .await
        .expect("deleted");
    for i in 10..20u8 {
        produce(c.broker(leader), "d", 0, &[&[i]])
            .await
            .expect("acked by two");
    }
    for n in &others {
        c.restart_with(*n, |_| {}).await;
    }
    wait_until("a leader again among the others", || {
        leader_of(c.broker(others[0]), "d", 0).is_some_and(|l| l != behind)
    })
    .await;

    c.heal();
    wait_until("the preferred replica caught up and leading", || {
        log_end(c.broker(behind)) == 20
            && ids
                .iter()
                .all(|n| leader_of(c.broker(*n), "d", 0) == Some(behind))
    })
    .await;
    let part = replica(c.broker(behind)).expect("replica");
    // ListOffsets earliest answers the log start.
    assert_eq!(part.log_start_offset(), Offset(6));
    assert!(matches!(
        part.read(Offset(0), 1 << 20),
        Err(crate::error::HelixError::OffsetOutOfRange)
    ));
    let served = part.read(Offset(6), 1 << 20).expect("read");
    let first = crate::replica::batch::parse_header(&served).expect("a batch");
    assert_eq!(first.base_offset, 6, "the first record not deleted");
    c.close().await;
}

/// DeleteRecords (and retention alike) deletes the leader's segments wholly
/// below the new log start, and with them entries a cut-off follower still
/// needs. Catch-up then starts that follower's log over at the leader's
/// first held entry (as Kafka's follower, asked for an offset below the
/// leader's log start, empties its log and fetches from there), and its
/// log start ends where the leader's is.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_follower_behind_the_leaders_deleted_segments_catches_up() {
    let mut c = TestCluster::start_with(3, false).await;
    let configs = [("segment.bytes".to_string(), "1024".to_string())].into();
    c.broker(1)
        .admin
        .create_topic("d", 1, 3, None, configs, false)
        .await
        .expect("created");
    wait_until("a leader", || leader_of(c.broker(1), "d", 0).is_some()).await;
    let leader = leader_of(c.broker(1), "d", 0).expect("leader");
    let ids = c.ids();
    let behind = *ids.iter().find(|n| **n != leader).expect("follower");
    let other = *ids
        .iter()
        .find(|n| **n != leader && **n != behind)
        .expect("third");
    wait_until("every replica open", || {
        ids.iter().all(|n| log_end(c.broker(*n)) >= 0)
    })
    .await;
    c.isolate(behind);
    // 300-byte records in 1 KiB segments: a few records per segment.
    for i in 0..20u8 {
        produce(c.broker(leader), "d", 0, &[&[i; 300]])
            .await
            .expect("acked by two");
    }
    replica(c.broker(leader))
        .expect("leader replica")
        .delete_records(Offset(9))
        .await
        .expect("deleted");
    c.restart_with(leader, |_| {}).await;
    c.restart_with(other, |_| {}).await;
    wait_until("a leader again", || {
        leader_of(c.broker(other), "d", 0).is_some_and(|l| l != behind)
    })
    .await;
    c.heal();
    // The DeleteRecords entry comes after the last record: the log end
    // may reach 20 before the log start reaches 9.
    wait_until("the follower to catch up", || {
        log_end(c.broker(behind)) == 20 && log_start(c.broker(behind)) == 9
    })
    .await;
    c.close().await;
}
