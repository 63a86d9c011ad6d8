//! The protocol stories' cluster: three (or more) replicas driven by hand,
//! with WALs, persisted votes and a network the story controls.

use std::collections::HashSet;

use bytes::Bytes;
use helix_raft::{
    CatchUpRequest, Entry, GroupId, HardState, LogIndex, Message, NodeId, RaftConfig, RaftGroup,
    Restored, Role, Term,
};

/// Three (or more) replicas with WALs, persisted votes and a controllable
/// network: messages to or from an isolated node are dropped.
pub struct Cluster {
    pub cfgs: Vec<RaftConfig>,
    pub nodes: Vec<Option<RaftGroup>>,
    pub wals: Vec<Vec<Entry>>,
    pub votes: Vec<HardState>,
    pub isolated: HashSet<usize>,
    pub truncations: Vec<(usize, LogIndex)>,
    /// `(node, index)` of every WAL emptied to start over at `index`: that
    /// node's `wals` entry then starts there, not at index 1.
    pub restarts: Vec<(usize, LogIndex)>,
    pub catch_ups: Vec<CatchUpRequest>,
    /// Every catch-up message sent (they are delivered like the others).
    pub catch_up_sent: Vec<Message>,
    /// Serve catch-up requests from the leader's WAL automatically.
    pub serve_catch_up: bool,
}

impl Cluster {
    pub fn new(n: u64, tweak: impl Fn(&mut RaftConfig)) -> Self {
        let voters: Vec<NodeId> = (1..=n).map(NodeId).collect();
        let cfgs: Vec<RaftConfig> = voters
            .iter()
            .map(|id| {
                let mut c = RaftConfig::new(*id, voters.clone());
                tweak(&mut c);
                c
            })
            .collect();
        let mut c = Cluster {
            nodes: (0..n).map(|_| None).collect(),
            wals: vec![Vec::new(); n as usize],
            votes: vec![HardState::default(); n as usize],
            isolated: HashSet::new(),
            truncations: Vec::new(),
            restarts: Vec::new(),
            catch_ups: Vec::new(),
            catch_up_sent: Vec::new(),
            serve_catch_up: true,
            cfgs,
        };
        for i in 0..n as usize {
            c.start(i);
        }
        c
    }

    pub fn start(&mut self, i: usize) {
        let wal = &self.wals[i];
        let mut starts: Vec<(LogIndex, Term)> = Vec::new();
        for e in wal {
            if starts.last().is_none_or(|(_, t)| *t != e.term) {
                starts.push((e.index, e.term));
            }
        }
        let restored = Restored {
            hard_state: self.votes[i],
            wal_last: wal.last().map(|e| (e.index, e.term)),
            wal_term_starts: starts,
            seed: 17 + i as u64,
        };
        self.nodes[i] = Some(
            RaftGroup::new(GroupId(1), self.cfgs[i].clone(), restored).expect("valid restore"),
        );
    }

    pub fn crash(&mut self, i: usize) {
        self.nodes[i] = None;
    }

    pub fn node(&mut self, i: usize) -> &mut RaftGroup {
        self.nodes[i].as_mut().expect("node is up")
    }

    pub fn leader(&self) -> Option<usize> {
        (0..self.nodes.len()).find(|i| {
            self.nodes[*i]
                .as_ref()
                .is_some_and(|g| g.role() == Role::Leader)
        })
    }

    pub fn drain(&mut self, i: usize) -> Vec<Message> {
        let mut out = Vec::new();
        while let Some(g) = self.nodes[i].as_mut() {
            if !g.has_ready() {
                break;
            }
            let rd = g.ready();
            if let Some(hs) = rd.hard_state {
                self.votes[i] = hs;
            }
            if let Some(k) = rd.truncate_wal_after {
                self.wals[i].truncate(k.0 as usize);
                self.truncations.push((i, k));
            }
            if let Some(k) = rd.restart_wal_at {
                self.wals[i].clear();
                self.restarts.push((i, k));
            }
            self.wals[i].extend(rd.to_apply.iter().cloned());
            if let Some(last) = rd.to_apply.last() {
                g.durable_to(last.index).expect("applied");
            }
            out.extend(rd.messages);
            self.catch_up_sent
                .extend(rd.catch_up_messages.iter().cloned());
            out.extend(rd.catch_up_messages);
            for req in rd.catch_up {
                self.catch_ups.push(req);
                if self.serve_catch_up {
                    let entries: Vec<Entry> = self.wals[i]
                        [(req.from_index.0 - 1) as usize..req.through_index.0 as usize]
                        .to_vec();
                    for chunk in entries.chunks(3) {
                        let g = self.nodes[i].as_mut().expect("up");
                        if !g.catch_up(req.to, chunk.to_vec()).expect("valid catch-up") {
                            break;
                        }
                    }
                }
            }
        }
        out
    }

    /// Delivers until no node has anything to say.
    pub fn settle(&mut self) {
        for _ in 0..1000 {
            let mut msgs = Vec::new();
            for i in 0..self.nodes.len() {
                msgs.extend(self.drain(i));
            }
            if msgs.is_empty() {
                return;
            }
            for m in msgs {
                let (from, to) = ((m.from.0 - 1) as usize, (m.to.0 - 1) as usize);
                if self.isolated.contains(&from) || self.isolated.contains(&to) {
                    continue;
                }
                if let Some(g) = self.nodes[to].as_mut() {
                    g.step(m).expect("well addressed");
                }
            }
        }
        panic!("cluster never settled");
    }

    pub fn tick_all(&mut self, n: usize) {
        for _ in 0..n {
            for g in self.nodes.iter_mut().flatten() {
                g.tick();
            }
            self.settle();
        }
    }

    pub fn propose(&mut self, data: &'static [u8]) -> LogIndex {
        let l = self.leader().expect("a leader");
        self.node(l)
            .propose(Bytes::from_static(data))
            .expect("leader takes it")
    }
}

/// Delivers the messages accepted by `keep`; drops the rest.
pub fn deliver(c: &mut Cluster, msgs: Vec<Message>, keep: impl Fn(&Message) -> bool) {
    for m in msgs {
        if keep(&m) {
            let to = (m.to.0 - 1) as usize;
            if let Some(g) = c.nodes[to].as_mut() {
                g.step(m).expect("ok");
            }
        }
    }
}
