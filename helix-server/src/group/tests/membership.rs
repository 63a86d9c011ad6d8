//! Joining, syncing, heartbeats, leaving, expiry, static membership and
//! fencing, as multi-member scripts.

use bytes::Bytes;

use super::harness::*;
use crate::group::GroupConfig;

const REBALANCE_IN_PROGRESS: i16 = 27;
const UNKNOWN_MEMBER_ID: i16 = 25;
const ILLEGAL_GENERATION: i16 = 22;
const FENCED_INSTANCE_ID: i16 = 82;
const INCONSISTENT_GROUP_PROTOCOL: i16 = 23;

fn range() -> Vec<(&'static str, Bytes)> {
    vec![("range", subscription(&["orders"]))]
}

#[test]
fn first_join_at_v4_requires_a_member_id_then_leads_a_stable_group() {
    let mut h = Harness::new(config());
    let (member, generation) = stable_single(&mut h, "g");
    assert_eq!(generation, 1);
    assert_eq!(h.heartbeat("g", &member, generation), 0);
    let described = h.describe("g");
    assert_eq!(described.group_state.as_str(), "Stable");
    assert_eq!(described.protocol_data.as_str(), "range");
    assert_eq!(described.members.len(), 1);
    assert_eq!(described.members[0].member_assignment.as_ref(), b"all");
}

#[test]
fn join_before_v4_is_admitted_without_member_id_round_trip() {
    let mut h = Harness::new(config());
    let token = h.join(3, "g", "", None, &range());
    let answer = h.join_response(token);
    assert_eq!(answer.error_code, 0);
    assert_eq!(answer.generation_id, 1);
    assert_eq!(
        answer.members.len(),
        1,
        "the leader gets every subscription"
    );
}

#[test]
fn three_members_rebalance_then_two_after_one_leaves() {
    let mut h = Harness::new(config());
    let (a, gen1) = stable_single(&mut h, "g");

    // B and C arrive: the join phase waits for A to rejoin.
    let (b, join_b) = h.join_new("g", &range());
    let (c, join_c) = h.join_new("g", &range());
    assert!(!h.answered(join_b) && !h.answered(join_c));
    assert_eq!(h.heartbeat("g", &a, gen1), REBALANCE_IN_PROGRESS);
    let join_a = h.join(7, "g", &a, None, &range());

    let (ra, rb, rc) = (
        h.join_response(join_a),
        h.join_response(join_b),
        h.join_response(join_c),
    );
    let gen2 = ra.generation_id;
    assert_eq!(gen2, gen1 + 1);
    assert_eq!((rb.generation_id, rc.generation_id), (gen2, gen2));
    assert_eq!(ra.leader.as_str(), a);
    assert_eq!(ra.members.len(), 3, "leader sees all three subscriptions");
    assert!(
        rb.members.is_empty() && rc.members.is_empty(),
        "followers see none"
    );
    assert_eq!(ra.members[0].metadata, subscription(&["orders"]));

    // Followers sync first and wait for the leader's assignment.
    let sync_b = h.sync(4, "g", &b, gen2, &[]);
    let sync_c = h.sync(4, "g", &c, gen2, &[]);
    assert!(!h.answered(sync_b) && !h.answered(sync_c));
    assert_eq!(
        h.heartbeat("g", &b, gen2),
        0,
        "heartbeats are fine while syncing"
    );
    let sync_a = h.sync(
        4,
        "g",
        &a,
        gen2,
        &[(&a, b"p0p1"), (&b, b"p2p3"), (&c, b"p4p5")],
    );
    assert_eq!(h.sync_response(sync_a).assignment.as_ref(), b"p0p1");
    assert_eq!(h.sync_response(sync_b).assignment.as_ref(), b"p2p3");
    assert_eq!(h.sync_response(sync_c).assignment.as_ref(), b"p4p5");
    assert_eq!(h.describe("g").group_state.as_str(), "Stable");

    // C leaves: A and B rejoin into generation 3 of two members.
    let left = h.leave("g", &c);
    assert_eq!(left.error_code, 0);
    assert_eq!(left.members[0].error_code, 0);
    assert_eq!(h.heartbeat("g", &a, gen2), REBALANCE_IN_PROGRESS);
    let join_a = h.join(7, "g", &a, None, &range());
    assert!(!h.answered(join_a));
    let join_b = h.join(7, "g", &b, None, &range());
    let ra = h.join_response(join_a);
    assert_eq!(ra.generation_id, gen2 + 1);
    assert_eq!(ra.members.len(), 2);
    assert_eq!(h.join_response(join_b).generation_id, gen2 + 1);
    assert_eq!(h.heartbeat("g", &c, gen2 + 1), UNKNOWN_MEMBER_ID);
    assert_eq!(h.heartbeat("g", &a, gen2), ILLEGAL_GENERATION);
}

