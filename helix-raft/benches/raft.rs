//! Criterion benchmarks of the Raft core (no I/O: instant in-process
//! network, WAL = "append" by handing the entry back as durable).
//!
//! - `replicate_1kib`: 3 nodes x 1 group, 1 KiB proposals in batches of 64,
//!   driven until every proposal is acknowledged: acknowledged entries/s.
//! - `idle_tick_1000_groups`: 3 nodes x 1,000 idle groups (leaders spread
//!   over the nodes): CPU time of one tick of the whole cluster, including
//!   encoding, decoding and answering the coalesced heartbeats. The
//!   heartbeat bytes between two nodes per tick are printed once.

use std::time::{Duration, Instant};

use bytes::Bytes;
use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use helix_raft::{
    GroupId, LogIndex, Message, MultiRaft, NodeId, RaftConfig, RaftGroup, Restored, decode_batch,
    encode_batch,
};

const PAYLOAD: usize = 1024;
const BATCH: usize = 64;
const PER_ITER: usize = 1024;

struct Group3 {
    nodes: Vec<RaftGroup>,
}

impl Group3 {
    fn new() -> Self {
        Self::with_voters(3)
    }

    fn with_voters(n: u64) -> Self {
        let voters: Vec<NodeId> = (1..=n).map(NodeId).collect();
        let nodes = voters
            .iter()
            .map(|id| {
                let mut cfg = RaftConfig::new(*id, voters.clone());
                cfg.max_append_bytes = 256 << 10;
                RaftGroup::new(GroupId(1), cfg, Restored::fresh(id.0)).expect("valid")
            })
            .collect();
        let mut c = Group3 { nodes };
        c.nodes[0].campaign();
        c.settle();
        c
    }

    /// One round: every node's ready is handled, messages delivered.
    fn round(&mut self) -> usize {
        let mut msgs: Vec<Message> = Vec::new();
        for g in &mut self.nodes {
            // A host drains until quiet: durable_to may queue a report.
            while g.has_ready() {
                let rd = g.ready();
                if let Some(last) = rd.to_apply.last() {
                    g.durable_to(last.index).expect("applied");
                }
                msgs.extend(rd.messages);
            }
        }
        let n = msgs.len();
        for m in msgs {
            let to = (m.to.0 - 1) as usize;
            self.nodes[to].step(m).expect("valid");
        }
        n
    }

    fn settle(&mut self) {
        while self.round() > 0 || self.nodes.iter().any(RaftGroup::has_ready) {}
    }
}

/// Message hops (delivery rounds) from one proposal to commit and to
/// acknowledged on an idle 3-node group.
fn print_hops() {
    let mut c = Group3::new();
    let idx = c.nodes[0]
        .propose(Bytes::from_static(b"x"))
        .expect("leader");
    let (mut rounds, mut commit_at, mut ack_at) = (0, None, None);
    while ack_at.is_none() && rounds < 20 {
        c.round();
        rounds += 1;
        if commit_at.is_none() && c.nodes[0].status().commit >= idx {
            commit_at = Some(rounds);
        }
        if c.nodes[0].acknowledged() >= idx {
            ack_at = Some(rounds);
        }
    }
    // Each round delivers one hop of messages.
    eprintln!(
        "hops from propose: commit after {commit_at:?} message hops, acknowledged after {ack_at:?}"
    );
}

fn replicate(c: &mut Criterion) {
    print_hops();
    let payload = Bytes::from(vec![7u8; PAYLOAD]);
    let mut g = c.benchmark_group("replicate_1kib");
    g.throughput(Throughput::Elements(PER_ITER as u64));
    g.bench_function("1_node_baseline_batches_of_64", |b| {
        let mut cluster = Group3::with_voters(1);
        b.iter(|| {
            let mut last = LogIndex(0);
            for _ in 0..PER_ITER / BATCH {
                for _ in 0..BATCH {
                    last = cluster.nodes[0].propose(payload.clone()).expect("leader");
                }
                cluster.round();
            }
            while cluster.nodes[0].acknowledged() < last {
                cluster.round();
            }
        });
    });
    g.bench_function("3_nodes_batches_of_64", |b| {
        let mut cluster = Group3::new();
        b.iter(|| {
            let mut last = LogIndex(0);
            for _ in 0..PER_ITER / BATCH {
                for _ in 0..BATCH {
                    last = cluster.nodes[0].propose(payload.clone()).expect("leader");
                }
                cluster.round();
            }
            while cluster.nodes[0].acknowledged() < last {
                cluster.round();
            }
        });
    });
    g.finish();
}

struct Cluster {
    nodes: Vec<MultiRaft>,
    /// Bytes sent from node 1 to node 2 since the last reset.
    bytes_1_to_2: usize,
}

impl Cluster {
    fn new(groups: u64) -> Self {
        let voters: Vec<NodeId> = (1..=3).map(NodeId).collect();
        let mut nodes: Vec<MultiRaft> = voters.iter().map(|id| MultiRaft::new(*id)).collect();
        for (i, m) in nodes.iter_mut().enumerate() {
            for g in 0..groups {
                let cfg = RaftConfig::new(voters[i], voters.clone());
                m.add_group(GroupId(g), cfg, Restored::fresh(g * 3 + i as u64))
                    .expect("new");
            }
        }
        for g in 0..groups {
            let leader = (g % 3) as usize;
            nodes[leader]
                .group_mut(GroupId(g))
                .expect("exists")
                .campaign();
        }
        let mut c = Cluster {
            nodes,
            bytes_1_to_2: 0,
        };
        c.settle();
        c
    }

    fn round(&mut self) -> usize {
        let mut batches = Vec::new();
        for m in &mut self.nodes {
            let rd = m.ready();
            for (gid, r) in &rd.groups {
                if let Some(last) = r.to_apply.last() {
                    m.durable_to(*gid, last.index).expect("applied");
                }
            }
            for b in &rd.batches {
                let bytes = encode_batch(b);
                if b.from == NodeId(1) && b.to == NodeId(2) {
                    self.bytes_1_to_2 += bytes.len();
                }
                batches.push(bytes);
            }
        }
        let n = batches.len();
        for bytes in batches {
            let batch = decode_batch(bytes).expect("own encoding");
            let to = (batch.to.0 - 1) as usize;
            self.nodes[to].step_batch(batch).expect("addressed");
        }
        n
    }

    fn settle(&mut self) {
        while self.round() > 0 || self.nodes.iter().any(MultiRaft::has_ready) {}
    }

    fn tick(&mut self) {
        for m in &mut self.nodes {
            m.tick();
        }
        self.settle();
    }
}

fn idle_tick(c: &mut Criterion) {
    for groups in [10u64, 1000] {
        let mut cluster = Cluster::new(groups);
        cluster.tick();
        cluster.bytes_1_to_2 = 0;
        let ticks = 20;
        let start = Instant::now();
        for _ in 0..ticks {
            cluster.tick();
        }
        let per_tick = start.elapsed() / ticks;
        eprintln!(
            "idle {groups} groups x 3 nodes: heartbeat bytes node1->node2 per tick = {} ({:.2} per group), cluster tick = {per_tick:?}",
            cluster.bytes_1_to_2 / ticks as usize,
            cluster.bytes_1_to_2 as f64 / ticks as f64 / groups as f64
        );
    }
    let mut cluster = Cluster::new(1000);
    c.bench_function("idle_tick_1000_groups_3_nodes", |b| {
        b.iter(|| cluster.tick())
    });
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3))
        .sample_size(10);
    targets = replicate, idle_tick
}
criterion_main!(benches);
