//! Offsets in transactions: a TxnOffsetCommit's offsets stay pending
//! (invisible to OffsetFetch, UNSTABLE_OFFSET_COMMIT with require_stable)
//! until the producer's marker lands in the group's partition; COMMIT makes
//! them committed, ABORT drops them, in Kafka's log-order rule against
//! plain commits; and a coordinator replaying the log (markers included)
//! holds exactly what the live one does.

use std::collections::BTreeMap;

use kafka_protocol::messages::*;

use super::harness::*;
use crate::group::classic::CommittedOffset;
use crate::group::{Coordinator, CoordinatorPartition, GroupConfig, GroupResponse, LoggedEntry};

const UNSTABLE_OFFSET_COMMIT: i16 = 88;
const ILLEGAL_GENERATION: i16 = 22;
const UNKNOWN_MEMBER_ID: i16 = 25;
const P: i64 = 7;
const Q: i64 = 8;

type Pending = BTreeMap<i64, BTreeMap<(String, i32), (i64, bool)>>;
type View = BTreeMap<String, (BTreeMap<(String, i32), CommittedOffset>, Pending)>;

/// Committed and pending offsets of every group holding any.
fn view(coordinator: &Coordinator) -> View {
    coordinator
        .shards
        .values()
        .flat_map(|shard| shard.groups.values())
        .filter(|g| !g.offsets.is_empty() || !g.pending_txn.is_empty())
        .map(|g| {
            let pending = g
                .pending_txn
                .iter()
                .map(|(producer, offsets)| {
                    let offsets = offsets
                        .iter()
                        .map(|(k, p)| (k.clone(), (p.committed.offset, p.superseded)))
                        .collect();
                    (*producer, offsets)
                })
                .collect();
            (g.id.clone(), (g.offsets.clone(), pending))
        })
        .collect()
}

/// A fresh coordinator that replays the harness's whole log, markers
/// included, as a new leader does.
fn replayed(h: &Harness) -> Coordinator {
    let partitions = config().coordinator_partitions;
    let mut fresh = Coordinator::new(config());
    for p in 0..partitions {
        fresh.begin_load(CoordinatorPartition(p));
    }
    let mut next: BTreeMap<CoordinatorPartition, i64> = BTreeMap::new();
    for (partition, logged) in &h.logged {
        let at = next.entry(*partition).or_default();
        let entry = match logged {
            Logged::Records(entry, producer) => LoggedEntry::Records {
                entry,
                producer: *producer,
            },
            Logged::Marker(producer_id, commit) => LoggedEntry::Marker {
                producer_id: *producer_id,
                commit: *commit,
            },
        };
        fresh
            .replay_at(*partition, *at, entry, h.now)
            .expect("logged entries replay");
        *at += 1;
    }
    for p in 0..partitions {
        fresh.finish_load(CoordinatorPartition(p), 2, h.now);
    }
    fresh
}

fn partition_of(h: &Harness, group: &str) -> CoordinatorPartition {
    h.coordinator.partition_for(group)
}

fn codes(h: &Harness, token: crate::group::RequestToken) -> Vec<i16> {
    match h.response(token) {
        GroupResponse::TxnOffsetCommit(r) => r
            .topics
            .iter()
            .flat_map(|t| t.partitions.iter().map(|p| p.error_code))
            .collect(),
        other => panic!("{other:?}"),
    }
}

