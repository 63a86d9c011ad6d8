//! Deterministic simulation of N nodes x M groups.
//!
//! One seed fixes everything: the schedule (deliver, tick, propose, read,
//! crash, restart, partition, heal, transfer, fsync), the network's delays,
//! drops, duplicates and reorderings, and every group's election PRNG.
//! Invariants are checked after every step (`checks.rs`); the first
//! violation stops the run with a message naming the seed.

pub mod checks;
pub mod host;
pub mod network;
pub mod node;

use std::collections::{BTreeMap, HashMap};

use bytes::Bytes;
use helix_raft::rng::SplitMix64;
use helix_raft::{LogIndex, NodeId, RaftConfig, Role, Term};

use network::Network;
use node::SimNode;

/// When producers are answered (and consumers may read).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AckRule {
    /// DESIGN.md: the acknowledged index (durable on a majority, current term).
    Acknowledged,
    /// The hazard: the leader's commit index (majority in memory).
    CommitIndex,
}

/// Shape of one simulated run.
#[derive(Clone, Debug)]
pub struct SimConfig {
    pub seed: u64,
    pub nodes: usize,
    pub groups: usize,
    pub steps: usize,
    /// Durable = fsynced; a crash is a power loss keeping only fsynced WAL.
    pub fsync: bool,
    pub rule: AckRule,
    /// A tiny in-memory budget: forces backpressure and WAL catch-up.
    pub small_memory: bool,
    /// Share of steps (per mille) that crash nodes.
    pub crash_per_mille: u64,
    /// Network faults (drop, duplicate, partitions) during the fault phase.
    pub network_faults: bool,
    /// Ticks allowed for every group to acknowledge a new proposal after
    /// faults stop and a majority is up.
    pub liveness_ticks: u64,
    /// Crash every node at once before the liveness phase: always, never,
    /// or (None) on a coin flip.
    pub liveness_crash_all: Option<bool>,
}

impl SimConfig {
    /// A configuration drawn from the seed: 3 or 5 nodes, 1 to 3 groups,
    /// both durability modes, sometimes a tiny memory budget.
    pub fn from_seed(seed: u64, steps: usize, rule: AckRule) -> Self {
        let mut r = SplitMix64::new(seed ^ 0x5EED);
        SimConfig {
            seed,
            nodes: if r.in_range(0, 3) == 0 { 5 } else { 3 },
            groups: r.in_range(1, 4) as usize,
            steps,
            fsync: r.in_range(0, 3) == 0,
            rule,
            small_memory: r.in_range(0, 3) == 0,
            crash_per_mille: r.in_range(2, 16),
            network_faults: true,
            liveness_ticks: 400,
            liveness_crash_all: None,
        }
    }
}

/// What a run exercised (summed over seeds to show the faults happened).
#[derive(Clone, Copy, Debug, Default)]
pub struct Stats {
    pub acknowledged: u64,
    pub consumer_reads: u64,
    pub crashes: u64,
    pub all_crashed: u64,
    pub elections_won: u64,
    pub wal_truncations: u64,
    pub catch_up_entries: u64,
    pub backpressure: u64,
    pub transfers: u64,
}

/// The history the checks compare against, per group.
#[derive(Debug, Default)]
pub struct GroupHistory {
    /// Every entry ever acknowledged or read by a consumer, by index:
    /// (entry term, bytes, lowest term of a replica that exposed it). Raft's
    /// guarantees hold for leaders (and replicas) of that term and later; a
    /// stale leader of an older term may legitimately lack it.
    pub exposed: BTreeMap<u64, (Term, Bytes, Term)>,
    /// Exposure order (indexes), so leaders are checked incrementally.
    pub exposed_log: Vec<u64>,
    /// Leader of each term.
    pub leaders: HashMap<Term, NodeId>,
    /// Per (term) leader seen: how far into `exposed_log` it was checked.
    pub leader_checked: HashMap<Term, usize>,
    /// Payloads proposed in the liveness phase that must be acknowledged.
    pub liveness_probe: Option<Bytes>,
    pub liveness_done: bool,
}

pub struct Sim {
    pub cfg: SimConfig,
    pub rng: SplitMix64,
    pub now: u64,
    pub nodes: Vec<SimNode>,
    pub net: Network,
    pub history: Vec<GroupHistory>,
    pub stats: Stats,
    raft_cfgs: Vec<RaftConfig>,
    next_payload: u64,
}

