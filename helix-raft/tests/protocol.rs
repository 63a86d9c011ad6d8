//! Interaction tests of single mechanisms, each told as a short story:
//! WAL truncation after simultaneous crashes, catch-up from the WAL,
//! pre-vote, check-quorum, lost tails after a restart.

use std::collections::HashSet;

use bytes::Bytes;
use helix_raft::{GroupId, LogIndex, Message, MessageBody, NodeId, Role, Term};

mod story;

use story::{Cluster, deliver};

#[test]
fn conflicting_wal_entries_above_the_acknowledged_index_are_truncated() {
    let mut c = Cluster::new(3, |_| {});
    c.node(0).campaign();
    c.settle();
    let acked = c.propose(b"acked");
    c.settle();
    assert_eq!(c.node(0).acknowledged(), acked);

    // Node 1 leads; only node 2 hears it. Node 1 commits "lost" (majority in
    // memory) and applies it to its WAL, but node 2 never learns the commit.
    c.isolated.insert(2);
    let lost = c.propose(b"lost");
    let to_node2: Vec<Message> = c.drain(0);
    for m in to_node2.into_iter().filter(|m| m.to == NodeId(2)) {
        c.node(1).step(m).expect("ok");
    }
    for m in c.drain(1) {
        c.node(0).step(m).expect("ok");
    }
    c.drain(0);
    assert_eq!(
        c.wals[0].last().map(|e| e.data.clone()),
        Some(Bytes::from_static(b"lost"))
    );
    assert!(
        c.node(0).acknowledged() < lost,
        "never durable on a majority"
    );

    // Nodes 1 and 2 crash together; 2 and 3 elect a leader without "lost".
    c.crash(0);
    c.crash(1);
    c.isolated.clear();
    c.start(1);
    c.node(2).campaign();
    c.settle();
    assert_eq!(c.leader(), Some(2));
    let replaced = c.propose(b"replaced");
    c.settle();
    assert!(c.node(2).acknowledged() >= replaced);

    // Node 1 returns with "lost" in its WAL: it truncates it, not below ack.
    c.start(0);
    c.tick_all(3);
    assert_eq!(c.truncations, vec![(0, LogIndex(lost.0 - 1))]);
    assert!(LogIndex(lost.0 - 1) >= acked);
    assert_eq!(c.wals[0], c.wals[2], "WALs converge on the leader's log");
    assert_eq!(c.node(0).status().wal_truncations, 1);
}

#[test]
fn a_follower_behind_the_in_memory_log_catches_up_from_the_wal() {
    let mut c = Cluster::new(3, |cfg| cfg.max_inmem_bytes = 2000);
    c.node(0).campaign();
    c.settle();
    c.crash(2);
    for _ in 0..40 {
        c.propose(b"0123456789abcdef0123456789abcdef");
        c.settle();
    }
    let st = c.node(0).status();
    assert!(st.mem_start > LogIndex(2), "memory moved on: {st:?}");
    c.start(2);
    c.tick_all(3);
    assert!(
        !c.catch_ups.is_empty(),
        "the leader asked its host to stream from the WAL"
    );
    assert_eq!(c.catch_ups[0].to, NodeId(3));
    assert_eq!(c.wals[2], c.wals[0]);
    let st = c.node(0).status();
    let f = st
        .followers
        .iter()
        .find(|f| f.node == NodeId(3))
        .expect("follower");
    assert_eq!(f.matched, st.last_index);
    assert!(!f.catching_up);
}

#[test]
fn catch_up_that_the_host_never_serves_is_asked_for_again() {
    let mut c = Cluster::new(3, |cfg| cfg.max_inmem_bytes = 2000);
    c.serve_catch_up = false;
    c.node(0).campaign();
    c.settle();
    c.crash(2);
    for _ in 0..40 {
        c.propose(b"0123456789abcdef0123456789abcdef");
        c.settle();
    }
    c.start(2);
    c.tick_all(2);
    let first = c.catch_ups.len();
    assert!(first >= 1);
    c.tick_all(25);
    assert!(
        c.catch_ups.len() > first,
        "re-requested after the idle limit"
    );
}

