//! Black-box tests of the public API: the one-voter path the server uses
//! first, a three-voter election and replication with the acknowledged index
//! trailing the commit index by exactly one exchange, leader transfer,
//! backpressure, and MultiRaft batching. Learners, failover and leases:
//! `failover.rs`.

use bytes::Bytes;
use helix_raft::{
    EntryKind, GroupId, LogIndex, Message, MessageBody, MultiRaft, NodeId, ProposeError,
    RaftConfig, RaftGroup, Restored, Role, Term,
};

mod instant_cluster;
use instant_cluster::{Cluster, one_voter};

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