impl Sim {
    pub fn new(cfg: SimConfig) -> Self {
        let mut rng = SplitMix64::new(cfg.seed);
        let voters: Vec<NodeId> = (1..=cfg.nodes as u64).map(NodeId).collect();
        let raft_cfgs: Vec<RaftConfig> = voters
            .iter()
            .map(|id| {
                let mut c = RaftConfig::new(*id, voters.clone());
                c.election_ticks = 10;
                c.heartbeat_ticks = 2;
                c.max_inflight_appends = 3;
                c.max_append_bytes = 400;
                if cfg.small_memory {
                    c.max_inmem_bytes = 1200;
                }
                c
            })
            .collect();
        let mut nodes: Vec<SimNode> = voters
            .iter()
            .map(|id| SimNode::new(*id, cfg.groups))
            .collect();
        for (i, n) in nodes.iter_mut().enumerate() {
            n.start(&raft_cfgs[i], rng.next_u64());
        }
        let net = Network::new(cfg.network_faults);
        let history = (0..cfg.groups).map(|_| GroupHistory::default()).collect();
        Sim {
            cfg,
            rng,
            now: 0,
            nodes,
            net,
            history,
            stats: Stats::default(),
            raft_cfgs,
            next_payload: 0,
        }
    }

    pub(super) fn fail<T>(&self, msg: String) -> Result<T, String> {
        Err(format!(
            "seed {} (nodes={} groups={} fsync={} small_memory={} rule={:?}) at t={}: {msg}",
            self.cfg.seed,
            self.cfg.nodes,
            self.cfg.groups,
            self.cfg.fsync,
            self.cfg.small_memory,
            self.cfg.rule,
            self.now
        ))
    }

    /// Runs the fault phase, then the liveness phase.
    pub fn run(mut self) -> Result<Stats, String> {
        for _ in 0..self.cfg.steps {
            self.step()?;
            self.check_all()?;
        }
        self.liveness()?;
        for n in &self.nodes {
            for h in &n.groups {
                if let Some(r) = &h.raft {
                    let st = r.status();
                    self.stats.elections_won += st.elections_won;
                }
            }
        }
        Ok(self.stats)
    }

    fn step(&mut self) -> Result<(), String> {
        let x = self.rng.in_range(0, 1000);
        match x {
            0..400 => self.deliver_one(),
            400..600 => self.tick(),
            600..760 => self.propose_random(),
            760..820 => self.consumer_read(),
            820..870 => self.fsync_random(),
            870..880 => {
                if self.cfg.network_faults {
                    self.net.partition_random(&mut self.rng, self.cfg.nodes);
                }
                Ok(())
            }
            880..900 => {
                self.net.heal();
                Ok(())
            }
            900..906 => self.transfer_random(),
            _ => {
                let crash_cut = 906 + self.cfg.crash_per_mille;
                if x < crash_cut {
                    self.crash_random();
                    Ok(())
                } else if x < crash_cut + 2 * self.cfg.crash_per_mille {
                    self.restart_random()
                } else {
                    self.deliver_one()
                }
            }
        }
    }

    fn tick(&mut self) -> Result<(), String> {
        self.now += 1;
        for n in 0..self.nodes.len() {
            if !self.nodes[n].up {
                continue;
            }
            for g in 0..self.cfg.groups {
                if let Some(r) = self.nodes[n].groups[g].raft.as_mut() {
                    r.tick();
                }
                self.process(n, g)?;
            }
        }
        // Messages overdue by more than the maximum delay are delivered now,
        // so the network stays bounded.
        while let Some(m) = self.net.pop_overdue(self.now, &mut self.rng) {
            self.deliver(m)?;
        }
        Ok(())
    }

    fn deliver_one(&mut self) -> Result<(), String> {
        match self.net.pop_random(self.now, &mut self.rng) {
            Some(m) => self.deliver(m),
            None => Ok(()),
        }
    }

