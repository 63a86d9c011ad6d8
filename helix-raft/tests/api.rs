//! Black-box tests of the public API: the one-voter path the server uses
//! first, a three-voter election and replication with the acknowledged index
//! trailing the commit index by exactly one exchange, leader transfer,
//! backpressure, and MultiRaft batching.

use bytes::Bytes;
use helix_raft::{
    Entry, EntryKind, GroupId, LogIndex, Message, MessageBody, MultiRaft, NodeId, ProposeError,
    RaftConfig, RaftGroup, Ready, Restored, Role, Term,
};

fn one_voter() -> RaftGroup {
    let cfg = RaftConfig::new(NodeId(1), vec![NodeId(1)]);
    RaftGroup::new(GroupId(7), cfg, Restored::fresh(1)).expect("valid config")
}

#[test]
fn one_voter_group_acknowledges_after_its_own_wal_append() {
    let mut g = one_voter();
    assert!(matches!(
        g.propose(Bytes::from_static(b"x")),
        Err(ProposeError::NotLeader { leader: None })
    ));
    g.campaign();
    assert_eq!(g.role(), Role::Leader);
    let idx = g
        .propose(Bytes::from_static(b"hello"))
        .expect("leader takes proposals");
    assert_eq!(idx, LogIndex(2), "index 1 is the new leader's no-op");
    let rd = g.ready();
    assert_eq!(rd.hard_state.map(|h| h.term), Some(Term(1)));
    assert!(rd.messages.is_empty());
    assert_eq!(rd.to_apply.len(), 2);
    assert_eq!(rd.to_apply[0].kind, EntryKind::Noop);
    assert_eq!(rd.to_apply[1].data, Bytes::from_static(b"hello"));
    assert_eq!(rd.acknowledged, None, "nothing is durable yet");
    g.durable_to(LogIndex(2)).expect("applied up to 2");
    let rd = g.ready();
    assert_eq!(rd.acknowledged, Some(LogIndex(2)));
    assert!(
        g.durable_to(LogIndex(3)).is_err(),
        "cannot be durable beyond applied"
    );
    assert!(!g.has_ready());
}

#[test]
fn one_voter_group_restarts_from_its_wal_and_elects_itself_on_timeout() {
    let cfg = RaftConfig::new(NodeId(1), vec![NodeId(1)]);
    let restored = Restored {
        hard_state: helix_raft::HardState {
            learner: false,
            term: Term(3),
            voted_for: Some(NodeId(1)),
        },
        wal_last: Some((LogIndex(10), Term(4))),
        wal_term_starts: vec![],
        seed: 9,
    };
    let mut g = RaftGroup::new(GroupId(1), cfg, restored).expect("one voter may omit term starts");
    assert_eq!(g.term(), Term(4), "term never below the last WAL entry's");
    for _ in 0..40 {
        g.tick();
    }
    assert_eq!(g.role(), Role::Leader);
    assert_eq!(g.term(), Term(5));
    let rd = g.ready();
    assert_eq!(
        rd.to_apply.iter().map(|e| e.index).collect::<Vec<_>>(),
        vec![LogIndex(11)]
    );
    g.durable_to(LogIndex(11)).expect("applied");
    assert_eq!(g.ready().acknowledged, Some(LogIndex(11)));
}

#[test]
fn multi_voter_restore_requires_term_starts() {
    let cfg = RaftConfig::new(NodeId(1), vec![NodeId(1), NodeId(2), NodeId(3)]);
    let restored = Restored {
        wal_last: Some((LogIndex(5), Term(2))),
        ..Restored::fresh(1)
    };
    assert!(RaftGroup::new(GroupId(1), cfg, restored).is_err());
}

/// Three replicas, instant network, WAL = Vec per node.
struct Cluster {
    nodes: Vec<RaftGroup>,
    wals: Vec<Vec<Entry>>,
    acked: Vec<LogIndex>,
    hops: usize,
    /// A node that is down: not driven, messages to it dropped.
    down: Option<usize>,
}

