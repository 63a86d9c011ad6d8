//! Black-box tests of a group losing a member or its leader: a replica
//! that lost its log (or its tail) rejoins as a learner until restored, a
//! leader that stands down hands over, followers of a lost leader campaign
//! at once in line order, and the leader lease (held only while a majority
//! answers, ended at once by a lost connection).

use bytes::Bytes;
use helix_raft::{
    Entry, GroupId, LogIndex, Message, MessageBody, NodeId, RaftConfig, RaftGroup, Restored, Role,
    Term,
};

mod instant_cluster;
use instant_cluster::{Cluster, one_voter};

#[test]
fn a_replica_that_lost_its_log_rejoins_as_a_learner_until_restored() {
    let mut c = Cluster::new(3);
    c.nodes[0].campaign();
    c.settle();
    for v in [b"a", b"b", b"c"] {
        c.nodes[0].propose(Bytes::from_static(v)).expect("leader");
    }
    c.settle();
    let before = c.nodes[0].term();
    // Node 2's log is damaged and set aside: it restarts empty, keeping its
    // vote record, as a learner.
    let cfg = RaftConfig::new(NodeId(2), vec![NodeId(1), NodeId(2), NodeId(3)]);
    let restored = Restored {
        hard_state: helix_raft::HardState {
            term: before,
            voted_for: Some(NodeId(1)),
            learner: true,
        },
        ..Restored::fresh(2)
    };
    c.nodes[1] = RaftGroup::new(GroupId(1), cfg, restored).expect("valid");
    c.wals[1].clear();
    let st = c.nodes[1].status();
    assert!(st.learner);
    assert_eq!(
        st.term,
        Term(before.0 + 1),
        "a learner starts a term of its own"
    );
    // It never campaigns, however long it waits.
    for _ in 0..100 {
        c.nodes[1].tick();
    }
    c.nodes[1].campaign();
    assert_eq!(c.nodes[1].role(), Role::Follower);
    // It refuses to vote: a candidate lacking the entries could otherwise
    // win with it.
    let vote = Message {
        group: GroupId(1),
        from: NodeId(3),
        to: NodeId(2),
        term: Term(before.0 + 5),
        body: MessageBody::Vote {
            last_index: LogIndex(0),
            last_term: Term(0),
            transfer: false,
        },
    };
    c.nodes[1].step(vote).expect("addressed");
    let rd = c.nodes[1].ready();
    assert!(
        rd.messages
            .iter()
            .any(|m| matches!(m.body, MessageBody::VoteResponse { reject: true })),
        "{:?}",
        rd.messages
    );
    c.handle(1, rd);
    // Node 2's answers carry its new term: the leader steps down, and one
    // of the nodes holding everything leads at a later term. Node 2 follows
    // it and votes again once it holds what that leader acknowledged in its
    // own term.
    let mut proposed = false;
    for _ in 0..500 {
        for n in &mut c.nodes {
            n.tick();
        }
        c.settle();
        if let Some(l) = (0..3).find(|i| c.nodes[*i].role() == Role::Leader) {
            assert_ne!(l, 1, "the learner cannot lead");
            if !proposed && c.nodes[l].term() > Term(before.0 + 5) {
                proposed = c.nodes[l].propose(Bytes::from_static(b"d")).is_ok();
            }
        }
        if proposed && !c.nodes[1].status().learner {
            break;
        }
    }
    let st = c.nodes[1].status();
    assert!(
        proposed && !st.learner,
        "not restored: {:?}",
        c.nodes.iter().map(|n| n.status()).collect::<Vec<_>>()
    );
    let data: Vec<Bytes> = c.wals[1].iter().map(|e| e.data.clone()).collect();
    for v in [b"a", b"b", b"c", b"d"] {
        assert!(data.contains(&Bytes::from_static(v)), "{data:?}");
    }
}