#[test]
fn silent_member_expires_after_session_timeout_and_the_rest_rebalance() {
    let mut h = Harness::new(config());
    let (a, gen1) = stable_single(&mut h, "g");
    let (b, join_b) = h.join_new("g", &range());
    let join_a = h.join(7, "g", &a, None, &range());
    let gen2 = h.join_response(join_a).generation_id;
    assert_eq!(h.join_response(join_b).generation_id, gen2);
    let sync_a = h.sync(4, "g", &a, gen2, &[(&a, b"x"), (&b, b"y")]);
    let sync_b = h.sync(4, "g", &b, gen2, &[]);
    assert_eq!(h.sync_response(sync_b).assignment.as_ref(), b"y");
    assert!(h.answered(sync_a));
    assert!(gen2 > gen1);

    // B stops heartbeating; A keeps going.
    for _ in 0..3 {
        h.advance(4_000);
        if h.heartbeat("g", &a, gen2) != 0 {
            break;
        }
    }
    assert_eq!(
        h.heartbeat("g", &a, gen2),
        REBALANCE_IN_PROGRESS,
        "B's expiry started a rebalance"
    );
    let join_a = h.join(7, "g", &a, None, &range());
    let answer = h.join_response(join_a);
    assert_eq!(answer.generation_id, gen2 + 1);
    assert_eq!(answer.members.len(), 1);
    assert_eq!(h.heartbeat("g", &b, gen2), UNKNOWN_MEMBER_ID);
}

#[test]
fn member_that_does_not_rejoin_in_time_is_dropped_at_the_rebalance_timeout() {
    let mut h = Harness::new(config());
    let (a, _) = stable_single(&mut h, "g");
    let (_b, join_b) = h.join_new("g", &range());
    // A never rejoins; the join phase ends at A's rebalance timeout.
    h.advance(REBALANCE_MS as u64);
    let answer = h.join_response(join_b);
    assert_eq!(answer.error_code, 0);
    assert_eq!(answer.members.len(), 1, "B leads alone");
    assert_eq!(h.heartbeat("g", &a, 1), UNKNOWN_MEMBER_ID);
}

#[test]
fn follower_that_never_syncs_is_removed_at_the_rebalance_timeout() {
    let mut h = Harness::new(config());
    let (a, _) = stable_single(&mut h, "g");
    let (b, join_b) = h.join_new("g", &range());
    let join_a = h.join(7, "g", &a, None, &range());
    let generation = h.join_response(join_a).generation_id;
    assert!(h.answered(join_b));
    h.sync(4, "g", &a, generation, &[(&a, b"x"), (&b, b"y")]);
    for _ in 0..((REBALANCE_MS / 5_000) + 1) {
        h.advance(5_000);
        h.heartbeat("g", &a, generation);
    }
    assert_eq!(h.heartbeat("g", &b, generation), UNKNOWN_MEMBER_ID);
}

