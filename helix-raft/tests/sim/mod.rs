//! Deterministic simulation of N nodes x M groups.
//!
//! One seed fixes everything: the configuration (3 or 5 nodes, groups,
//! durability mode, pre-vote and check-quorum on or off, per-node clock
//! rates, per-group or MultiRaft host path), the schedule (deliver, tick,
//! propose, read, fsync start and completion, crash of any kind, restart,
//! pause, partition, heal, long isolation of a leader, replay of old
//! messages, transfer, campaign), the network's delays, drops, duplicates
//! and reorderings, and every group's election PRNG. Invariants are checked
//! after every step (`checks.rs`) and after every crash and restart; the
//! first violation stops the run with a message naming the seed.

pub mod checks;
pub mod config;
pub mod crashes;
pub mod ending;
pub mod host;
pub mod network;
pub mod node;
pub mod stats;

use std::collections::{BTreeMap, HashMap, HashSet};

use bytes::Bytes;
use helix_raft::rng::SplitMix64;
use helix_raft::{LogIndex, MessageBatch, NodeId, RaftConfig, Role, Term};

pub use config::{AckRule, SimConfig};
use network::Network;
use node::SimNode;
pub use stats::Stats;

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
    /// The driver's own book: every payload it proposed to this group.
    pub proposed: HashSet<Bytes>,
    /// Where each proposed payload was exposed (it may be only one index).
    pub exposed_at: HashMap<Bytes, u64>,
    /// Proposals answered as written, by index: (term, the client's own
    /// payload). Kept from the client's side, never read from a replica.
    pub answered: BTreeMap<u64, (Term, Bytes)>,
    /// Payloads proposed in the liveness phase that must be acknowledged.
    pub liveness_probe: Option<Bytes>,
    pub liveness_done: bool,
}

impl GroupHistory {
    /// Every entry that must survive: (index, term, bytes) of each entry
    /// exposed (acknowledged or read) and each proposal answered.
    pub fn book(&self) -> impl Iterator<Item = (u64, Term, &Bytes)> {
        self.exposed
            .iter()
            .map(|(i, (t, d, _))| (*i, *t, d))
            .chain(self.answered.iter().map(|(i, (t, d))| (*i, *t, d)))
    }

    /// The highest index in the book (exposed or answered), 0 if none.
    pub fn booked_to(&self) -> u64 {
        let exposed = self.exposed.last_key_value().map_or(0, |(i, _)| *i);
        let answered = self.answered.last_key_value().map_or(0, |(i, _)| *i);
        exposed.max(answered)
    }
}

