//! What happens to nodes: pauses, crashes of every kind (one node, a
//! majority, all of them, aimed at an election or an unacknowledged term),
//! the connections the survivors see break, and restarts (with a lost log
//! now and then, rejoining as a learner).

use helix_raft::{NodeId, Role};

use super::{Sim, trace};

impl Sim {
    /// Stops a node (memory intact) for up to 6 election timeouts.
    pub(super) fn pause_random(&mut self) {
        let n = self.rng.in_range(0, self.nodes.len() as u64) as usize;
        if !self.nodes[n].running() {
            return;
        }
        let until = self.now + self.rng.in_range(1, 120);
        self.nodes[n].paused_until = Some(until);
        self.stats.pauses += 1;
    }

    pub(super) fn resume(&mut self, n: usize) -> Result<(), String> {
        self.nodes[n].paused_until = None;
        while let Some(b) = self.nodes[n].inbox.pop_front() {
            self.deliver(b)?;
            if !self.nodes[n].running() {
                break;
            }
        }
        self.process_node(n)
    }

    /// A crash of the kind the durability mode can suffer.
    pub(super) fn crash_node(&mut self, n: usize) {
        if trace() {
            eprintln!("t={} crash node {}", self.now, n + 1);
        }
        let power_loss = self.cfg.fsync && self.rng.in_range(0, 2) == 0;
        self.nodes[n].crash(power_loss);
        self.stats.crashes += 1;
        if power_loss {
            self.stats.power_losses += 1;
        } else {
            self.stats.process_crashes += 1;
        }
        if self.nodes.iter().all(|n| !n.up()) {
            self.stats.all_crashed += 1;
        }
        if !power_loss {
            // The kernel closed the process's connections: the nodes that
            // notice (not all do, not always) campaign for its groups soon.
            let lost = self.nodes[n].id;
            for m in 0..self.nodes.len() {
                if m != n && self.rng.in_range(0, 2) == 0 {
                    self.lose_link(m, lost);
                }
            }
        }
    }

    /// Node `m`'s host reports its connection to `lost` broken (after a
    /// crash, or spuriously while `lost` runs on).
    fn lose_link(&mut self, m: usize, lost: NodeId) {
        if let Some(raft) = self.nodes[m].raft.as_mut() {
            raft.peer_lost(lost);
            self.stats.links_lost += 1;
        }
    }

    /// A connection between two running nodes breaks while both live.
    pub(super) fn lose_link_spuriously(&mut self) {
        let m = self.rng.in_range(0, self.nodes.len() as u64) as usize;
        let lost = NodeId(self.rng.in_range(1, self.cfg.nodes as u64 + 1));
        if lost != self.nodes[m].id {
            self.lose_link(m, lost);
            self.stats.spurious_links_lost += 1;
        }
    }

    /// One node, two, a majority but not all (3 or 4 of 5), or all at once.
    pub(super) fn crash_random(&mut self) -> Result<(), String> {
        let up: Vec<usize> = (0..self.nodes.len())
            .filter(|n| self.nodes[*n].up())
            .collect();
        if up.is_empty() {
            return Ok(());
        }
        let quorum = self.cfg.nodes as u64 / 2 + 1;
        let k = match self.rng.in_range(0, 10) {
            0..6 => 1,
            6..8 => 2,
            8 => self.rng.in_range(quorum, self.cfg.nodes as u64) as usize,
            _ => up.len(),
        }
        .min(up.len());
        if k >= quorum as usize {
            self.stats.majority_crashes += 1;
        }
        let mut pool = up;
        for _ in 0..k {
            let i = self.rng.in_range(0, pool.len() as u64) as usize;
            let n = pool.swap_remove(i);
            self.crash_node(n);
        }
        self.check_majority_holds("after a crash")
    }

    /// Crashes a node where it hurts: a (pre-)candidate mid-election, or a
    /// leader that has not yet acknowledged an entry of its term.
    pub(super) fn crash_aimed(&mut self) -> Result<(), String> {
        let targets: Vec<usize> = (0..self.nodes.len())
            .filter(|n| {
                (0..self.cfg.groups).any(|g| {
                    self.nodes[*n].group(g).is_some_and(|r| match r.role() {
                        Role::Candidate | Role::PreCandidate => true,
                        Role::Leader => r.term_at(r.acknowledged()) != Some(r.term()),
                        Role::Follower => false,
                    })
                })
            })
            .collect();
        if targets.is_empty() {
            return Ok(());
        }
        let n = targets[self.rng.in_range(0, targets.len() as u64) as usize];
        self.stats.aimed_crashes += 1;
        self.crash_node(n);
        self.check_majority_holds("after an aimed crash")
    }

    pub(super) fn restart_random(&mut self) -> Result<(), String> {
        let down: Vec<usize> = (0..self.nodes.len())
            .filter(|n| !self.nodes[*n].up())
            .collect();
        if down.is_empty() {
            return Ok(());
        }
        let n = down[self.rng.in_range(0, down.len() as u64) as usize];
        self.restart(n)?;
        self.check_majority_holds("after a restart")
    }

    pub(super) fn restart(&mut self, n: usize) -> Result<(), String> {
        if trace() {
            eprintln!("t={} restart node {}", self.now, n + 1);
        }
        let seed = self.rng.next_u64();
        if self.faults_on && self.cfg.disk_loss && self.rng.in_range(0, 4) == 0 {
            let g = self.rng.in_range(0, self.cfg.groups as u64) as usize;
            // One lost log per group at a time: two are more than Raft's
            // majority can cover.
            if !self.has_learner(g) {
                if trace() {
                    eprintln!("t={} node {} loses group {g}'s log", self.now, n + 1);
                }
                // Half the time the whole log (a replaced disk), else
                // only a tail (a lost page cache): its prefix is kept.
                let len = self.nodes[n].groups[g].wal.entries.len() as u64;
                let keep = if self.rng.in_range(0, 2) == 0 {
                    0
                } else {
                    self.rng.in_range(0, len + 1) as usize
                };
                self.nodes[n].lose_log(g, keep);
                self.stats.disk_losses += 1;
            }
        }
        self.nodes[n].start(&self.raft_cfgs[n], seed);
        self.process_node(n)
    }

    /// Whether a replica of group `g` is a learner (persisted: it lost its
    /// log and has not yet been restored).
    pub(super) fn has_learner(&self, g: usize) -> bool {
        self.nodes.iter().any(|n| n.groups[g].hard_state.learner)
    }
}