#[test]
fn static_member_restart_gets_its_assignment_back_without_a_rebalance() {
    let mut h = Harness::new(config());
    let first = h.join(7, "g", "", Some("worker-1"), &range());
    let s1 = h.join_response(first).member_id.to_string();
    let second = h.join(7, "g", "", Some("worker-2"), &range());
    assert!(!h.answered(second));
    let rejoin = h.join(7, "g", &s1, Some("worker-1"), &range());
    let generation = h.join_response(rejoin).generation_id;
    let s2 = h.join_response(second).member_id.to_string();
    h.sync(4, "g", &s1, generation, &[(&s1, b"a"), (&s2, b"b")]);
    let sync2 = h.sync(4, "g", &s2, generation, &[]);
    assert_eq!(h.sync_response(sync2).assignment.as_ref(), b"b");

    // worker-2 restarts: it joins without its member id.
    let restarted = h.join(7, "g", "", Some("worker-2"), &range());
    let answer = h.join_response(restarted);
    assert_eq!(answer.error_code, 0);
    assert_eq!(answer.generation_id, generation, "no new generation");
    let new_id = answer.member_id.to_string();
    assert_ne!(new_id, s2);
    let sync = h.sync(4, "g", &new_id, generation, &[]);
    assert_eq!(
        h.sync_response(sync).assignment.as_ref(),
        b"b",
        "same assignment"
    );
    assert_eq!(
        h.heartbeat("g", &s1, generation),
        0,
        "the other member saw no rebalance"
    );
    assert_eq!(h.describe("g").group_state.as_str(), "Stable");

    // The old incarnation is fenced.
    let stale = h.join(7, "g", &s2, Some("worker-2"), &range());
    assert_eq!(h.join_response(stale).error_code, FENCED_INSTANCE_ID);
}

/// Issue 30 item 6: the first generation's assignment is still being
/// stored when a second member joins; the next generation's assignment is
/// proposed, and the old one's acknowledgement arrives after that. Both
/// members' SyncGroups must be answered (the old acknowledgement used to
/// drop the new generation's assignment in flight, and the SyncGroups of
/// two static librdkafka consumers waited for their 9-s request timeout).
#[test]
fn an_old_generations_late_assignment_does_not_swallow_the_current_one() {
    let mut h = Harness::new(config());
    let first = h.join(5, "g", "", Some("consumer1"), &range());
    let c1 = h.join_response(first).member_id.to_string();
    let gen1 = h.join_response(first).generation_id;
    h.hold = true;
    let old_sync = h.sync(3, "g", &c1, gen1, &[(&c1, b"all")]);
    assert_eq!(h.held.len(), 1, "the first assignment is being stored");
    let second = h.join(5, "g", "", Some("consumer2"), &range());
    assert_eq!(h.sync_response(old_sync).error_code, REBALANCE_IN_PROGRESS);
    let rejoin = h.join(5, "g", &c1, Some("consumer1"), &range());
    let gen2 = h.join_response(rejoin).generation_id;
    let c2 = h.join_response(second).member_id.to_string();
    assert_eq!(gen2, gen1 + 1);
    let sync1 = h.sync(3, "g", &c1, gen2, &[(&c1, b"a"), (&c2, b"b")]);
    let sync2 = h.sync(3, "g", &c2, gen2, &[]);
    assert_eq!(h.held.len(), 2, "the second assignment is proposed too");
    h.release();
    assert_eq!(h.sync_response(sync1).assignment.as_ref(), b"a");
    assert_eq!(h.sync_response(sync2).assignment.as_ref(), b"b");
    assert_eq!(h.describe("g").group_state.as_str(), "Stable");
}

#[test]
fn static_leader_restart_at_v9_is_told_to_skip_assignment() {
    let mut h = Harness::new(config());
    let first = h.join(9, "g", "", Some("w"), &range());
    let id = h.join_response(first).member_id.to_string();
    assert_eq!(h.join_response(first).leader.as_str(), id);
    h.sync(5, "g", &id, 1, &[(&id, b"a")]);
    let again = h.join(9, "g", "", Some("w"), &range());
    let answer = h.join_response(again);
    assert!(answer.skip_assignment);
    assert_eq!(answer.leader, answer.member_id);
    assert_eq!(answer.members.len(), 1);
}

#[test]
fn protocol_is_chosen_by_votes_among_protocols_all_members_support() {
    let mut h = Harness::new(config());
    let both = vec![
        ("range", Bytes::from_static(b"r")),
        ("roundrobin", Bytes::from_static(b"rr")),
    ];
    let only_rr = vec![("roundrobin", Bytes::from_static(b"rr2"))];
    let (a, join_a) = h.join_new("g", &both);
    let generation = h.join_response(join_a).generation_id;
    h.sync(4, "g", &a, generation, &[(&a, b"x")]);
    let (_b, join_b) = h.join_new("g", &only_rr);
    let join_a = h.join(7, "g", &a, None, &both);
    let answer = h.join_response(join_a);
    assert_eq!(
        answer.protocol_name.as_ref().map(|p| p.as_str()),
        Some("roundrobin")
    );
    assert_eq!(
        h.join_response(join_b)
            .protocol_name
            .as_ref()
            .map(|p| p.as_str()),
        Some("roundrobin")
    );
    let metadata: Vec<&[u8]> = answer.members.iter().map(|m| m.metadata.as_ref()).collect();
    assert!(metadata.contains(&b"rr".as_ref()) && metadata.contains(&b"rr2".as_ref()));

    // A member with no protocol in common is refused.
    let stranger = h.join(7, "g", "", None, &[("sticky", Bytes::new())]);
    assert_eq!(
        h.join_response(stranger).error_code,
        INCONSISTENT_GROUP_PROTOCOL
    );
}

