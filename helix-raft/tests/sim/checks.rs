//! Invariants checked after every simulated step, and at the two host
//! actions that can lose data (WAL truncation) or expose it (apply).

use bytes::Bytes;
use helix_raft::{Entry, LogIndex, RaftGroup, Role, Term};

use super::Sim;

/// Data of `index` in a replica's log: from its WAL, else its memory.
fn data_at<'a>(
    wal: &'a super::node::SimWal,
    r: &'a RaftGroup,
    index: LogIndex,
) -> Option<&'a Bytes> {
    wal.get(index)
        .map(|e| &e.data)
        .or_else(|| r.entry(index).map(|e| &e.data))
}

impl Sim {
    pub fn check_all(&mut self) -> Result<(), String> {
        for g in 0..self.cfg.groups {
            self.check_replicas(g)?;
            self.check_leaders(g)?;
            self.check_log_matching(g)?;
            self.count_leases(g);
        }
        Ok(())
    }

    /// Counts the leader lease held, and held while a newer term already
    /// has a leader (see `Stats::lease_overlaps`).
    fn count_leases(&mut self, g: usize) {
        let leaders: Vec<(helix_raft::Term, bool)> = self
            .nodes
            .iter()
            .filter_map(|n| n.group(g))
            .filter(|r| r.role() == Role::Leader)
            .map(|r| (r.term(), r.has_quorum_lease()))
            .collect();
        let newest = leaders.iter().map(|(t, _)| *t).max();
        let mut held = false;
        for (term, lease) in &leaders {
            if *lease {
                held = true;
                if newest.is_some_and(|n| n > *term) {
                    self.stats.lease_overlaps += 1;
                    let rates = &self.cfg.tick_rates;
                    if rates.iter().all(|r| *r == rates[0]) {
                        self.stats.lease_overlaps_same_clock += 1;
                    }
                }
            }
        }
        self.stats.lease_held += u64::from(held);
    }

    /// Per-replica invariants of the three positions and the WAL.
    fn check_replicas(&self, g: usize) -> Result<(), String> {
        for n in &self.nodes {
            let host = &n.groups[g];
            let Some(r) = n.group(g) else {
                continue;
            };
            let st = r.status();
            let wal_len = host.wal.entries.len() as u64;
            if !(st.durable <= st.applied && st.applied <= st.commit && st.commit <= st.last_index)
            {
                return self.fail(format!(
                    "node {} group {g}: positions out of order: {st:?}",
                    n.id
                ));
            }
            if st.applied.0 != wal_len {
                return self.fail(format!(
                    "node {} group {g}: applied {} but WAL holds {wal_len}",
                    n.id, st.applied
                ));
            }
            if self.cfg.fsync && st.durable.0 > host.wal.fsynced as u64 {
                return self.fail(format!(
                    "node {} group {g}: durable {} beyond fsynced",
                    n.id, st.durable
                ));
            }
            if st.mem_start.0 > st.applied.0 + 1 {
                return self.fail(format!(
                    "node {} group {g}: unapplied entries left memory",
                    n.id
                ));
            }
            if let Some((_, t)) = host.wal.last()
                && st.term < t
            {
                return self.fail(format!(
                    "node {} group {g}: term {} below its last WAL entry's",
                    n.id, st.term
                ));
            }
            if host.hard_state.term != st.term && !r.has_ready() {
                return self.fail(format!("node {} group {g}: term not persisted", n.id));
            }
        }
        Ok(())
    }

    /// Election safety, and leader completeness for every exposed entry.
    fn check_leaders(&mut self, g: usize) -> Result<(), String> {
        for ni in 0..self.nodes.len() {
            let host = &self.nodes[ni].groups[g];
            let Some(r) = self.nodes[ni].group(g) else {
                continue;
            };
            if r.role() != Role::Leader {
                continue;
            }
            let term = r.term();
            let id = self.nodes[ni].id;
            let hist = &self.history[g];
            if let Some(other) = hist.leaders.get(&term)
                && *other != id
            {
                return self.fail(format!(
                    "group {g}: two leaders in term {term}: {other} and {id}"
                ));
            }
            let from = hist.leader_checked.get(&term).copied().unwrap_or(0);
            for &i in &hist.exposed_log[from..] {
                let (t, d, seen) = &hist.exposed[&i];
                if *seen > term {
                    continue;
                }
                let idx = LogIndex(i);
                let ok =
                    r.term_at(idx) == Some(*t) && data_at(&host.wal, r, idx).is_none_or(|x| x == d);
                if !ok {
                    return self.fail(format!(
                        "group {g}: leader {id} of term {term} lacks exposed entry {i} (term {t}); has term {:?}",
                        r.term_at(idx)
                    ));
                }
            }
            let upto = hist.exposed_log.len();
            let hist = &mut self.history[g];
            hist.leaders.insert(term, id);
            hist.leader_checked.insert(term, upto);
        }
        Ok(())
    }

