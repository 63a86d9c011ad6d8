//! Loading after a failover: replaying the acknowledged log rebuilds
//! exactly the live view, at every prefix, with or without snapshots
//! (replay then starts at the last one), and a transaction found in a
//! Prepare state asks for its markers again.

use super::harness::{Harness, views};
use crate::txn::error::TxnError;
use crate::txn::metadata::TxnMetadata;
use crate::txn::record::{Record, encode_entry};
use crate::txn::state::TxnState;

/// Several transactional ids through most of their states: committed,
/// aborted, fenced mid-transaction with markers outstanding, KIP-360
/// continued, timed out, open, with a failed proposal in between.
fn story() -> Harness {
    story_with(crate::config::TxnConfig::default().snapshot_after_records)
}

/// [`story`] with a snapshot every `snapshot_after_records` records.
fn story_with(snapshot_after_records: u64) -> Harness {
    let mut h = Harness::with_config(crate::config::TxnConfig {
        snapshot_after_records,
        ..super::harness::config()
    });
    h.tick(0);
    let ids = ["alpha", "beta", "gamma", "delta", "epsilon", "zeta"];
    let mut producers = Vec::new();
    for id in ids {
        producers.push(h.init(id, None).unwrap());
    }
    let [alpha, beta, gamma, delta, epsilon, _zeta] = producers[..] else {
        unreachable!("six producers")
    };
    h.add("alpha", alpha, &[("t", 0), ("t", 1)]).unwrap();
    h.add_offsets("alpha", alpha, "group").unwrap();
    h.end("alpha", alpha, true).unwrap();
    h.write_markers();

    h.add("beta", beta, &[("u", 0)]).unwrap();
    h.end("beta", beta, false).unwrap();
    h.write_markers();
    let beta_next = h.init("beta", Some(beta)).unwrap();

    // Times out, is aborted with its producer fenced, completes.
    h.add("epsilon", epsilon, &[("x", 0)]).unwrap();
    h.tick(super::harness::TIMEOUT_MS as u64 + 1);
    h.write_markers();

    h.add("beta", beta_next, &[("u", 1)]).unwrap();

    h.add("gamma", gamma, &[("v", 0)]).unwrap();
    // A fencing InitProducerId: markers asked for, never reported.
    assert!(h.init("gamma", None).is_err());
    h.markers.clear();

    // A failed add, then one that succeeds.
    h.hold = true;
    h.send(crate::txn::request::TxnRequest::AddPartitions(
        Harness::add_request("delta", delta, &[("w", 0)]),
    ));
    h.fail_held();
    h.add("delta", delta, &[("w", 0)]).unwrap();
    // Its markers are still being written.
    h.end("delta", delta, true).unwrap();
    h
}

/// Snapshot thresholds the replay tests run with: never, after every
/// record, every few records.
const SNAPSHOT_EVERY: [u64; 3] = [20_000, 1, 3];

#[test]
fn replaying_the_acknowledged_log_rebuilds_the_live_view() {
    for every in SNAPSHOT_EVERY {
        let h = story_with(every);
        let live = views(&h.coordinator, h.config.state_partitions);
        let (fresh, _) = h.replayed();
        assert_eq!(
            views(&fresh, h.config.state_partitions),
            live,
            "snapshot every {every}"
        );
        let snapshots = h
            .log
            .iter()
            .filter(|(_, e)| super::harness::is_snapshot(e))
            .count();
        assert_eq!(snapshots > 0, every < 20_000, "snapshot every {every}");
    }
    let h = story();
    let states: Vec<TxnState> = ["alpha", "beta", "gamma", "delta", "epsilon", "zeta"]
        .iter()
        .map(|id| h.metadata(id).state)
        .collect();
    assert_eq!(
        states,
        [
            TxnState::CompleteCommit,
            TxnState::Ongoing,
            TxnState::PrepareAbort,
            TxnState::PrepareCommit,
            TxnState::CompleteAbort,
            TxnState::Empty,
        ]
    );
}