#[test]
fn pre_vote_keeps_a_partitioned_node_from_raising_terms() {
    let mut c = Cluster::new(3, |_| {});
    c.node(0).campaign();
    c.settle();
    let term = c.node(0).term();
    c.isolated.insert(2);
    c.tick_all(100);
    assert_eq!(c.node(2).term(), term, "pre-votes do not raise the term");
    c.isolated.clear();
    c.tick_all(5);
    assert_eq!(c.leader(), Some(0));
    assert_eq!(c.node(0).term(), term);
}

#[test]
fn check_quorum_makes_an_isolated_leader_step_down() {
    let mut c = Cluster::new(3, |_| {});
    c.node(0).campaign();
    c.settle();
    c.isolated.insert(0);
    c.tick_all(25);
    assert_eq!(c.node(0).role(), Role::Follower);
    let others: Vec<Role> = (1..3).map(|i| c.node(i).role()).collect();
    assert!(
        others.contains(&Role::Leader),
        "the majority elected a new leader: {others:?}"
    );
}

#[test]
fn a_restarted_follower_that_lost_its_tail_is_repaired() {
    let mut c = Cluster::new(3, |_| {});
    c.node(0).campaign();
    c.settle();
    // Node 3 receives entries in memory but never the commit.
    c.propose(b"a");
    let msgs = c.drain(0);
    for m in msgs.into_iter().filter(|m| m.to == NodeId(3)) {
        c.node(2).step(m).expect("ok");
    }
    assert_eq!(c.node(2).status().last_index, LogIndex(2));
    c.drain(2);
    c.crash(2);
    c.start(2);
    assert_eq!(
        c.node(2).status().last_index,
        LogIndex(c.wals[2].len() as u64)
    );
    c.tick_all(3);
    let last = c.node(0).status().last_index;
    assert_eq!(c.node(2).status().last_index, last);
    assert_eq!(c.node(0).acknowledged(), last);
}

#[test]
fn whole_cluster_restart_elects_and_acknowledges_again() {
    let mut c = Cluster::new(3, |_| {});
    c.node(0).campaign();
    c.settle();
    let a = c.propose(b"a");
    c.settle();
    for i in 0..3 {
        c.crash(i);
    }
    for i in 0..3 {
        c.start(i);
    }
    c.tick_all(40);
    let l = c.leader().expect("a leader after restart");
    let b = c.propose(b"b");
    c.settle();
    assert!(c.node(l).acknowledged() >= b);
    assert!(
        c.wals
            .iter()
            .all(|w| w.get((a.0 - 1) as usize).map(|e| &e.data[..]) == Some(b"a"))
    );
}

#[test]
fn fast_backtracking_skips_a_whole_conflicting_term_in_one_step() {
    let mut c = Cluster::new(3, |_| {});
    c.node(0).campaign();
    c.settle();
    // The old leader, cut off, appends 30 entries nobody else has.
    c.isolated.insert(0);
    for _ in 0..30 {
        c.node(0)
            .propose(Bytes::from_static(b"stale"))
            .expect("still thinks it leads");
    }
    c.drain(0);
    c.tick_all(30);
    let l = c.leader().expect("nodes 2 and 3 elected a leader");
    assert_ne!(l, 0);
    assert_eq!(c.node(0).status().last_index, LogIndex(31));
    for _ in 0..30 {
        c.node(l)
            .propose(Bytes::from_static(b"new"))
            .expect("leader");
    }
    c.settle();
    // A fresh leader starts probing node 1 at its own last index (32+).
    let other = 3 - l;
    c.node(l).transfer_leader(NodeId(other as u64 + 1));
    c.settle();
    let l = other;
    assert_eq!(c.node(l).role(), Role::Leader);
    c.isolated.clear();
    // Count the rejects node 1 sends while the new leader finds the match.
    let mut rejects = 0;
    for _ in 0..10 {
        for g in c.nodes.iter_mut().flatten() {
            g.tick();
        }
        for _ in 0..50 {
            let mut msgs = Vec::new();
            for i in 0..3 {
                msgs.extend(c.drain(i));
            }
            if msgs.is_empty() {
                break;
            }
            for m in msgs {
                if let helix_raft::MessageBody::AppendResponse { reject: true, .. } = m.body
                    && m.from == NodeId(1)
                {
                    rejects += 1;
                }
                let to = (m.to.0 - 1) as usize;
                c.node(to).step(m).expect("ok");
            }
        }
    }
    assert_eq!(c.wals[0], c.wals[l], "the stale suffix was replaced");
    // Entry-by-entry backtracking would need ~30 rejects.
    assert!((1..=2).contains(&rejects), "{rejects} rejects");
}