impl Cluster {
    fn new(n: u64) -> Self {
        let voters: Vec<NodeId> = (1..=n).map(NodeId).collect();
        let nodes = voters
            .iter()
            .map(|id| {
                let cfg = RaftConfig::new(*id, voters.clone());
                RaftGroup::new(GroupId(1), cfg, Restored::fresh(id.0)).expect("valid")
            })
            .collect();
        Cluster {
            nodes,
            wals: vec![Vec::new(); n as usize],
            acked: vec![LogIndex(0); n as usize],
            hops: 0,
            down: None,
        }
    }

    fn handle(&mut self, i: usize, rd: Ready) -> Vec<Message> {
        if let Some(k) = rd.truncate_wal_after {
            self.wals[i].truncate(k.0 as usize);
        }
        for e in &rd.to_apply {
            self.wals[i].push(e.clone());
        }
        if let Some(last) = rd.to_apply.last() {
            self.nodes[i].durable_to(last.index).expect("applied");
        }
        if let Some(a) = rd.acknowledged {
            self.acked[i] = a;
        }
        // Catch-up served from the WAL, as the server does.
        for req in &rd.catch_up {
            let (from, through) = (req.from_index.0 as usize, req.through_index.0 as usize);
            let entries = self.wals[i][from - 1..through.min(self.wals[i].len())].to_vec();
            self.nodes[i]
                .catch_up(req.to, entries)
                .expect("a leader's own WAL");
        }
        let mut out = rd.messages;
        out.extend(rd.catch_up_messages);
        out
    }

    /// Three replicas, node 1 elected, `data` proposed and settled.
    fn led_by_node_1_holding(data: &'static [u8]) -> Self {
        let mut c = Cluster::new(3);
        c.nodes[0].campaign();
        c.settle();
        c.nodes[0]
            .propose(Bytes::from_static(data))
            .expect("leader");
        c.settle();
        c
    }

    /// Delivers messages round by round until quiet; returns rounds (hops).
    fn settle(&mut self) -> usize {
        let mut rounds = 0;
        loop {
            let mut msgs = Vec::new();
            for i in 0..self.nodes.len() {
                if self.down == Some(i) {
                    continue;
                }
                while self.nodes[i].has_ready() {
                    let rd = self.nodes[i].ready();
                    msgs.extend(self.handle(i, rd));
                }
            }
            if msgs.is_empty() {
                return rounds;
            }
            rounds += 1;
            for m in msgs {
                let to = (m.to.0 - 1) as usize;
                if self.down == Some(to) {
                    continue;
                }
                self.nodes[to].step(m).expect("well addressed");
            }
        }
    }
}

#[test]
fn three_voters_elect_replicate_and_acknowledge() {
    let mut c = Cluster::new(3);
    c.nodes[0].campaign();
    c.settle();
    assert_eq!(c.nodes[0].role(), Role::Leader);
    assert_eq!(c.nodes[1].leader(), Some(NodeId(1)));
    let idx = c.nodes[0]
        .propose(Bytes::from_static(b"a"))
        .expect("leader");
    c.hops = c.settle();
    assert_eq!(c.acked[0], idx);
    for w in &c.wals {
        assert_eq!(
            w.last().map(|e| e.data.clone()),
            Some(Bytes::from_static(b"a"))
        );
    }
    // propose -> Append -> AppendResponse (commit) -> Commit -> durable
    // report (acknowledged): one exchange more than commit.
    assert_eq!(c.hops, 4, "hops from propose to acknowledged");
    let st = c.nodes[0].status();
    assert_eq!((st.commit, st.durable, st.acknowledged), (idx, idx, idx));
    assert_eq!(
        c.nodes[1].status().acknowledged,
        LogIndex(1),
        "followers learn ack lazily"
    );
}

#[test]
fn leader_transfer_hands_over_leadership() {
    let mut c = Cluster::led_by_node_1_holding(b"a");
    c.nodes[0].transfer_leader(NodeId(3));
    assert!(matches!(
        c.nodes[0].propose(Bytes::new()),
        Err(ProposeError::TransferInProgress(NodeId(3)))
    ));
    c.settle();
    assert_eq!(c.nodes[2].role(), Role::Leader);
    assert_eq!(c.nodes[0].leader(), Some(NodeId(3)));
}

