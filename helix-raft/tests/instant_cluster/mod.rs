//! Test harness shared by the black-box API tests: three replicas (or n)
//! on an instant network, each WAL a Vec, catch-up served from it as the
//! server does. Each test binary uses part of it.
#![allow(dead_code)]

use bytes::Bytes;
use helix_raft::{
    Entry, GroupId, LogIndex, Message, NodeId, RaftConfig, RaftGroup, Ready, Restored,
};

/// A group of one voter (node 1), fresh.
pub fn one_voter() -> RaftGroup {
    let cfg = RaftConfig::new(NodeId(1), vec![NodeId(1)]);
    RaftGroup::new(GroupId(7), cfg, Restored::fresh(1)).expect("valid config")
}

/// Three replicas, instant network, WAL = Vec per node.
pub struct Cluster {
    pub nodes: Vec<RaftGroup>,
    pub wals: Vec<Vec<Entry>>,
    pub acked: Vec<LogIndex>,
    pub hops: usize,
    /// A node that is down: not driven, messages to it dropped.
    pub down: Option<usize>,
}

impl Cluster {
    pub fn new(n: u64) -> Self {
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

    pub fn handle(&mut self, i: usize, rd: Ready) -> Vec<Message> {
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
    pub fn led_by_node_1_holding(data: &'static [u8]) -> Self {
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
    pub fn settle(&mut self) -> usize {
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