/// Raft's Figure 8, with durability: an entry of an older term that is
/// durable on a majority is not acknowledged until an entry of the leader's
/// own term is. Here it is later lost, legitimately, because it never was.
#[test]
fn an_old_term_entry_durable_on_a_majority_is_not_acknowledged() {
    let mut c = Cluster::new(3, |cfg| {
        cfg.check_quorum = false;
        cfg.pre_vote = false;
        cfg.max_append_bytes = 1; // one entry per append
    });
    let (a, b, cc) = (0, 1, 2);
    c.node(a).campaign();
    c.settle();
    assert_eq!(c.node(a).acknowledged(), LogIndex(1));

    // A (term 1) appends e at index 2; nobody hears of it.
    c.isolated.insert(a);
    let e = c.node(a).propose(Bytes::from_static(b"e")).expect("leader");
    c.drain(a);
    // C wins term 2 with B's vote (A, asked too, refuses: its log is longer,
    // and steps down) and appends its no-op; B never gets it.
    c.node(cc).campaign();
    let m = c.drain(cc);
    deliver(&mut c, m, |_| true);
    c.drain(a);
    let m = c.drain(b);
    deliver(&mut c, m, |m| m.to == NodeId(3));
    assert_eq!(c.node(cc).role(), Role::Leader);
    c.drain(cc);
    c.isolated = HashSet::from([cc]);

    // A wins term 3 with B's vote (A's log [1, e] is more up to date).
    assert_eq!(c.node(a).role(), Role::Follower);
    c.node(a).campaign();
    assert_eq!(c.node(a).term(), Term(3));
    // Exchange A <-> B until A commits; B never hears the new commit index.
    for _ in 0..20 {
        if c.node(a).status().commit >= LogIndex(3) {
            break;
        }
        let m = c.drain(a);
        deliver(&mut c, m, |m| m.to == NodeId(2));
        let m = c.drain(b);
        deliver(&mut c, m, |m| m.to == NodeId(1));
    }
    c.drain(a);
    assert_eq!(c.node(a).role(), Role::Leader);
    assert_eq!(c.wals[b].len(), 1);
    assert_eq!(
        c.node(a).status().commit,
        LogIndex(3),
        "e and A's no-op committed in memory"
    );

    // B crashes before applying; back, it is re-sent e alone and applies it.
    c.crash(b);
    c.start(b);
    let noop3_held = |m: &Message| !matches!(&m.body, helix_raft::MessageBody::Append { entries, .. } if entries.iter().any(|x| x.index == LogIndex(3)));
    for _ in 0..6 {
        c.node(a).tick();
        for _ in 0..6 {
            let m = c.drain(a);
            deliver(&mut c, m, noop3_held);
            let m = c.drain(b);
            deliver(&mut c, m, |_| true);
        }
    }
    assert_eq!(c.wals[b].len(), 2, "B applied e (index 2) only");
    assert_eq!(c.node(a).status().durable, LogIndex(3));
    let fb = c
        .node(a)
        .status()
        .followers
        .into_iter()
        .find(|f| f.node == NodeId(2))
        .expect("B");
    assert_eq!(fb.durable, e, "e is durable on A and B: a majority");
    assert_eq!(
        c.node(a).acknowledged(),
        LogIndex(1),
        "but e is of term 1, not A's term 3"
    );

    // Why: A and B crash; C (last term 2) wins with B's vote (last term 1).
    c.crash(a);
    c.crash(b);
    c.isolated.clear();
    c.start(b);
    c.tick_all(60);
    assert_eq!(c.leader(), Some(cc));
    assert_ne!(
        c.node(cc).term_at(e),
        Some(Term(1)),
        "e is gone, as it may be: never acknowledged"
    );
}

