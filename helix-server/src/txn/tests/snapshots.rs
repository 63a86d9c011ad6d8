//! Snapshots of `__transaction_state`: a partition with nothing in flight
//! and enough acknowledged records writes its whole view as one entry, the
//! log before it is dropped (the harness replays from the last snapshot,
//! as the host does once it deleted the rest), and a reload from the
//! snapshot serves exactly what was live, Prepare states included.

use super::harness::{Harness, config, is_snapshot, live_log, views};
use crate::config::TxnConfig;
use crate::txn::state::TxnState;
use crate::txn::types::StatePartition;

fn snapshot_every(records: u64) -> Harness {
    Harness::with_config(TxnConfig {
        snapshot_after_records: records,
        ..config()
    })
}

/// Commits `count` transactions of `id`, markers written each time.
fn commit_many(h: &mut Harness, id: &str, count: usize) {
    let mut producer = h.init(id, None).expect("init");
    for round in 0..count {
        h.add(id, producer, &[("t", (round % 3) as i32)])
            .expect("add");
        h.end(id, producer, true).expect("end");
        h.write_markers();
        producer = h.init(id, Some(producer)).expect("bump");
    }
}

fn snapshots_of(h: &Harness, partition: StatePartition) -> usize {
    h.log
        .iter()
        .filter(|(at, entry)| *at == partition && is_snapshot(entry))
        .count()
}

#[test]
fn the_log_a_reload_reads_stays_short_however_many_transactions_commit() {
    let mut h = snapshot_every(10);
    let partition = h.coordinator.partition_for("app");
    commit_many(&mut h, "app", 100);
    let written = h.log.iter().filter(|(at, _)| *at == partition).count();
    // Init, add, prepare, complete and the next init per transaction.
    assert!(written > 300, "{written} entries written");
    assert!(snapshots_of(&h, partition) >= 30);
    let left = live_log(&h.log, partition);
    assert!(
        left.len() <= 10,
        "{} entries left after the snapshot",
        left.len()
    );
    assert!(is_snapshot(left[0]));
    let (fresh, owed) = h.replayed();
    assert!(owed.is_empty());
    assert_eq!(
        views(&fresh, h.config.state_partitions),
        views(&h.coordinator, h.config.state_partitions)
    );
}

#[test]
fn no_snapshot_below_the_threshold() {
    let mut h = snapshot_every(20_000);
    commit_many(&mut h, "app", 100);
    assert!(!h.log.iter().any(|(_, entry)| is_snapshot(entry)));
}

#[test]
fn a_snapshot_waits_until_nothing_of_its_partition_is_in_flight() {
    let mut h = snapshot_every(1);
    let partition = h.coordinator.partition_for("app");
    let producer = h.init("app", None).expect("init");
    let before = snapshots_of(&h, partition);
    h.hold = true;
    h.send(crate::txn::request::TxnRequest::AddPartitions(
        Harness::add_request("app", producer, &[("t", 0)]),
    ));
    h.tick(1);
    // Only the add is in flight: no snapshot may jump ahead of it.
    assert_eq!(h.held.len(), 1);
    assert!(!is_snapshot(&h.held[0].entry));
    h.release();
    assert_eq!(snapshots_of(&h, partition), before + 1);
    let last = h.log.last().map(|(_, entry)| entry.clone()).expect("a log");
    assert!(is_snapshot(&last), "the snapshot follows the add");
    assert_eq!(h.metadata("app").state, TxnState::Ongoing);
}

#[test]
fn a_failed_snapshot_is_proposed_again_at_the_next_tick() {
    let mut h = snapshot_every(1);
    let partition = h.coordinator.partition_for("app");
    h.hold = true;
    let request = h.init_request("app", None);
    h.send(request);
    h.acknowledge_oldest();
    assert_eq!(h.held.len(), 1);
    assert!(is_snapshot(&h.held[0].entry), "the init's snapshot is next");
    h.fail_held();
    assert_eq!(snapshots_of(&h, partition), 0);
    h.tick(1);
    assert_eq!(snapshots_of(&h, partition), 1);
    let (fresh, _) = h.replayed();
    assert_eq!(
        views(&fresh, h.config.state_partitions),
        views(&h.coordinator, h.config.state_partitions)
    );
}