/// (offset, error) of `topic`-0 by OffsetFetch v7 with `require_stable`.
fn fetch(h: &mut Harness, group: &str, require_stable: bool) -> (i64, i16) {
    let t = offset_fetch_request::OffsetFetchRequestTopic::default()
        .with_name(TopicName(s("t")))
        .with_partition_indexes(vec![0]);
    let request = OffsetFetchRequest::default()
        .with_group_id(GroupId(s(group)))
        .with_topics(Some(vec![t]))
        .with_require_stable(require_stable);
    let token = h.send(7, crate::group::GroupRequest::OffsetFetch(request));
    match h.response(token) {
        GroupResponse::OffsetFetch(r) => {
            let p = &r.topics[0].partitions[0];
            (p.committed_offset, p.error_code)
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn pending_offsets_are_invisible_until_the_commit_marker() {
    let mut h = Harness::new(config());
    h.commit("g", "", -1, "t", 0, 3);
    let token = h.txn_commit(3, "g", P, "", -1, "t", 0, 10);
    assert_eq!(codes(&h, token), vec![0]);
    assert_eq!(fetch(&mut h, "g", false), (3, 0), "the last committed");
    assert_eq!(fetch(&mut h, "g", true), (-1, UNSTABLE_OFFSET_COMMIT));
    // A retried TxnOffsetCommit is no error and changes nothing.
    let again = h.txn_commit(3, "g", P, "", -1, "t", 0, 10);
    assert_eq!(codes(&h, again), vec![0]);
    h.marker(partition_of(&h, "g"), P, true);
    assert_eq!(fetch(&mut h, "g", false), (10, 0));
    assert_eq!(fetch(&mut h, "g", true), (10, 0));
}

#[test]
fn an_abort_marker_drops_pending_offsets() {
    let mut h = Harness::new(config());
    h.commit("g", "", -1, "t", 0, 3);
    h.txn_commit(3, "g", P, "", -1, "t", 0, 10);
    h.marker(partition_of(&h, "g"), P, false);
    assert_eq!(fetch(&mut h, "g", true), (3, 0));
    // A later commit marker of the same producer finds nothing.
    h.marker(partition_of(&h, "g"), P, true);
    assert_eq!(fetch(&mut h, "g", true), (3, 0));
}

#[test]
fn a_marker_for_a_producer_with_nothing_pending_changes_nothing() {
    let mut h = Harness::new(config());
    h.commit("g", "", -1, "t", 0, 3);
    let before = view(&h.coordinator);
    h.marker(partition_of(&h, "g"), Q, true);
    h.marker(partition_of(&h, "g"), Q, false);
    assert_eq!(view(&h.coordinator), before);
}

#[test]
fn a_plain_commit_after_a_pending_one_wins_as_in_kafka() {
    let mut h = Harness::new(config());
    h.txn_commit(3, "g", P, "", -1, "t", 0, 10);
    h.commit("g", "", -1, "t", 0, 20);
    h.marker(partition_of(&h, "g"), P, true);
    assert_eq!(fetch(&mut h, "g", true), (20, 0));
}

#[test]
fn of_two_transactions_the_later_appended_offset_wins() {
    let mut h = Harness::new(config());
    let partition = partition_of(&h, "g");
    // Q appended after P; Q commits first: P's earlier offset loses.
    h.txn_commit(3, "g", P, "", -1, "t", 0, 10);
    h.txn_commit(3, "g", Q, "", -1, "t", 0, 20);
    h.marker(partition, Q, true);
    h.marker(partition, P, true);
    assert_eq!(fetch(&mut h, "g", true), (20, 0));
    // P appended after Q this time; P commits last and wins.
    h.txn_commit(3, "g", Q, "", -1, "t", 0, 30);
    h.txn_commit(3, "g", P, "", -1, "t", 0, 40);
    h.marker(partition, Q, true);
    h.marker(partition, P, true);
    assert_eq!(fetch(&mut h, "g", true), (40, 0));
}

#[test]
fn member_generation_and_instance_are_checked_from_v3() {
    let mut h = Harness::new(config());
    let (member, generation) = stable_single(&mut h, "g");
    let ok = h.txn_commit(3, "g", P, &member, generation, "t", 0, 5);
    assert_eq!(codes(&h, ok), vec![0]);
    let stale = h.txn_commit(3, "g", P, &member, generation + 1, "t", 0, 5);
    assert_eq!(codes(&h, stale), vec![ILLEGAL_GENERATION]);
    let ghost = h.txn_commit(3, "g", P, "ghost", generation, "t", 0, 5);
    assert_eq!(codes(&h, ghost), vec![UNKNOWN_MEMBER_ID]);
    // v0-v2 carry no member: a transactional commit into a non-empty
    // group is accepted (Kafka's `isTransactional` exception).
    let old = h.txn_commit(2, "g", P, "", -1, "t", 0, 5);
    assert_eq!(codes(&h, old), vec![0]);
    // A group that does not exist is created Empty, as for simple commits.
    let fresh = h.txn_commit(0, "new-group", P, "", -1, "t", 0, 5);
    assert_eq!(codes(&h, fresh), vec![0]);
}

#[test]
fn a_replayed_log_holds_what_the_live_coordinator_holds() {
    let mut h = Harness::new(config());
    let check = |h: &Harness| assert_eq!(view(&replayed(h)), view(&h.coordinator));
    for group in ["g", "h", "k"] {
        let partition = partition_of(&h, group);
        h.commit(group, "", -1, "t", 0, 1);
        check(&h);
        h.txn_commit(3, group, P, "", -1, "t", 0, 10);
        h.txn_commit(3, group, Q, "", -1, "t", 0, 11);
        check(&h);
        h.commit(group, "", -1, "t", 0, 12);
        h.marker(partition, P, true);
        check(&h);
        h.txn_commit(3, group, P, "", -1, "t", 1, 13);
        h.marker(partition, Q, false);
        check(&h);
    }
    // Failover with P's last offsets still pending: the new leader holds
    // them pending, and P's commit marker ends them there.
    let mut failed_over = Harness::new(config());
    failed_over.coordinator = replayed(&h);
    failed_over.logged = h.logged.clone();
    let partition = partition_of(&failed_over, "g");
    let stable = |h: &mut Harness| {
        let t = offset_fetch_request::OffsetFetchRequestTopic::default()
            .with_name(TopicName(s("t")))
            .with_partition_indexes(vec![1]);
        let request = OffsetFetchRequest::default()
            .with_group_id(GroupId(s("g")))
            .with_topics(Some(vec![t]))
            .with_require_stable(true);
        let token = h.send(7, crate::group::GroupRequest::OffsetFetch(request));
        match h.response(token) {
            GroupResponse::OffsetFetch(r) => {
                let p = &r.topics[0].partitions[0];
                (p.committed_offset, p.error_code)
            }
            other => panic!("{other:?}"),
        }
    };
    assert_eq!(stable(&mut failed_over), (-1, UNSTABLE_OFFSET_COMMIT));
    failed_over.marker(partition, P, true);
    assert_eq!(stable(&mut failed_over), (13, 0));
}

#[test]
fn no_snapshot_is_taken_while_offsets_are_pending() {
    let config = GroupConfig {
        snapshot_after_records: 1,
        ..config()
    };
    let mut h = Harness::new(config);
    let partition = partition_of(&h, "g");
    h.commit("g", "", -1, "t", 0, 1);
    h.txn_commit(3, "g", P, "", -1, "t", 0, 10);
    let before = h.snapshots.len();
    h.advance(1_000);
    h.advance(1_000);
    assert_eq!(h.snapshots.len(), before, "pending offsets hold snapshots");
    h.marker(partition, P, true);
    h.advance(1_000);
    assert!(h.snapshots.len() > before, "a snapshot follows the marker");
    assert_eq!(fetch(&mut h, "g", true), (10, 0));
}

#[test]
fn a_deleted_group_loses_its_pending_offsets_and_the_marker_ends_nothing() {
    let mut h = Harness::new(config());
    let partition = partition_of(&h, "g");
    h.commit("g", "", -1, "t", 0, 1);
    h.txn_commit(3, "g", P, "", -1, "t", 0, 10);
    let deleted = h.delete_groups(&["g"]);
    assert_eq!(h.delete_codes(deleted), vec![0]);
    h.marker(partition, P, true);
    assert_eq!(fetch(&mut h, "g", true), (-1, 0));
    assert_eq!(view(&replayed(&h)), view(&h.coordinator));
}

#[test]
fn retention_keeps_a_group_whose_transaction_holds_offsets() {
    let config = GroupConfig {
        offsets_retention_ms: 10,
        offsets_retention_check_interval_ms: 10,
        ..config()
    };
    let mut h = Harness::new(config);
    let partition = partition_of(&h, "g");
    h.txn_commit(3, "g", P, "", -1, "t", 0, 10);
    h.advance(1_000);
    h.advance(1_000);
    h.marker(partition, P, true);
    assert_eq!(fetch(&mut h, "g", true), (10, 0));
}

#[test]
fn an_entry_the_leader_refuses_for_its_epoch_is_answered_so_and_leaves_nothing_pending() {
    let mut h = Harness::new(config());
    h.hold = true;
    let token = h.txn_commit(3, "g", P, "", -1, "t", 0, 10);
    let proposal = h.held.pop().expect("the offsets are proposed");
    assert_eq!(proposal.producer.map(|p| p.producer_id), Some(P));
    h.coordinator.on_proposal_refused(
        proposal.id,
        crate::group::GroupError::InvalidProducerEpoch,
        h.now,
    );
    h.pump();
    assert_eq!(codes(&h, token), vec![47]);
    assert_eq!(fetch(&mut h, "g", true), (-1, 0));
}