    fn deliver(&mut self, m: helix_raft::Message) -> Result<(), String> {
        let n = (m.to.0 - 1) as usize;
        let g = m.group.0 as usize;
        if !self.nodes[n].up {
            return Ok(());
        }
        let Some(r) = self.nodes[n].groups[g].raft.as_mut() else {
            return Ok(());
        };
        if trace() {
            eprintln!(
                "t={} deliver g{g} {}->{} term {} {:?}",
                self.now, m.from, m.to, m.term, m.body
            );
        }
        if let Err(e) = r.step(m) {
            return self.fail(format!("step rejected a well-formed message: {e}"));
        }
        self.process(n, g)
    }

    fn leader_of(&self, g: usize) -> Option<usize> {
        (0..self.nodes.len())
            .filter(|n| self.nodes[*n].up)
            .filter(|n| {
                self.nodes[*n].groups[g]
                    .raft
                    .as_ref()
                    .is_some_and(|r| r.role() == Role::Leader)
            })
            .max_by_key(|n| self.nodes[*n].groups[g].raft.as_ref().map(|r| r.term()))
    }

    fn propose_random(&mut self) -> Result<(), String> {
        let g = self.rng.in_range(0, self.cfg.groups as u64) as usize;
        let n = match self.leader_of(g) {
            Some(n) if self.rng.in_range(0, 10) > 0 => n,
            _ => self.rng.in_range(0, self.nodes.len() as u64) as usize,
        };
        if !self.nodes[n].up {
            return Ok(());
        }
        self.next_payload += 1;
        let len = self.rng.in_range(0, 48) as usize;
        let mut data = format!("g{g}-p{}-", self.next_payload).into_bytes();
        data.resize(data.len() + len, b'.');
        let Some(r) = self.nodes[n].groups[g].raft.as_mut() else {
            return Ok(());
        };
        if let Err(helix_raft::ProposeError::Backpressure) = r.propose(Bytes::from(data)) {
            self.stats.backpressure += 1;
        }
        self.process(n, g)
    }

    fn fsync_random(&mut self) -> Result<(), String> {
        let n = self.rng.in_range(0, self.nodes.len() as u64) as usize;
        if !self.nodes[n].up || !self.cfg.fsync {
            return Ok(());
        }
        // One fsync covers every group's appends on this node.
        for g in 0..self.cfg.groups {
            let host = &mut self.nodes[n].groups[g];
            host.wal.fsynced = host.wal.entries.len();
            let durable = LogIndex(host.wal.fsynced as u64);
            if let Some(r) = host.raft.as_mut()
                && let Err(e) = r.durable_to(durable)
            {
                return self.fail(format!("durable_to({durable}) refused: {e}"));
            }
            self.process(n, g)?;
        }
        Ok(())
    }

    fn transfer_random(&mut self) -> Result<(), String> {
        let g = self.rng.in_range(0, self.cfg.groups as u64) as usize;
        let Some(n) = self.leader_of(g) else {
            return Ok(());
        };
        let to = NodeId(self.rng.in_range(1, self.cfg.nodes as u64 + 1));
        if let Some(r) = self.nodes[n].groups[g].raft.as_mut() {
            r.transfer_leader(to);
            self.stats.transfers += 1;
        }
        self.process(n, g)
    }

    fn crash_random(&mut self) {
        if trace() {
            eprintln!("t={} crash step", self.now);
        }
        let up: Vec<usize> = (0..self.nodes.len())
            .filter(|n| self.nodes[*n].up)
            .collect();
        if up.is_empty() {
            return;
        }
        // One, two, or every live node at once.
        let k = match self.rng.in_range(0, 5) {
            0..3 => 1,
            3 => 2,
            _ => up.len(),
        }
        .min(up.len());
        let mut pool = up;
        for _ in 0..k {
            let i = self.rng.in_range(0, pool.len() as u64) as usize;
            let n = pool.swap_remove(i);
            self.nodes[n].crash(self.cfg.fsync);
            self.stats.crashes += 1;
        }
        if self.nodes.iter().all(|n| !n.up) {
            self.stats.all_crashed += 1;
        }
    }

    fn restart_random(&mut self) -> Result<(), String> {
        let down: Vec<usize> = (0..self.nodes.len())
            .filter(|n| !self.nodes[*n].up)
            .collect();
        if down.is_empty() {
            return Ok(());
        }
        let n = down[self.rng.in_range(0, down.len() as u64) as usize];
        self.restart(n)
    }

