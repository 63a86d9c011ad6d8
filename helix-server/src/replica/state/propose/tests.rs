//! When a replica decides, holds or refuses produce requests, on real Raft
//! groups driven by hand (issue 29 finding 5). Before ADR 0024 the new
//! leader that holds below refused: a refusal followed by the acceptance
//! of the same producer's next request is the gap librdkafka answers with
//! an epoch bump, which duplicates what a deposed leader stored but
//! answered NOT_LEADER.

use bytes::Bytes;
use helix_raft::{
    GroupId, LogIndex, Message, MessageBody, NodeId, RaftConfig, RaftGroup, Restored, Role,
};

use super::{Readiness, readiness};

const GROUP: GroupId = GroupId(7);

fn three() -> Vec<RaftGroup> {
    let voters = vec![NodeId(1), NodeId(2), NodeId(3)];
    voters
        .iter()
        .map(|n| {
            let restored = Restored {
                seed: n.0,
                ..Restored::default()
            };
            RaftGroup::new(GROUP, RaftConfig::new(*n, voters.clone()), restored).expect("group")
        })
        .collect()
}

/// One exchange: every group's ready work is done (appends made durable,
/// the last appended index noted in `applied`) and its messages delivered,
/// except those `cut` drops. False when nothing moved.
fn exchange(
    groups: &mut [RaftGroup],
    applied: &mut [LogIndex],
    cut: &impl Fn(&Message) -> bool,
) -> bool {
    let mut messages = Vec::new();
    for (i, g) in groups.iter_mut().enumerate() {
        if !g.has_ready() {
            continue;
        }
        let rd = g.ready();
        if let Some(last) = rd.to_apply.last() {
            applied[i] = last.index;
            g.durable_to(last.index).expect("durable");
        }
        messages.extend(rd.messages);
    }
    let moved = !messages.is_empty();
    for m in messages {
        if !cut(&m) {
            let to = usize::try_from(m.to.0 - 1).expect("node");
            groups[to].step(m).expect("step");
        }
    }
    moved
}

fn pump(groups: &mut [RaftGroup], applied: &mut [LogIndex], cut: impl Fn(&Message) -> bool) {
    for _ in 0..1000 {
        if !exchange(groups, applied, &cut) {
            return;
        }
    }
    panic!("the groups never settled");
}

fn decide(g: &RaftGroup, applied: LogIndex) -> Readiness {
    readiness(g, applied)
}

fn elect(groups: &mut [RaftGroup], applied: &mut [LogIndex], node: usize) {
    groups[node].campaign();
    pump(groups, applied, |_| false);
    assert_eq!(groups[node].role(), Role::Leader);
}

/// Node 2 leads and commits an entry that node 1 holds but does not know
/// committed (what tells it so is cut), then hands leadership to node 1.
#[test]
fn a_new_leader_holds_until_its_predecessors_entries_are_applied() {
    let mut g = three();
    let mut applied = vec![LogIndex(0); 3];
    elect(&mut g, &mut applied, 1);
    let no_commit_to_1 = |m: &Message| {
        m.from == NodeId(2)
            && m.to == NodeId(1)
            && matches!(
                m.body,
                MessageBody::Heartbeat { .. } | MessageBody::Commit { .. }
            )
    };
    let x = g[1].propose(Bytes::from_static(b"x")).expect("propose");
    pump(&mut g, &mut applied, no_commit_to_1);
    assert_eq!(applied[1], x, "node 2 applied x");
    assert!(applied[0] < x, "node 1 does not know x committed");
    g[1].transfer_leader(NodeId(1));
    let mut held = false;
    for _ in 0..100 {
        if !exchange(&mut g, &mut applied, &no_commit_to_1) {
            break;
        }
        if g[0].role() == Role::Leader && applied[0] < x {
            // Leader of term 2, x (term 1) not applied: it cannot decide
            // yet, and holds (it refused before).
            assert_eq!(decide(&g[0], applied[0]), Readiness::Hold);
            held = true;
            break;
        }
    }
    assert!(held, "node 1 never led with x unapplied");
    pump(&mut g, &mut applied, |_| false);
    assert_eq!(g[0].role(), Role::Leader);
    assert!(applied[0] > x);
    assert_eq!(decide(&g[0], applied[0]), Readiness::Decide);
}

/// A leader cut off from its majority may be replaced while its lease
/// runs: it refuses once the lease lapsed (ADR 0019), and decides again
/// when a majority answers.
#[test]
fn a_leader_whose_lease_lapsed_refuses_until_a_majority_answers_again() {
    let mut g = three();
    let mut applied = vec![LogIndex(0); 3];
    elect(&mut g, &mut applied, 0);
    for _ in 0..g[0].config().election_ticks {
        if g[0].lease_ticks_left() == 0 {
            break;
        }
        g[0].tick();
        pump(&mut g, &mut applied, |m| m.from == NodeId(1));
    }
    assert_eq!(
        g[0].role(),
        Role::Leader,
        "check-quorum has not stepped it down yet"
    );
    assert_eq!(g[0].lease_ticks_left(), 0);
    assert_eq!(decide(&g[0], applied[0]), Readiness::Refuse);
    for _ in 0..=g[0].config().heartbeat_ticks {
        g[0].tick();
        pump(&mut g, &mut applied, |_| false);
    }
    assert_eq!(decide(&g[0], applied[0]), Readiness::Decide);
}

#[test]
fn a_replica_of_an_electing_group_refuses() {
    let g = three();
    assert_eq!(g[0].leader(), None);
    assert_eq!(decide(&g[0], LogIndex(0)), Readiness::Refuse);
}

#[test]
fn a_follower_that_knows_its_leader_refuses_at_once() {
    let mut g = three();
    let mut applied = vec![LogIndex(0); 3];
    elect(&mut g, &mut applied, 0);
    assert_eq!(g[1].leader(), Some(NodeId(1)));
    assert_eq!(decide(&g[1], applied[1]), Readiness::Refuse);
}

/// Elected, with its first entry not yet committed (its appends are cut):
/// nothing of a predecessor is unapplied, yet its log is not final, since
/// a replica it did not hear from may hold entries of an older term that a
/// later leader could commit if this term commits nothing. It holds; once
/// its first entry is applied it decides.
#[test]
fn a_new_leader_holds_until_an_entry_of_its_own_term_is_applied() {
    let mut g = three();
    let mut applied = vec![LogIndex(0); 3];
    g[0].campaign();
    let appends_from_1 =
        |m: &Message| m.from == NodeId(1) && matches!(m.body, MessageBody::Append { .. });
    pump(&mut g, &mut applied, appends_from_1);
    assert_eq!(g[0].role(), Role::Leader);
    assert_eq!(
        decide(&g[0], applied[0]),
        Readiness::Hold,
        "its own first entry is not committed"
    );
    // Heal: the leader sends again at its next heartbeat.
    for _ in 0..g[0].config().election_ticks {
        if g[0].term_at(applied[0]) == Some(g[0].term()) {
            break;
        }
        g[0].tick();
        pump(&mut g, &mut applied, |_| false);
    }
    assert_eq!(g[0].term_at(applied[0]), Some(g[0].term()));
    assert_eq!(decide(&g[0], applied[0]), Readiness::Decide);
}