#[test]
fn a_replica_that_lost_the_tail_of_its_log_rejoins_as_a_learner_keeping_the_rest() {
    let mut c = Cluster::new(3);
    c.nodes[0].campaign();
    c.settle();
    for v in [b"a", b"b", b"c"] {
        c.nodes[0].propose(Bytes::from_static(v)).expect("leader");
    }
    c.settle();
    let before = c.nodes[0].term();
    // Node 2's host restarted: its WAL lost what was only in the page cache
    // (reported durable, counted for the acknowledged index). It restarts
    // with the prefix, as a learner.
    c.wals[1].truncate(2);
    let kept: Vec<Entry> = c.wals[1].clone();
    let mut term_starts: Vec<(LogIndex, Term)> = Vec::new();
    for e in &kept {
        if term_starts.last().is_none_or(|(_, t)| *t != e.term) {
            term_starts.push((e.index, e.term));
        }
    }
    let cfg = RaftConfig::new(NodeId(2), vec![NodeId(1), NodeId(2), NodeId(3)]);
    let restored = Restored {
        hard_state: helix_raft::HardState {
            term: before,
            voted_for: Some(NodeId(1)),
            learner: true,
        },
        wal_last: kept.last().map(|e| (e.index, e.term)),
        wal_term_starts: term_starts,
        seed: 2,
    };
    c.nodes[1] = RaftGroup::new(GroupId(1), cfg, restored).expect("valid");
    assert!(c.nodes[1].status().learner);
    // A candidate whose log is no longer than what node 2 kept would win
    // with a plain follower's vote; the learner refuses it.
    let vote = Message {
        group: GroupId(1),
        from: NodeId(3),
        to: NodeId(2),
        term: Term(before.0 + 5),
        body: MessageBody::Vote {
            last_index: kept.last().map_or(LogIndex(0), |e| e.index),
            last_term: kept.last().map_or(Term(0), |e| e.term),
            transfer: false,
        },
    };
    c.nodes[1].step(vote).expect("addressed");
    let rd = c.nodes[1].ready();
    assert!(
        rd.messages
            .iter()
            .any(|m| matches!(m.body, MessageBody::VoteResponse { reject: true })),
        "{:?}",
        rd.messages
    );
    c.handle(1, rd);
    let mut proposed = false;
    for _ in 0..500 {
        for n in &mut c.nodes {
            n.tick();
        }
        c.settle();
        if let Some(l) = (0..3).find(|i| c.nodes[*i].role() == Role::Leader) {
            assert_ne!(l, 1, "the learner cannot lead");
            if !proposed && c.nodes[l].term() > Term(before.0 + 5) {
                proposed = c.nodes[l].propose(Bytes::from_static(b"d")).is_ok();
            }
        }
        if proposed && !c.nodes[1].status().learner {
            break;
        }
    }
    assert!(
        proposed && !c.nodes[1].status().learner,
        "not restored: {:?}",
        c.nodes.iter().map(|n| n.status()).collect::<Vec<_>>()
    );
    // Its kept prefix is still there, below what the leader restored.
    assert_eq!(&c.wals[1][..2], &kept[..]);
    let data: Vec<Bytes> = c.wals[1].iter().map(|e| e.data.clone()).collect();
    for v in [b"a", b"b", b"c", b"d"] {
        assert!(data.contains(&Bytes::from_static(v)), "{data:?}");
    }
}

#[test]
fn a_leader_that_stands_down_hands_over_and_never_campaigns_again() {
    let mut c = Cluster::led_by_node_1_holding(b"a");
    c.nodes[0].stand_down();
    c.settle();
    assert_ne!(c.nodes[0].role(), Role::Leader);
    let leader = (1..3)
        .find(|i| c.nodes[*i].role() == Role::Leader)
        .expect("leadership moved to a follower");
    // The new leader goes away: node 1 still votes but never stands.
    c.nodes[leader] = RaftGroup::new(
        GroupId(1),
        RaftConfig::new(
            NodeId(leader as u64 + 1),
            vec![NodeId(1), NodeId(2), NodeId(3)],
        ),
        Restored::fresh(9),
    )
    .expect("valid");
    for _ in 0..200 {
        c.nodes[0].tick();
        c.settle();
    }
    assert_eq!(
        c.nodes[0].status().elections_started,
        1,
        "only its first election"
    );
    assert!(c.nodes[0].stood_down());
}

#[test]
fn followers_of_a_lost_leader_campaign_at_once_next_in_line_first() {
    let mut c = Cluster::led_by_node_1_holding(b"a");
    c.down = Some(0);
    // Node 2 is next after node 1 in the voter list: it stands at once,
    // not after an election timeout of 10 ticks or more.
    assert!(c.nodes[1].peer_lost(NodeId(1)));
    assert!(c.nodes[2].peer_lost(NodeId(1)));
    assert_eq!(c.nodes[2].leader(), None, "the lost leader is forgotten");
    c.settle();
    assert_eq!(c.nodes[1].role(), Role::Leader);
    assert_eq!(c.nodes[2].leader(), Some(NodeId(2)));
    for _ in 0..3 {
        c.nodes[1].tick();
        c.nodes[2].tick();
        c.settle();
    }
    assert_eq!(
        c.nodes[2].status().elections_started,
        0,
        "node 3, second in line, found a leader before its turn"
    );
    assert_eq!(c.nodes[1].status().elections_started, 1);
    let idx = c.nodes[1]
        .propose(Bytes::from_static(b"b"))
        .expect("leader");
    c.settle();
    assert_eq!(c.acked[1], idx);
    assert_eq!(c.wals[2].len(), c.wals[1].len());
}

