//! The shape of one simulated run, drawn from its seed.

use helix_raft::rng::SplitMix64;

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
    /// Durable = fsynced; crashes are process crashes (written bytes kept)
    /// or power losses (only fsynced bytes kept). Without it durable =
    /// written and every crash is a process crash.
    pub fsync: bool,
    pub rule: AckRule,
    /// A tiny in-memory budget: forces backpressure and WAL catch-up.
    pub small_memory: bool,
    pub pre_vote: bool,
    pub check_quorum: bool,
    /// Drive each node through `MultiRaft::ready` (coalesced batches per
    /// node pair) instead of group by group.
    pub multi_host: bool,
    /// Ticks per four global ticks, per node (3 slow, 4 normal, 5 fast:
    /// clocks 25% apart).
    pub tick_rates: Vec<u64>,
    /// Share of steps (per mille) that crash nodes.
    pub crash_per_mille: u64,
    /// Share of `Ready`s (per mille) whose handling a crash interrupts.
    pub mid_ready_crash_per_mille: u64,
    /// Network faults (drop, duplicate, delay, replay, partitions) during
    /// the fault phase.
    pub network_faults: bool,
    /// Ticks allowed for every group to acknowledge a new proposal after
    /// faults stop and a majority is up.
    pub liveness_ticks: u64,
    /// Crash every node at once before the liveness phase: always, never,
    /// or (None) on a coin flip.
    pub liveness_crash_all: Option<bool>,
    /// A restarting node may find one group's log damaged: set aside, it
    /// restarts empty as a learner (never while that group has another).
    pub disk_loss: bool,
}

impl SimConfig {
    /// A configuration drawn from the seed.
    pub fn from_seed(seed: u64, steps: usize, rule: AckRule) -> Self {
        let mut r = SplitMix64::new(seed ^ 0x5EED);
        let nodes = if r.in_range(0, 3) == 0 { 5 } else { 3 };
        let skewed = r.in_range(0, 3) == 0;
        SimConfig {
            seed,
            nodes,
            groups: r.in_range(1, 4) as usize,
            steps,
            fsync: r.in_range(0, 3) == 0,
            rule,
            small_memory: r.in_range(0, 3) == 0,
            pre_vote: r.in_range(0, 4) != 0,
            check_quorum: r.in_range(0, 4) != 0,
            multi_host: r.in_range(0, 2) == 0,
            tick_rates: (0..nodes)
                .map(|_| if skewed { r.in_range(3, 6) } else { 4 })
                .collect(),
            crash_per_mille: r.in_range(2, 16),
            mid_ready_crash_per_mille: 2,
            network_faults: true,
            liveness_ticks: 400,
            liveness_crash_all: None,
            // Drawn last: the earlier draws of a seed stay as they were.
            disk_loss: r.in_range(0, 2) == 0,
        }
    }
}