#[test]
fn proposals_beyond_the_memory_budget_get_backpressure() {
    let mut cfg = RaftConfig::new(NodeId(1), vec![NodeId(1)]);
    cfg.max_inmem_bytes = 4096;
    let mut g = RaftGroup::new(GroupId(1), cfg, Restored::fresh(3)).expect("valid");
    g.campaign();
    let mut taken = 0;
    while g.propose(Bytes::from(vec![0u8; 1000])).is_ok() {
        taken += 1;
    }
    assert_eq!(taken, 3);
    assert_eq!(
        g.propose(Bytes::from(vec![0u8; 1000])),
        Err(ProposeError::Backpressure)
    );
    let rd = g.ready();
    assert_eq!(rd.to_apply.len(), 4);
    assert!(
        g.status().inmem_bytes == 0,
        "applied entries of a one-voter group are released"
    );
    assert!(g.propose(Bytes::from(vec![0u8; 1000])).is_ok());
}

#[test]
fn stale_leader_steps_down_on_higher_term_append() {
    let mut c = Cluster::new(3);
    c.nodes[0].campaign();
    c.settle();
    let m = Message {
        group: GroupId(1),
        from: NodeId(2),
        to: NodeId(1),
        term: Term(9),
        body: MessageBody::Heartbeat {
            commit: LogIndex(0),
            acknowledged: LogIndex(0),
        },
    };
    c.nodes[0].step(m).expect("valid");
    assert_eq!(c.nodes[0].role(), Role::Follower);
    assert_eq!(c.nodes[0].term(), Term(9));
    assert!(
        c.nodes[0]
            .step(Message {
                group: GroupId(2),
                from: NodeId(2),
                to: NodeId(1),
                term: Term(9),
                body: MessageBody::TimeoutNow,
            })
            .is_err()
    );
}

#[test]
fn multiraft_batches_messages_per_destination() {
    let voters = vec![NodeId(1), NodeId(2), NodeId(3)];
    let mut m = MultiRaft::new(NodeId(1));
    for g in 0..50 {
        m.add_group(
            GroupId(g),
            RaftConfig::new(NodeId(1), voters.clone()),
            Restored::fresh(g),
        )
        .expect("new group");
    }
    for g in 0..50 {
        m.group_mut(GroupId(g)).expect("exists").campaign();
    }
    let rd = m.ready();
    assert_eq!(rd.batches.len(), 2, "one batch per destination node");
    for b in &rd.batches {
        assert_eq!(b.messages.len(), 50);
        let bytes = helix_raft::encode_batch(b);
        assert_eq!(&helix_raft::decode_batch(bytes).expect("round trip"), b);
    }
    assert_eq!(
        rd.groups.len(),
        50,
        "every group has a hard state to persist"
    );
}

#[test]
fn a_node_budget_shared_by_groups_back_pressures_all_of_them() {
    let budget = helix_raft::MemoryBudget::new(5000);
    let mk = |g: u64| {
        let mut cfg = RaftConfig::new(NodeId(1), vec![NodeId(1)]);
        cfg.node_budget = Some(budget.clone());
        let mut grp = RaftGroup::new(GroupId(g), cfg, Restored::fresh(g)).expect("valid");
        grp.campaign();
        grp
    };
    let mut a = mk(1);
    let mut b = mk(2);
    while a.propose(Bytes::from(vec![1u8; 1000])).is_ok() {}
    assert_eq!(
        b.propose(Bytes::from(vec![1u8; 1000])),
        Err(ProposeError::Backpressure)
    );
    assert!(budget.used() <= budget.limit());
    a.ready(); // applied: released
    assert!(b.propose(Bytes::from(vec![1u8; 1000])).is_ok());
    drop(b);
    drop(a);
    assert_eq!(budget.used(), 0, "dropping a group returns its bytes");
}

#[test]
fn groups_are_send_so_hosts_can_shard_them_across_workers() {
    fn assert_send<T: Send + 'static>() {}
    assert_send::<RaftGroup>();
    assert_send::<MultiRaft>();
    assert_send::<helix_raft::MessageBatch>();
}

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