#[test]
fn a_lost_connection_to_a_live_leader_does_not_depose_it() {
    let mut c = Cluster::led_by_node_1_holding(b"a");
    let term = c.nodes[0].term();
    // Node 2's connection to node 1 broke, the others' did not: node 2,
    // first in line, asks for pre-votes at once.
    c.nodes[1].peer_lost(NodeId(1));
    assert_eq!(c.nodes[1].role(), Role::PreCandidate);
    c.settle();
    assert_eq!(c.nodes[0].role(), Role::Leader, "node 3 still hears node 1");
    for n in &c.nodes {
        assert_eq!(n.term(), term, "a refused pre-vote raises no term");
    }
    // The leader's next heartbeat makes it node 2's known leader again.
    c.nodes[0].tick();
    c.settle();
    assert_eq!(c.nodes[1].role(), Role::Follower);
    assert_eq!(c.nodes[1].leader(), Some(NodeId(1)));
    // A lost connection to a node that leads nothing changes nothing.
    assert!(!c.nodes[1].peer_lost(NodeId(3)));
    assert_eq!(c.nodes[1].leader(), Some(NodeId(1)));
}

#[test]
fn the_second_in_line_stands_when_the_first_was_refused() {
    let mut c = Cluster::led_by_node_1_holding(b"a");
    c.down = Some(0);
    // Node 2 notices first; node 3 still counts node 1 as its leader and
    // refuses the pre-vote.
    c.nodes[1].peer_lost(NodeId(1));
    c.settle();
    assert_eq!(c.nodes[1].role(), Role::PreCandidate);
    assert_eq!(c.nodes[2].leader(), Some(NodeId(1)));
    // Node 3 notices: second in line, it stands at its next tick, and node
    // 2 grants it.
    c.nodes[2].peer_lost(NodeId(1));
    c.nodes[1].tick();
    c.nodes[2].tick();
    c.settle();
    assert_eq!(c.nodes[2].role(), Role::Leader);
    assert_eq!(c.nodes[1].leader(), Some(NodeId(3)));
}

#[test]
fn a_leader_holds_its_lease_only_while_a_majority_answers() {
    let mut c = Cluster::led_by_node_1_holding(b"a");
    assert!(c.nodes[0].has_quorum_lease());
    assert!(!c.nodes[1].has_quorum_lease(), "a follower never holds it");
    // Node 1 is cut off: it ticks, its heartbeats go nowhere, nothing
    // answers. Its lease ends after `lease_ticks`, while it still leads
    // (check-quorum steps it down only after an election timeout)...
    let lease = c.nodes[0].config().lease_ticks();
    assert!(lease < c.nodes[0].config().election_ticks);
    assert_eq!(c.nodes[0].lease_ticks_left(), lease);
    for t in 1..=lease {
        c.nodes[0].tick();
        let _ = c.nodes[0].ready();
        assert_eq!(
            c.nodes[0].has_quorum_lease(),
            t < lease,
            "after {t} silent ticks"
        );
        assert_eq!(c.nodes[0].lease_ticks_left(), lease - t);
    }
    assert_eq!(c.nodes[0].role(), Role::Leader);
    // ...and before the followers, ticking alike, would let another node
    // be elected: both still refuse a pre-vote for node 3.
    for n in 1..3 {
        for _ in 0..lease {
            c.nodes[n].tick();
        }
        let _ = c.nodes[n].ready();
    }
    let pre_vote = Message {
        group: GroupId(1),
        from: NodeId(3),
        to: NodeId(2),
        term: Term(c.nodes[1].term().0 + 1),
        body: MessageBody::PreVote {
            last_index: c.nodes[2].status().last_index,
            last_term: c.nodes[2].term(),
        },
    };
    c.nodes[1].step(pre_vote).expect("well addressed");
    let answers = c.nodes[1].ready().messages;
    assert!(
        answers.is_empty()
            || answers
                .iter()
                .all(|m| matches!(m.body, MessageBody::PreVoteResponse { reject: true })),
        "a follower in its leader's lease grants no pre-vote: {answers:?}"
    );
    // One answer from a follower makes a majority again.
    c.nodes[0].tick();
    c.settle();
    assert!(c.nodes[0].has_quorum_lease());
}

#[test]
fn a_lost_connection_ends_the_lease_at_once_and_an_answer_restores_it() {
    let mut c = Cluster::led_by_node_1_holding(b"a");
    // One follower lost: the leader and the other still make a majority.
    assert!(!c.nodes[0].peer_lost(NodeId(2)), "the lease still holds");
    assert!(c.nodes[0].has_quorum_lease());
    // Both lost (the leader is cut off, and its followers were told too:
    // they may be electing already): the lease ends now, not in 8 ticks.
    assert!(c.nodes[0].peer_lost(NodeId(3)), "the lease ended");
    assert!(!c.nodes[0].has_quorum_lease());
    assert_eq!(c.nodes[0].role(), Role::Leader, "a hint: no step-down");
    // A spurious report: the followers answer the next heartbeat.
    c.nodes[0].tick();
    c.settle();
    assert!(c.nodes[0].has_quorum_lease());
}

#[test]
fn a_one_voter_leader_always_holds_its_lease() {
    let mut g = one_voter();
    assert!(!g.has_quorum_lease());
    g.campaign();
    for _ in 0..100 {
        g.tick();
    }
    assert!(g.has_quorum_lease());
    assert_eq!(g.lease_ticks_left(), u32::MAX, "its own majority, always");
}
