//! Catch-up from a compacted leader through the real path (ADR 0027 §5,
//! step 3): brokers in one process, real WALs and Raft, the shard's
//! catch-up pump reading the leader's WAL. Until the background cleaner
//! (step 4) exists, the leader's log is cleaned by the offline pass while
//! its broker is stopped.

use std::path::{Path, PathBuf};

use bytes::Bytes;
use helix_wal::LogConfig;
use helix_wal::batch::Batches;

use super::harness::{TestCluster, leader_of, queue, wait_until};
use crate::broker::Broker;
use crate::compact::clean::DerivedState;
use crate::compact::clean::tests::{batch_of, contents};
use crate::compact::pass::{PassSettings, clean_closed_log};

const SEGMENT_BYTES: u64 = 16 << 10;

/// The WAL directory of partition 0 of the one topic under `data_dir`.
fn wal_dir(data_dir: &Path) -> PathBuf {
    let topics = data_dir.join("topics");
    let topic = std::fs::read_dir(&topics)
        .expect("topics")
        .next()
        .expect("one topic")
        .expect("entry")
        .path();
    topic.join("0").join("wal")
}

fn clean_offline(data_dir: &Path) {
    let config = LogConfig {
        segment_bytes: SEGMENT_BYTES,
        ..LogConfig::default()
    };
    let settings = PassSettings {
        dedupe_buffer_bytes: 1 << 20,
        load_factor: 0.9,
        write_buffer_bytes: 64 << 10,
        delete_retention_ms: 86_400_000,
        now_ms: 1_000_000,
        horizon_passed: false,
    };
    let out = clean_closed_log(
        &wal_dir(data_dir),
        &config,
        i64::MAX,
        &settings,
        &DerivedState::default(),
    )
    .expect("clean");
    assert!(out.is_some(), "something to clean");
}

/// Every batch the replica of `c`'s partition 0 on `b` serves, in order.
fn batches(b: &Broker) -> Vec<Bytes> {
    let part = b.topic("c").expect("c").local(0).expect("local").clone();
    let reader = part.reader();
    let mut out = Vec::new();
    let mut at = reader.log_start_offset();
    while at < reader.next_offset() {
        let r = reader.read(at, 1 << 20).expect("read");
        if r.bytes.is_empty() {
            break;
        }
        for x in Batches::new(&r.bytes) {
            let (h, range) = x.expect("batch");
            out.push(r.bytes.slice(range));
            at = h.next_offset();
        }
    }
    out
}

fn log_end(b: &Broker) -> i64 {
    b.topic("c")
        .and_then(|t| t.local(0).ok().cloned())
        .map_or(-1, |p| p.log_end_offset().0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_follower_is_caught_up_from_a_compacted_leader_through_the_shards() {
    let mut c = TestCluster::start_with(3, false).await;
    let configs = [("segment.bytes".to_string(), SEGMENT_BYTES.to_string())].into();
    c.broker(1)
        .admin
        .create_topic("c", 1, 3, None, configs, false)
        .await
        .expect("created");
    wait_until("a leader", || leader_of(c.broker(1), "c", 0).is_some()).await;
    let leader = leader_of(c.broker(1), "c", 0).expect("leader");
    let behind = c
        .ids()
        .into_iter()
        .find(|n| *n != leader)
        .expect("follower");
    let other = c
        .ids()
        .into_iter()
        .find(|n| *n != leader && *n != behind)
        .expect("third");
    wait_until("every replica open", || {
        c.ids().iter().all(|n| log_end(c.broker(*n)) >= 0)
    })
    .await;
    c.isolate(behind);
    // 400 records over 5 keys, 200-byte values: several sealed segments,
    // most records superseded.
    let value = "v".repeat(200);
    for i in 0..400 {
        let key = format!("k{}", i % 5);
        let v = format!("{i}{value}");
        let b = Bytes::from(batch_of(0, &[(Some(&key), Some(&v))], -1));
        queue(c.broker(leader), "c", 0, b)
            .await
            .expect("acked by two");
    }
    let before = contents(&batches(c.broker(leader)));

    // Both replicas that hold the data are cleaned while stopped.
    c.restart_with(leader, clean_offline).await;
    c.restart_with(other, clean_offline).await;
    wait_until("a leader again", || {
        leader_of(c.broker(other), "c", 0).is_some_and(|l| l != behind)
    })
    .await;
    let now_leader = leader_of(c.broker(other), "c", 0).expect("leader");
    let cleaned = batches(c.broker(now_leader));
    assert!(contents(&cleaned).len() < before.len(), "records removed");

    let streamed = crate::metrics::metrics()
        .counters
        .catch_up_entries
        .load(std::sync::atomic::Ordering::Relaxed);
    c.heal();
    let want = log_end(c.broker(now_leader));
    wait_until("the follower to catch up", || {
        log_end(c.broker(behind)) == want
    })
    .await;
    let now = crate::metrics::metrics()
        .counters
        .catch_up_entries
        .load(std::sync::atomic::Ordering::Relaxed);
    assert!(now > streamed, "the entries came from the leader's WAL");
    assert_eq!(
        batches(c.broker(behind)),
        cleaned,
        "the leader's cleaned bytes"
    );
    // The latest value of each key at its original offset.
    let latest = |rs: &[(i64, Option<String>, Option<String>)]| {
        let mut m = std::collections::BTreeMap::new();
        for (o, k, v) in rs {
            m.insert(k.clone(), (*o, v.clone()));
        }
        m
    };
    assert_eq!(
        latest(&contents(&batches(c.broker(behind)))),
        latest(&before)
    );
    c.close().await;
}