#[test]
fn a_snapshot_taken_in_prepare_commit_keeps_its_markers_owed_after_a_reload() {
    let mut h = snapshot_every(1);
    let partition = h.coordinator.partition_for("app");
    let producer = h.init("app", None).expect("init");
    h.add("app", producer, &[("t", 0), ("u", 1)]).expect("add");
    h.end("app", producer, true).expect("end");
    assert_eq!(h.metadata("app").state, TxnState::PrepareCommit);
    // The PrepareCommit record was acknowledged with nothing else in
    // flight: the partition's log now starts with a snapshot holding it.
    let left = live_log(&h.log, partition);
    assert_eq!(left.len(), 1);
    assert!(is_snapshot(left[0]));
    // The coordinator dies before the markers are written.
    assert_eq!(h.markers.len(), 1);
    h.fail_over(partition, &mut || true);
    assert_eq!(h.metadata("app").state, TxnState::PrepareCommit);
    let owed = &h.markers;
    assert_eq!(owed.len(), 1, "asked again after the reload");
    assert!(owed[0].commit);
    assert_eq!(owed[0].coordinator_epoch, 9);
    assert_eq!(owed[0].partitions.len(), 2);
    h.write_markers();
    assert_eq!(h.metadata("app").state, TxnState::CompleteCommit);
    let next = h.init("app", Some(producer)).expect("bump");
    assert_eq!(next.epoch, producer.epoch + 1);
}

#[test]
fn a_snapshot_waits_until_the_log_since_the_last_is_as_long_as_the_view() {
    let mut h = snapshot_every(1);
    let partition = h.coordinator.partition_for("id-0");
    let ids: Vec<String> = (0..1_000)
        .map(|i| format!("id-{i}"))
        .filter(|id| h.coordinator.partition_for(id) == partition)
        .take(5)
        .collect();
    assert_eq!(ids.len(), 5);
    let mut producers = Vec::new();
    for id in &ids {
        producers.push(h.init(id, None).expect("init"));
    }
    // The first init is snapshotted at once; after it each init adds one
    // record and one id, so the log never catches up with the view.
    assert_eq!(snapshots_of(&h, partition), 1);
    assert_eq!(live_log(&h.log, partition).len(), 5);
    // One more record (a bump): the log since the snapshot (5 records) is
    // as long as the view (5 ids) and a snapshot follows at once.
    h.init(&ids[0], Some(producers[0])).expect("bump");
    assert_eq!(snapshots_of(&h, partition), 2);
    assert_eq!(live_log(&h.log, partition).len(), 1);
}

/// Two transactional ids of one partition keep a proposal in flight at
/// every acknowledgement. A snapshot due then waits for those in flight
/// and holds later proposals behind it, instead of never being taken.
#[test]
fn a_snapshot_due_under_a_stream_of_transactions_holds_later_ones_behind_it() {
    use crate::txn::request::TxnRequest;
    let mut h = snapshot_every(1);
    let partition = h.coordinator.partition_for("id-0");
    let ids: Vec<String> = (0..1_000)
        .map(|i| format!("id-{i}"))
        .filter(|id| h.coordinator.partition_for(id) == partition)
        .take(2)
        .collect();
    let a = h.init(&ids[0], None).expect("init");
    let b = h.init(&ids[1], None).expect("init");
    let add = |id: &str, producer, p: i32| {
        TxnRequest::AddPartitions(Harness::add_request(id, producer, &[("t", p)]))
    };
    let before = snapshots_of(&h, partition);
    h.hold = true;
    h.send(add(&ids[0], a, 0));
    h.send(add(&ids[1], b, 1));
    // The first add acknowledged, the log since the last snapshot is as
    // long as the view: a snapshot is due, the second add in flight.
    h.acknowledge_oldest();
    h.send(add(&ids[0], a, 2));
    assert_eq!(h.held.len(), 1, "the third add waits behind the snapshot");
    h.acknowledge_oldest();
    assert_eq!(h.held.len(), 2);
    assert!(is_snapshot(&h.held[0].entry), "the snapshot goes first");
    assert!(!is_snapshot(&h.held[1].entry), "the third add follows it");
    h.release();
    assert_eq!(snapshots_of(&h, partition), before + 1);
    assert_eq!(
        live_log(&h.log, partition).len(),
        2,
        "the snapshot and the third add"
    );
    assert_eq!(h.metadata(&ids[0]).partitions.len(), 2);
    assert_eq!(h.metadata(&ids[1]).partitions.len(), 1);
    let (fresh, _) = h.replayed();
    assert_eq!(
        views(&fresh, h.config.state_partitions),
        views(&h.coordinator, h.config.state_partitions)
    );
}