    fn restart(&mut self, n: usize) -> Result<(), String> {
        if trace() {
            eprintln!("t={} restart node {}", self.now, n + 1);
        }
        let seed = self.rng.next_u64();
        self.nodes[n].start(&self.raft_cfgs[n], seed);
        for g in 0..self.cfg.groups {
            self.process(n, g)?;
        }
        Ok(())
    }

    /// After faults stop: heal, optionally crash everyone, bring a majority
    /// (at least) up, and require every group to acknowledge a new proposal.
    fn liveness(&mut self) -> Result<(), String> {
        self.net.heal();
        self.net.set_faults(false);
        let coin = self.rng.in_range(0, 2) == 0;
        if self.cfg.liveness_crash_all.unwrap_or(coin) {
            for n in 0..self.nodes.len() {
                if self.nodes[n].up {
                    self.nodes[n].crash(self.cfg.fsync);
                }
            }
            self.stats.all_crashed += 1;
        }
        let quorum = self.cfg.nodes / 2 + 1;
        let want_up = self.rng.in_range(quorum as u64, self.cfg.nodes as u64 + 1) as usize;
        let mut order: Vec<usize> = (0..self.nodes.len()).collect();
        for i in (1..order.len()).rev() {
            let j = self.rng.in_range(0, i as u64 + 1) as usize;
            order.swap(i, j);
        }
        for &n in order.iter().take(want_up) {
            if !self.nodes[n].up {
                self.restart(n)?;
            }
        }
        for &n in order.iter().skip(want_up) {
            if self.nodes[n].up {
                self.nodes[n].crash(self.cfg.fsync);
            }
        }
        let deadline = self.now + self.cfg.liveness_ticks;
        while self.now < deadline {
            self.tick()?;
            while let Some(m) = self.net.pop_random(self.now, &mut self.rng) {
                self.deliver(m)?;
            }
            if self.cfg.fsync {
                for n in 0..self.nodes.len() {
                    if self.nodes[n].up {
                        self.fsync_node(n)?;
                    }
                }
            }
            for g in 0..self.cfg.groups {
                if self.history[g].liveness_done {
                    continue;
                }
                if let Some(n) = self.leader_of(g) {
                    let pending = self.history[g].liveness_probe.clone();
                    let needs_new = match &pending {
                        None => true,
                        // Re-propose if the leader changed and the probe may be lost.
                        Some(_) => self.now.is_multiple_of(50),
                    };
                    if needs_new {
                        self.next_payload += 1;
                        let data = Bytes::from(format!("liveness-g{g}-{}", self.next_payload));
                        if let Some(r) = self.nodes[n].groups[g].raft.as_mut()
                            && r.propose(data.clone()).is_ok()
                        {
                            self.history[g].liveness_probe = Some(data);
                        }
                        self.process(n, g)?;
                    }
                }
            }
            self.check_all()?;
            if self.history.iter().all(|h| h.liveness_done) {
                return Ok(());
            }
        }
        let stuck: Vec<usize> = (0..self.cfg.groups)
            .filter(|g| !self.history[*g].liveness_done)
            .collect();
        self.fail(format!(
            "liveness: groups {stuck:?} acknowledged nothing new within {} ticks after faults stopped with {want_up} of {} nodes up",
            self.cfg.liveness_ticks, self.cfg.nodes
        ))
    }
}

/// Seeds to run: `HELIX_SEEDS` of them (or the default) starting at
/// `HELIX_SEED_OFFSET`; `HELIX_SEED` runs exactly one.
pub fn seeds(default_count: u64, offset: u64) -> Vec<u64> {
    if let Ok(s) = std::env::var("HELIX_SEED") {
        return vec![s.parse().expect("HELIX_SEED is a number")];
    }
    let env = |name: &str| std::env::var(name).ok().and_then(|s| s.parse::<u64>().ok());
    let count = env("HELIX_SEEDS").unwrap_or(default_count);
    let offset = offset + env("HELIX_SEED_OFFSET").unwrap_or(0);
    (offset..offset + count).collect()
}

/// `HELIX_TRACE=1` prints every delivery and every `Ready`.
pub fn trace() -> bool {
    std::env::var("HELIX_TRACE").is_ok()
}
