//! The run's ending, once the faults stop: the liveness phase (heal, bring
//! at least a majority up, every group must acknowledge something new) and
//! the final restart of every node, after which every node's WAL must hold
//! the whole book.

use bytes::Bytes;
use helix_raft::{LogIndex, Term};

use super::Sim;

impl Sim {
    /// Heals everything and resumes paused nodes: the faults are over.
    fn calm(&mut self) -> Result<(), String> {
        self.net.heal_all(self.now, &mut self.rng);
        self.net.set_faults(false);
        for n in 0..self.nodes.len() {
            if self.nodes[n].paused_until.is_some() {
                self.resume(n)?;
            }
        }
        Ok(())
    }

    /// One tick of a calm cluster: deliver everything due, fsync everyone.
    pub(super) fn calm_tick(&mut self) -> Result<(), String> {
        self.tick()?;
        while let Some(b) = self.net.pop_random(self.now, &mut self.rng) {
            self.deliver(b)?;
        }
        if self.cfg.fsync {
            for n in 0..self.nodes.len() {
                if self.nodes[n].up() {
                    self.fsync_node(n)?;
                }
            }
        }
        self.check_all()
    }

    /// After faults stop: heal, optionally crash everyone, bring a majority
    /// (at least) up, and require every group to acknowledge a new proposal.
    pub(super) fn liveness(&mut self) -> Result<(), String> {
        self.calm()?;
        let coin = self.rng.in_range(0, 2) == 0;
        if self.cfg.liveness_crash_all.unwrap_or(coin) {
            for n in 0..self.nodes.len() {
                if self.nodes[n].up() {
                    self.crash_node(n);
                }
            }
            self.stats.all_crashed += 1;
        }
        let quorum = self.cfg.nodes / 2 + 1;
        let mut want_up = self.rng.in_range(quorum as u64, self.cfg.nodes as u64 + 1) as usize;
        if (0..self.cfg.groups).any(|g| self.has_learner(g)) {
            // A learner does not vote: a bare majority including it may
            // rightly elect no one. Everyone comes up.
            want_up = self.cfg.nodes;
        }
        let mut order: Vec<usize> = (0..self.nodes.len()).collect();
        for i in (1..order.len()).rev() {
            let j = self.rng.in_range(0, i as u64 + 1) as usize;
            order.swap(i, j);
        }
        for &n in order.iter().take(want_up) {
            if !self.nodes[n].up() {
                self.restart(n)?;
            }
        }
        for &n in order.iter().skip(want_up) {
            if self.nodes[n].up() {
                self.crash_node(n);
            }
        }
        self.check_majority_holds("after the liveness restart")?;
        let deadline = self.now + self.cfg.liveness_ticks;
        while self.now < deadline {
            self.calm_tick()?;
            for g in 0..self.cfg.groups {
                if self.history[g].liveness_done {
                    continue;
                }
                if let Some(n) = self.leader_of(g) {
                    let needs_new = match &self.history[g].liveness_probe {
                        None => true,
                        // Re-propose if the leader changed and the probe may be lost.
                        Some(_) => self.now.is_multiple_of(50),
                    };
                    if needs_new {
                        self.next_payload += 1;
                        let data = Bytes::from(format!("liveness-g{g}-{}", self.next_payload));
                        if self.propose(n, g, data.clone())? {
                            self.history[g].liveness_probe = Some(data);
                        }
                    }
                }
            }
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

    /// The last word: crash every node, restart every node, wait until a
    /// new entry of every group is acknowledged on every node, then require
    /// every entry ever acknowledged or read in every node's WAL.
    pub(super) fn restart_everyone_and_compare(&mut self) -> Result<(), String> {
        for n in 0..self.nodes.len() {
            if self.nodes[n].up() {
                self.crash_node(n);
            }
        }
        for n in 0..self.nodes.len() {
            self.restart(n)?;
        }
        self.check_majority_holds("after the final restart")?;
        let mut probes: Vec<Option<(LogIndex, Term, Bytes)>> = vec![None; self.cfg.groups];
        let deadline = self.now + self.cfg.liveness_ticks;
        loop {
            if self.now >= deadline {
                return self.fail(format!(
                    "final restart liveness: not every node acknowledged a new entry within {} ticks ({probes:?})",
                    self.cfg.liveness_ticks
                ));
            }
            self.calm_tick()?;
            let mut done = true;
            for (g, probe) in probes.iter_mut().enumerate() {
                // Past the probe and past everything in the book: a probe
                // of an earlier term may be acknowledged before entries a
                // later leader exposed have reached every node.
                let booked = self.history[g].booked_to();
                let everywhere = probe.as_ref().is_some_and(|(i, t, d)| {
                    self.nodes.iter().all(|node| {
                        node.group(g)
                            .is_some_and(|r| r.acknowledged() >= (*i).max(LogIndex(booked)))
                            && node.groups[g].wal.holds(i.0, *t, d)
                    })
                });
                if everywhere {
                    continue;
                }
                done = false;
                let Some(n) = self.leader_of(g) else {
                    continue;
                };
                let r = self.nodes[n].group(g).expect("leader is up");
                let stale = probe
                    .as_ref()
                    .is_none_or(|(_, t, _)| *t != r.term() && self.now.is_multiple_of(50));
                if stale {
                    self.next_payload += 1;
                    let data = Bytes::from(format!("final-g{g}-{}", self.next_payload));
                    let term = r.term();
                    self.history[g].proposed.insert(data.clone());
                    let r = self.nodes[n].group_mut(g).expect("leader is up");
                    if let Ok(index) = r.propose(data.clone()) {
                        *probe = Some((index, term, data));
                    }
                    self.process_node(n)?;
                }
            }
            if done {
                break;
            }
        }
        for g in 0..self.cfg.groups {
            self.stats.learners_restored += self
                .nodes
                .iter()
                .filter(|n| n.groups[g].lost_log && !n.groups[g].hard_state.learner)
                .count() as u64;
            for (i, t, d) in self.history[g].book() {
                if let Some(node) = self
                    .nodes
                    .iter()
                    .find(|node| !node.groups[g].wal.holds(i, t, d))
                {
                    let msg = format!(
                        "final restart: node {} group {g} lacks acknowledged entry {i} (term {t})",
                        node.id
                    );
                    return self.fail(msg);
                }
            }
        }
        Ok(())
    }
}