    /// Log matching, sampled: where two replicas agree on the term of an
    /// index, they agree on every earlier index (term and bytes).
    fn check_log_matching(&mut self, g: usize) -> Result<(), String> {
        let up: Vec<usize> = (0..self.nodes.len())
            .filter(|n| self.nodes[*n].group(g).is_some())
            .collect();
        for (ai, &a) in up.iter().enumerate() {
            for &b in &up[ai + 1..] {
                let (ha, hb) = (&self.nodes[a].groups[g], &self.nodes[b].groups[g]);
                let (ra, rb) = (
                    self.nodes[a].group(g).expect("up"),
                    self.nodes[b].group(g).expect("up"),
                );
                let m = ra.status().last_index.min(rb.status().last_index);
                if m.0 == 0 {
                    continue;
                }
                let j = LogIndex(self.rng.in_range(1, m.0 + 1));
                if ra.term_at(j) != rb.term_at(j) {
                    continue;
                }
                for k in [j, LogIndex(self.rng.in_range(1, j.0 + 1))] {
                    let same_term = ra.term_at(k) == rb.term_at(k);
                    let same_data = match (data_at(&ha.wal, ra, k), data_at(&hb.wal, rb, k)) {
                        (Some(x), Some(y)) => x == y,
                        _ => true,
                    };
                    if !same_term || !same_data {
                        return self.fail(format!(
                            "group {g}: log matching broken between nodes {} and {} at {k} (agree at {j})",
                            a + 1,
                            b + 1
                        ));
                    }
                }
            }
        }
        Ok(())
    }

    /// After every crash and restart: every entry acknowledged or read
    /// (from the replicas' reports) and every proposal answered (from the
    /// client's own book) is in the surviving WAL of a majority, up or down.
    pub fn check_majority_holds(&self, when: &str) -> Result<(), String> {
        let quorum = self.cfg.nodes / 2 + 1;
        for g in 0..self.cfg.groups {
            for (i, t, d) in self.history[g].book() {
                // A learner counts as holding: it may have helped
                // acknowledge the entry before it lost its log, and it
                // votes for no one until it holds it again.
                let holding = self
                    .nodes
                    .iter()
                    .filter(|n| n.groups[g].wal.holds(i, t, d) || n.groups[g].hard_state.learner)
                    .count();
                if holding < quorum {
                    return self.fail(format!(
                        "group {g}: {when}, acknowledged entry {i} (term {t}) survives in {holding} WALs, fewer than a majority"
                    ));
                }
            }
        }
        Ok(())
    }

    /// Truncation never removes an exposed entry, and never reaches below
    /// what the replica itself knows to be acknowledged.
    pub fn check_truncation(
        &self,
        n: usize,
        g: usize,
        keep: LogIndex,
        known_ack: LogIndex,
        node_term: Term,
    ) -> Result<(), String> {
        let host = &self.nodes[n].groups[g];
        for e in host.wal.entries.iter().skip(keep.0 as usize) {
            if let Some((t, d, seen)) = self.history[g].exposed.get(&e.index.0)
                && *t == e.term
                && *d == e.data
                && *seen <= node_term
            {
                return self.fail(format!(
                    "node {} group {g}: WAL truncation removes exposed entry {}",
                    n + 1,
                    e.index
                ));
            }
        }
        if keep < known_ack {
            return self.fail(format!(
                "node {} group {g}: WAL truncation after {keep} below its acknowledged index {known_ack}",
                n + 1
            ));
        }
        Ok(())
    }

    /// Applies are contiguous, and an exposed index is only ever applied
    /// with the exposed entry.
    pub fn check_apply(
        &self,
        n: usize,
        g: usize,
        e: &Entry,
        node_term: Term,
    ) -> Result<(), String> {
        let host = &self.nodes[n].groups[g];
        if e.index.0 != host.wal.entries.len() as u64 + 1 {
            return self.fail(format!(
                "node {} group {g}: applies {} after WAL end {}",
                n + 1,
                e.index,
                host.wal.entries.len()
            ));
        }
        if let Some((t, d, seen)) = self.history[g].exposed.get(&e.index.0)
            && *seen <= node_term
            && (*t != e.term || *d != e.data)
        {
            return self.fail(format!(
                "node {} group {g}: applies a different entry at exposed index {}",
                n + 1,
                e.index
            ));
        }
        Ok(())
    }
}