#[test]
fn replaying_every_prefix_of_the_log_rebuilds_the_view_acknowledged_at_that_point() {
    for every in SNAPSHOT_EVERY {
        let h = story_with(every);
        assert_eq!(h.history.len(), h.log.len());
        for length in 1..=h.log.len() {
            let (fresh, _) = h.replayed_prefix(length);
            assert_eq!(
                views(&fresh, h.config.state_partitions),
                h.history[length - 1],
                "prefix of {length} entries, snapshot every {every}"
            );
        }
    }
}

#[test]
fn a_transaction_in_prepare_on_load_asks_for_its_markers_again() {
    for every in SNAPSHOT_EVERY {
        prepare_states_ask_for_their_markers_after_a_reload(every);
    }
}

fn prepare_states_ask_for_their_markers_after_a_reload(every: u64) {
    let h = story_with(every);
    let (mut fresh, markers) = h.replayed();
    let owed: Vec<(&str, bool, i32)> = markers
        .iter()
        .map(|m| (m.transactional_id.as_str(), m.commit, m.coordinator_epoch))
        .collect();
    let mut owed_sorted = owed.clone();
    owed_sorted.sort();
    assert_eq!(owed_sorted, vec![("delta", true, 3), ("gamma", false, 3)]);
    let delta = markers
        .iter()
        .find(|m| m.transactional_id == "delta")
        .expect("delta's markers");
    assert_eq!(
        delta.partitions,
        vec![crate::txn::types::TopicPartition::new("w", 0)]
    );

    // The new coordinator completes them when they are written.
    for marker in &markers {
        fresh.on_markers_written(
            marker.partition,
            &marker.transactional_id,
            marker.producer_id,
            marker.epoch,
            h.now,
        );
    }
    let ready = fresh.take_ready();
    assert_eq!(ready.proposals.len(), 2);
    for proposal in ready.proposals {
        fresh.on_acknowledged(proposal.id);
    }
    assert_eq!(
        fresh.transaction("delta").map(|m| m.state),
        Some(TxnState::CompleteCommit)
    );
    assert_eq!(
        fresh.transaction("gamma").map(|m| m.state),
        Some(TxnState::CompleteAbort)
    );
}

#[test]
fn a_garbage_entry_is_refused_on_replay_and_changes_nothing() {
    let h = story();
    let (_, entry) = h.log.last().cloned().expect("a log");
    let partition = h.log.last().map(|(p, _)| *p).expect("a log");
    let mut fresh = crate::txn::coordinator::Coordinator::new(h.config.clone());
    fresh.begin_load(partition);
    fresh.replay(partition, &entry).unwrap();
    let before = fresh.view(partition).cloned();
    let mut garbage = entry.to_vec();
    let last = garbage.len() - 1;
    garbage[last] ^= 0x40;
    assert_eq!(
        fresh.replay(partition, &garbage),
        Err(TxnError::RecordChecksum)
    );
    assert!(fresh.replay(partition, &entry[..entry.len() / 2]).is_err());
    assert_eq!(fresh.view(partition).cloned(), before);
}

#[test]
fn replay_is_refused_outside_loading() {
    let mut h = Harness::new();
    let partition = h.coordinator.partition_for("app");
    let record = Record::Metadata {
        transactional_id: "app".into(),
        metadata: TxnMetadata::fresh(1, 1_000, 0),
    };
    let entry = encode_entry(&[record]);
    assert_eq!(
        h.coordinator.replay(partition, &entry),
        Err(TxnError::NotCoordinator)
    );
    h.coordinator.unload(partition);
    assert_eq!(
        h.coordinator.replay(partition, &entry),
        Err(TxnError::NotCoordinator)
    );
}

#[test]
fn unloading_answers_every_waiting_request_not_coordinator() {
    let mut h = Harness::new();
    h.hold = true;
    let request = h.init_request("app", None);
    let token = h.send(request);
    let partition = h.coordinator.partition_for("app");
    h.coordinator.unload(partition);
    h.pump();
    assert_eq!(
        h.answer(token),
        crate::txn::response::Answer::InitProducerId(Err(TxnError::NotCoordinator))
    );
    // The held proposal's outcome arrives late and changes nothing.
    h.release();
    assert_eq!(h.coordinator.view(partition), None);
}