#[test]
fn catch_up_entries_leave_as_catch_up_messages_not_regular_appends() {
    let mut c = Cluster::new(3, |cfg| cfg.max_inmem_bytes = 2000);
    c.serve_catch_up = false;
    c.node(0).campaign();
    c.settle();
    c.crash(2);
    for _ in 0..40 {
        c.propose(b"0123456789abcdef0123456789abcdef");
        c.settle();
    }
    c.start(2);
    c.tick_all(2);
    let req = c.catch_ups[0];
    let from = req.from_index.0;
    let chunk = c.wals[0][(from - 1) as usize..(from + 2) as usize].to_vec();
    assert!(c.node(0).catch_up(req.to, chunk).expect("chunk"));
    let regular = c.drain(0);
    let carried: Vec<u64> = c
        .catch_up_sent
        .iter()
        .flat_map(|m| match &m.body {
            MessageBody::Append { entries, .. } => entries.iter().map(|e| e.index.0).collect(),
            _ => Vec::new(),
        })
        .collect();
    assert_eq!(carried, (from..=from + 2).collect::<Vec<_>>());
    assert!(c.catch_up_sent.iter().all(|m| m.to == req.to));
    let in_regular = |m: &Message| {
        matches!(&m.body, MessageBody::Append { entries, .. }
            if entries.iter().any(|e| e.index.0 <= from + 2))
    };
    assert!(
        !regular
            .iter()
            .filter(|m| !c.catch_up_sent.contains(m))
            .any(in_regular),
        "the WAL entries travel only as catch-up messages"
    );
    // The rest is asked for again once the unserved request goes stale.
    c.serve_catch_up = true;
    deliver(&mut c, regular, |_| true);
    c.tick_all(40);
    assert_eq!(c.wals[2], c.wals[0]);
}

#[test]
fn catch_up_chunks_overlapping_what_the_follower_has_are_trimmed() {
    let mut c = Cluster::new(3, |cfg| cfg.max_inmem_bytes = 2000);
    c.serve_catch_up = false;
    c.node(0).campaign();
    c.settle();
    c.crash(2);
    for _ in 0..40 {
        c.propose(b"0123456789abcdef0123456789abcdef");
        c.settle();
    }
    c.start(2);
    c.tick_all(2);
    let req = c.catch_ups[0];
    let wal = c.wals[0].clone();
    let slice = |from: u64, to: u64| wal[(from - 1) as usize..to as usize].to_vec();
    let from = req.from_index.0;
    assert!(
        c.node(0)
            .catch_up(req.to, slice(from, from + 2))
            .expect("first chunk")
    );
    // The host re-reads from an older position: the overlap is skipped.
    assert!(
        c.node(0)
            .catch_up(req.to, slice(from, from + 5))
            .expect("overlap")
    );
    let gap = c.node(0).catch_up(req.to, slice(from + 8, from + 9));
    assert!(gap.is_err(), "a gap is the host's error");
    let mut next = from + 6;
    while c
        .node(0)
        .catch_up(req.to, slice(next, (next + 3).min(req.through_index.0)))
        .expect("stream")
    {
        next += 4;
    }
    c.serve_catch_up = true;
    c.tick_all(3);
    assert_eq!(c.wals[2], c.wals[0]);
}