#[test]
fn sync_and_heartbeat_from_strangers_and_stale_generations_are_refused() {
    let mut h = Harness::new(config());
    let (a, generation) = stable_single(&mut h, "g");
    let stranger = h.sync(4, "g", "nobody", generation, &[]);
    assert_eq!(h.sync_response(stranger).error_code, UNKNOWN_MEMBER_ID);
    let stale = h.sync(4, "g", &a, generation + 5, &[]);
    assert_eq!(h.sync_response(stale).error_code, ILLEGAL_GENERATION);
    let unknown_group = h.sync(4, "other", &a, generation, &[]);
    assert_eq!(h.sync_response(unknown_group).error_code, UNKNOWN_MEMBER_ID);
    assert_eq!(h.heartbeat("g", "nobody", generation), UNKNOWN_MEMBER_ID);
    // The group is untouched.
    assert_eq!(h.heartbeat("g", &a, generation), 0);
    assert_eq!(h.describe("g").group_state.as_str(), "Stable");
}

#[test]
fn initial_rebalance_delay_holds_the_first_join_phase_open() {
    let mut h = Harness::new(GroupConfig {
        initial_rebalance_delay_ms: 3_000,
        ..config()
    });
    let (_a, join_a) = h.join_new("g", &range());
    assert!(!h.answered(join_a));
    h.advance(1_000);
    let (_b, join_b) = h.join_new("g", &range());
    h.advance(2_000);
    // B arrived during the delay: the phase is extended once more.
    assert!(!h.answered(join_a));
    h.advance(3_000);
    let answer = h.join_response(join_a);
    assert_eq!(answer.generation_id, 1);
    assert_eq!(answer.members.len(), 2);
    assert_eq!(h.join_response(join_b).generation_id, 1);
}

#[test]
fn pending_member_id_that_never_returns_expires_and_unblocks_the_join() {
    let mut h = Harness::new(config());
    let (a, generation) = stable_single(&mut h, "g");
    let first = h.join(7, "g", "", None, &range());
    assert_eq!(h.join_response(first).error_code, 79);
    // A rebalance for another reason: A's rejoin with new metadata.
    let join_a = h.join(
        7,
        "g",
        &a,
        None,
        &[("range", subscription(&["orders", "more"]))],
    );
    assert!(!h.answered(join_a), "waits for the pending member id");
    h.advance(SESSION_MS as u64);
    assert_eq!(h.join_response(join_a).generation_id, generation + 1);
}

#[test]
fn last_member_leaving_empties_the_group_in_a_new_generation_that_is_stored() {
    let mut h = Harness::new(config());
    let (a, generation) = stable_single(&mut h, "g");
    let entries = h.log.len();
    assert_eq!(h.leave("g", &a).members[0].error_code, 0);
    let described = h.describe("g");
    assert_eq!(described.group_state.as_str(), "Empty");
    assert_eq!(
        described.protocol_type.as_str(),
        "consumer",
        "an empty consumer group stays one"
    );
    assert_eq!(h.log.len(), entries + 1, "the empty generation is recorded");
    let stored = h
        .coordinator
        .shards
        .values()
        .find_map(|s| s.groups.get("g"))
        .and_then(|g| g.stored.clone());
    let stored = stored.expect("stored record");
    assert_eq!(
        (stored.generation, stored.members.len()),
        (generation + 1, 0)
    );
    assert_eq!(h.leave("g", &a).members[0].error_code, UNKNOWN_MEMBER_ID);
    let unknown_group = h.leave("nope", &a);
    assert_eq!(
        (
            unknown_group.error_code,
            unknown_group.members[0].error_code
        ),
        (0, UNKNOWN_MEMBER_ID)
    );
}