pub struct Sim {
    pub cfg: SimConfig,
    pub rng: SplitMix64,
    pub now: u64,
    pub nodes: Vec<SimNode>,
    pub net: Network,
    pub history: Vec<GroupHistory>,
    pub stats: Stats,
    /// Faults (mid-ready crashes included) happen only in the fault phase.
    faults_on: bool,
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
                c.pre_vote = cfg.pre_vote;
                c.check_quorum = cfg.check_quorum;
                if cfg.small_memory {
                    c.max_inmem_bytes = 1200;
                }
                c
            })
            .collect();
        let mut nodes: Vec<SimNode> = voters
            .iter()
            .enumerate()
            .map(|(i, id)| SimNode::new(*id, cfg.groups, cfg.tick_rates[i]))
            .collect();
        for (i, n) in nodes.iter_mut().enumerate() {
            n.start(&raft_cfgs[i], rng.next_u64());
        }
        let net = Network::new(cfg.network_faults);
        let history = (0..cfg.groups).map(|_| GroupHistory::default()).collect();
        let stats = Stats {
            multi_host_runs: u64::from(cfg.multi_host),
            skewed_runs: u64::from(cfg.tick_rates.iter().any(|r| *r != 4)),
            pre_vote_off_runs: u64::from(!cfg.pre_vote),
            check_quorum_off_runs: u64::from(!cfg.check_quorum),
            ..Stats::default()
        };
        Sim {
            cfg,
            rng,
            now: 0,
            nodes,
            net,
            history,
            stats,
            faults_on: true,
            raft_cfgs,
            next_payload: 0,
        }
    }

    pub(super) fn fail<T>(&self, msg: String) -> Result<T, String> {
        Err(format!(
            "seed {} (nodes={} groups={} fsync={} small_memory={} pre_vote={} check_quorum={} multi_host={} tick_rates={:?} rule={:?}) at t={}: {msg}",
            self.cfg.seed,
            self.cfg.nodes,
            self.cfg.groups,
            self.cfg.fsync,
            self.cfg.small_memory,
            self.cfg.pre_vote,
            self.cfg.check_quorum,
            self.cfg.multi_host,
            self.cfg.tick_rates,
            self.cfg.rule,
            self.now
        ))
    }

    /// Runs the fault phase, the liveness phase, and the final restart of
    /// every node.
    pub fn run(mut self) -> Result<Stats, String> {
        for _ in 0..self.cfg.steps {
            self.step()?;
            self.check_all()?;
        }
        self.faults_on = false;
        self.liveness()?;
        self.count_elections();
        self.restart_everyone_and_compare()?;
        self.stats.net = self.net.counts;
        Ok(self.stats)
    }

    fn count_elections(&mut self) {
        for n in &self.nodes {
            for g in 0..self.cfg.groups {
                if let Some(r) = n.group(g) {
                    self.stats.elections_won += r.status().elections_won;
                }
            }
        }
    }

    fn step(&mut self) -> Result<(), String> {
        let x = self.rng.in_range(0, 1000);
        match x {
            0..380 => self.deliver_one(),
            380..570 => self.tick(),
            570..720 => self.propose_random(),
            720..770 => self.consumer_read(),
            770..800 => {
                self.fsync_start_random();
                Ok(())
            }
            800..830 => self.fsync_complete_random(),
            830..840 => {
                if self.cfg.network_faults {
                    self.net.partition_random(&mut self.rng, self.cfg.nodes);
                }
                Ok(())
            }
            840..858 => {
                self.net.heal(self.now, &mut self.rng);
                Ok(())
            }
            858..864 => self.transfer_random(),
            864..866 => self.campaign_random(),
            866..867 => {
                self.lose_link_spuriously();
                Ok(())
            }
            867..875 => {
                self.replay_old();
                Ok(())
            }
            875..877 => {
                self.isolate_a_leader();
                Ok(())
            }
            877..880 => {
                self.pause_random();
                Ok(())
            }
            880..884 => self.crash_aimed(),
            _ => {
                let crash_cut = 884 + self.cfg.crash_per_mille;
                if x < crash_cut {
                    self.crash_random()
                } else if x < crash_cut + 2 * self.cfg.crash_per_mille {
                    self.restart_random()
                } else {
                    self.deliver_one()
                }
            }
        }
    }

    /// One global tick: nodes tick at their own rate; paused nodes whose
    /// pause is over resume with their queued input.
    fn tick(&mut self) -> Result<(), String> {
        self.now += 1;
        self.net.expire(self.now, &mut self.rng);
        for n in 0..self.nodes.len() {
            if self.nodes[n].paused_until.is_some_and(|t| t <= self.now) {
                self.resume(n)?;
            }
            if !self.nodes[n].running() {
                continue;
            }
            let node = &mut self.nodes[n];
            node.tick_credit += node.tick_rate;
            while node.tick_credit >= 4 {
                node.tick_credit -= 4;
                node.raft.as_mut().expect("running").tick();
            }
            self.process_node(n)?;
        }
        // Messages overdue by more than the usual delay are delivered now,
        // so the network stays bounded.
        while let Some(b) = self.net.pop_overdue(self.now, &mut self.rng) {
            self.deliver(b)?;
        }
        Ok(())
    }

    fn deliver_one(&mut self) -> Result<(), String> {
        match self.net.pop_random(self.now, &mut self.rng) {
            Some(b) => self.deliver(b),
            None => Ok(()),
        }
    }

    fn deliver(&mut self, batch: MessageBatch) -> Result<(), String> {
        let n = (batch.to.0 - 1) as usize;
        if !self.nodes[n].up() {
            return Ok(());
        }
        if self.nodes[n].paused_until.is_some() {
            self.nodes[n].inbox.push_back(batch);
            return Ok(());
        }
        if trace() {
            for m in &batch.messages {
                eprintln!(
                    "t={} deliver g{} {}->{} term {} {:?}",
                    self.now, m.group, m.from, m.to, m.term, m.body
                );
            }
        }
        if self.cfg.multi_host {
            let multi = self.nodes[n].raft.as_mut().expect("up");
            match multi.step_batch(batch) {
                Ok(d) if d.rejected == 0 && d.unknown_group == 0 => {}
                Ok(d) => return self.fail(format!("step_batch refused messages: {d:?}")),
                Err(e) => return self.fail(format!("step_batch refused a batch: {e}")),
            }
        } else {
            for m in batch.messages {
                let g = m.group.0 as usize;
                let r = self.nodes[n].group_mut(g).expect("every group is hosted");
                if let Err(e) = r.step(m) {
                    return self.fail(format!("step rejected a well-formed message: {e}"));
                }
            }
        }
        self.process_node(n)
    }

    /// The leader of group `g` with the highest term among running nodes.
    fn leader_of(&self, g: usize) -> Option<usize> {
        (0..self.nodes.len())
            .filter(|n| self.nodes[*n].running())
            .filter(|n| {
                self.nodes[*n]
                    .group(g)
                    .is_some_and(|r| r.role() == Role::Leader)
            })
            .max_by_key(|n| self.nodes[*n].group(g).map(|r| r.term()))
    }

    fn propose_random(&mut self) -> Result<(), String> {
        let g = self.rng.in_range(0, self.cfg.groups as u64) as usize;
        let n = match self.leader_of(g) {
            Some(n) if self.rng.in_range(0, 10) > 0 => n,
            _ => self.rng.in_range(0, self.nodes.len() as u64) as usize,
        };
        if !self.nodes[n].running() {
            return Ok(());
        }
        self.next_payload += 1;
        let len = self.rng.in_range(0, 48) as usize;
        let mut data = format!("g{g}-p{}-", self.next_payload).into_bytes();
        data.resize(data.len() + len, b'.');
        self.propose(n, g, Bytes::from(data))?;
        Ok(())
    }

    /// Proposes `data` on node `n`, recording it in the driver's book and,
    /// if taken, as a proposal the node must answer.
    fn propose(&mut self, n: usize, g: usize, data: Bytes) -> Result<bool, String> {
        self.history[g].proposed.insert(data.clone());
        let r = self.nodes[n].group_mut(g).expect("running");
        let term = r.term();
        let taken = match r.propose(data.clone()) {
            Ok(index) => {
                self.nodes[n].groups[g]
                    .pending
                    .push(node::Pending { index, term, data });
                true
            }
            Err(helix_raft::ProposeError::Backpressure) => {
                self.stats.backpressure += 1;
                false
            }
            Err(_) => false,
        };
        self.process_node(n)?;
        Ok(taken)
    }

    /// Starts an fsync of every group's WAL on one node (it completes later).
    fn fsync_start_random(&mut self) {
        let n = self.rng.in_range(0, self.nodes.len() as u64) as usize;
        if !self.nodes[n].up() || !self.cfg.fsync {
            return;
        }
        for host in &mut self.nodes[n].groups {
            if host.wal.fsync_started.is_none() {
                host.wal.fsync_started = Some(host.wal.entries.len());
            }
        }
    }

    /// Completes a node's running fsync: what it covered is durable.
    fn fsync_complete_random(&mut self) -> Result<(), String> {
        let n = self.rng.in_range(0, self.nodes.len() as u64) as usize;
        if !self.nodes[n].running() || !self.cfg.fsync {
            return Ok(());
        }
        for g in 0..self.cfg.groups {
            let host = &mut self.nodes[n].groups[g];
            let Some(covered) = host.wal.fsync_started.take() else {
                continue;
            };
            host.wal.fsynced = host.wal.fsynced.max(covered);
            let durable = LogIndex(host.wal.fsynced as u64);
            let r = self.nodes[n].group_mut(g).expect("running");
            if let Err(e) = r.durable_to(durable) {
                return self.fail(format!("durable_to({durable}) refused: {e}"));
            }
        }
        self.process_node(n)
    }

    fn transfer_random(&mut self) -> Result<(), String> {
        let g = self.rng.in_range(0, self.cfg.groups as u64) as usize;
        let Some(n) = self.leader_of(g) else {
            return Ok(());
        };
        let to = NodeId(self.rng.in_range(1, self.cfg.nodes as u64 + 1));
        if let Some(r) = self.nodes[n].group_mut(g) {
            r.transfer_leader(to);
            self.stats.transfers += 1;
        }
        self.process_node(n)
    }

    fn campaign_random(&mut self) -> Result<(), String> {
        let n = self.rng.in_range(0, self.nodes.len() as u64) as usize;
        let g = self.rng.in_range(0, self.cfg.groups as u64) as usize;
        if !self.nodes[n].running() {
            return Ok(());
        }
        self.nodes[n].group_mut(g).expect("running").campaign();
        self.stats.campaigns += 1;
        self.process_node(n)
    }

    /// Delivers again a batch from the past, preferably to a leader of a
    /// later term than the batch's (stale answers reaching a new leader).
    fn replay_old(&mut self) {
        if !self.cfg.network_faults {
            return;
        }
        let nodes = &self.nodes;
        self.net.replay(self.now, &mut self.rng, |b| {
            let to = &nodes[(b.to.0 - 1) as usize];
            b.messages.iter().any(|m| {
                to.group(m.group.0 as usize)
                    .is_some_and(|r| r.role() == Role::Leader && r.term() > m.term)
            })
        });
    }

    /// Cuts a group's leader off for 3 to 15 election timeouts.
    fn isolate_a_leader(&mut self) {
        if !self.cfg.network_faults {
            return;
        }
        let g = self.rng.in_range(0, self.cfg.groups as u64) as usize;
        if let Some(n) = self.leader_of(g) {
            let until = self.now + self.rng.in_range(30, 300);
            self.net.isolate(self.nodes[n].id, until);
        }
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