#[test]
fn a_follower_behind_the_leaders_first_held_entry_starts_over_there() {
    let mut c = Cluster::new(3, |cfg| cfg.max_inmem_bytes = 2000);
    c.serve_catch_up = false;
    c.node(0).campaign();
    c.settle();
    c.crash(2);
    for _ in 0..40 {
        c.propose(b"0123456789abcdef0123456789abcdef");
        c.settle();
    }
    c.start(2);
    c.tick_all(2);
    let req = c.catch_ups[0];
    // The leader's WAL no longer holds anything below index 20.
    let wal = c.wals[0].clone();
    let held = |from: u64, to: u64| wal[(from - 1) as usize..to as usize].to_vec();
    assert!(req.from_index.0 < 20);
    assert!(
        c.node(0).catch_up(req.to, held(20, 22)).is_err(),
        "an ordinary chunk must start where the follower needs"
    );
    let mut next = 20;
    while c
        .node(0)
        .catch_up_restart(req.to, held(next, (next + 3).min(req.through_index.0)))
        .expect("stream")
    {
        next += 4;
    }
    c.serve_catch_up = true;
    c.tick_all(3);
    assert_eq!(c.restarts, vec![(2, LogIndex(20))]);
    assert_eq!(
        c.wals[2],
        c.wals[0][19..].to_vec(),
        "from the first held entry on"
    );
    // A restarted follower restarts from its WAL as any other.
    c.crash(2);
    c.start(2);
    c.propose(b"after");
    c.tick_all(3);
    assert_eq!(c.wals[2], c.wals[0][19..].to_vec());
}

#[test]
fn a_restart_at_an_entry_not_committed_is_refused() {
    let mut c = Cluster::new(3, |cfg| cfg.max_inmem_bytes = 2000);
    c.serve_catch_up = false;
    c.node(0).campaign();
    c.settle();
    c.crash(2);
    for _ in 0..40 {
        c.propose(b"0123456789abcdef0123456789abcdef");
        c.settle();
    }
    c.start(2);
    c.tick_all(2);
    let req = c.catch_ups[0];
    // An entry only the leader holds: proposed while it hears no one.
    c.isolated.insert(0);
    let at = c.propose(b"not committed");
    let mut uncommitted = c.wals[0][39].clone();
    uncommitted.index = at;
    uncommitted.term = c.node(0).term_at(at).expect("held");
    assert!(
        c.node(0)
            .catch_up_restart(req.to, vec![uncommitted])
            .is_err()
    );
}

#[test]
fn a_lost_append_response_is_made_up_by_the_next_heartbeat_answer() {
    let mut c = Cluster::new(3, |_| {});
    c.node(0).campaign();
    c.settle();
    let idx = c.propose(b"x");
    let m = c.drain(0);
    deliver(&mut c, m, |_| true);
    for f in 1..3 {
        c.drain(f); // the append responses are lost
    }
    assert!(c.node(0).status().commit < idx);
    c.tick_all(1);
    assert!(
        c.node(0).status().commit >= idx,
        "heartbeat answers carry the verified match"
    );
    assert!(c.node(0).acknowledged() >= idx);
}

/// A follower's answer from an earlier term describes the log of that term,
/// not this one: a leader that took it would count a follower durable (and
/// matched) on entries it never saw, and acknowledge them alone. The answer
/// must be dropped. (The simulation replays old messages, but the history in
/// which a stale answer changes what is acknowledged needs a leader whose
/// log was cut and rewritten between the two terms; this story builds it
/// directly.)
#[test]
fn an_answer_from_an_earlier_term_is_not_counted() {
    let mut c = Cluster::new(3, |cfg| {
        cfg.pre_vote = false;
        cfg.check_quorum = false;
    });
    c.node(0).campaign();
    c.settle();
    c.node(1).campaign();
    c.settle();
    c.node(0).campaign();
    c.settle();
    assert_eq!(c.leader(), Some(0));
    let term = c.node(0).term();
    assert!(term.0 >= 3, "three elections: term {term}");
    c.isolated.extend([1, 2]);
    let x = c.propose(b"only on the leader");
    c.settle();
    assert!(c.node(0).acknowledged() < x);
    let stale = Message {
        group: GroupId(1),
        from: NodeId(2),
        to: NodeId(1),
        term: Term(term.0 - 1),
        body: MessageBody::AppendResponse {
            reject: false,
            index: x,
            hint_index: LogIndex(0),
            hint_term: Term(0),
            last_index: x,
            durable: x,
        },
    };
    c.node(0).step(stale).expect("well addressed");
    c.drain(0);
    let st = c.node(0).status();
    assert!(
        st.acknowledged < x,
        "a stale answer made {x} acknowledged with one copy: {st:?}"
    );
    let f = st
        .followers
        .iter()
        .find(|f| f.node == NodeId(2))
        .expect("follower 2");
    assert!(f.durable < x && f.matched < x, "{f:?}");
}
