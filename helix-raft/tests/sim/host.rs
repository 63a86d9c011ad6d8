//! The host side of the simulation: doing what each `Ready` says (vote,
//! truncation, apply, durable, send, catch-up, acknowledged), consumer
//! reads, and the record of what was exposed to producers and consumers.

use helix_raft::{Entry, LogIndex, Role, Term};

use super::{AckRule, Sim, trace};

impl Sim {
    /// A consumer reads a random node's WAL up to what that node may serve:
    /// its acknowledged index (or, under the hazard rule, the leader's
    /// commit index).
    pub(super) fn consumer_read(&mut self) -> Result<(), String> {
        let n = self.rng.in_range(0, self.nodes.len() as u64) as usize;
        let g = self.rng.in_range(0, self.cfg.groups as u64) as usize;
        let host = &self.nodes[n].groups[g];
        let Some(r) = host.raft.as_ref() else {
            return Ok(());
        };
        let hw = match self.cfg.rule {
            AckRule::Acknowledged => r.acknowledged(),
            AckRule::CommitIndex if r.role() == Role::Leader => r.status().commit,
            AckRule::CommitIndex => return Ok(()),
        };
        let at_term = r.term();
        let upto = hw.0.min(host.wal.entries.len() as u64);
        let entries: Vec<Entry> = host.wal.entries[..upto as usize].to_vec();
        self.stats.consumer_reads += 1;
        for e in entries {
            self.expose(g, &e, at_term, "consumer read")?;
        }
        Ok(())
    }

    /// Records that `e` was acknowledged or read; it must never change.
    pub(super) fn expose(
        &mut self,
        g: usize,
        e: &Entry,
        at_term: Term,
        what: &str,
    ) -> Result<(), String> {
        let h = &mut self.history[g];
        match h.exposed.get_mut(&e.index.0) {
            Some((t, d, seen)) if *t == e.term && *d == e.data => {
                *seen = (*seen).min(at_term);
                Ok(())
            }
            Some((t, d, _)) => {
                let msg = format!(
                    "group {g}: index {} was exposed as (term {t}, {d:?}) and now {what} gives (term {}, {:?})",
                    e.index, e.term, e.data
                );
                self.fail(msg)
            }
            None => {
                h.exposed
                    .insert(e.index.0, (e.term, e.data.clone(), at_term));
                h.exposed_log.push(e.index.0);
                if h.liveness_probe.as_ref() == Some(&e.data) {
                    h.liveness_done = true;
                }
                if matches!(self.cfg.rule, AckRule::Acknowledged) || what != "consumer read" {
                    self.stats.acknowledged += 1;
                }
                Ok(())
            }
        }
    }

    pub(super) fn fsync_node(&mut self, n: usize) -> Result<(), String> {
        for g in 0..self.cfg.groups {
            let host = &mut self.nodes[n].groups[g];
            host.wal.fsynced = host.wal.entries.len();
            let durable = LogIndex(host.wal.fsynced as u64);
            if let Some(r) = host.raft.as_mut() {
                r.durable_to(durable).map_err(|e| e.to_string())?;
            }
            self.process(n, g)?;
        }
        Ok(())
    }

    /// The host side of one group on one node: do what `ready` says.
    pub fn process(&mut self, n: usize, g: usize) -> Result<(), String> {
        loop {
            let host = &mut self.nodes[n].groups[g];
            let Some(r) = host.raft.as_mut() else {
                return Ok(());
            };
            if !r.has_ready() {
                host.ack_before_input = r.acknowledged();
                return Ok(());
            }
            // What this replica knew to be acknowledged before the input
            // (a message may truncate and then teach a new, higher index).
            let known_ack = host.ack_before_input;
            let node_term = r.term();
            let rd = r.ready();
            if trace() {
                eprintln!(
                    "t={} node {} g{g} ready hs={:?} trunc={:?} apply={:?} ack={:?} status={:?}",
                    self.now,
                    n + 1,
                    rd.hard_state,
                    rd.truncate_wal_after,
                    rd.to_apply
                        .iter()
                        .map(|e| (e.index.0, e.term.0))
                        .collect::<Vec<_>>(),
                    rd.acknowledged,
                    r.status()
                );
            }
            if let Some(hs) = rd.hard_state {
                host.hard_state = hs;
            }
            if let Some(keep) = rd.truncate_wal_after {
                self.check_truncation(n, g, keep, known_ack, node_term)?;
                let host = &mut self.nodes[n].groups[g];
                host.wal.entries.truncate(keep.0 as usize);
                host.wal.fsynced = host.wal.fsynced.min(keep.0 as usize);
                self.stats.wal_truncations += 1;
            }
            for e in &rd.to_apply {
                self.check_apply(n, g, e, node_term)?;
                self.nodes[n].groups[g].wal.entries.push(e.clone());
            }
            if !self.cfg.fsync
                && let Some(last) = rd.to_apply.last()
            {
                let r = self.nodes[n].groups[g].raft.as_mut().expect("up");
                r.durable_to(last.index).map_err(|e| e.to_string())?;
            }
            for m in rd.messages.into_iter().chain(rd.catch_up_messages) {
                self.net.send(m, self.now, &mut self.rng);
            }
            for req in rd.catch_up {
                self.serve_catch_up(n, g, req)?;
            }
            if let Some(ack) = rd.acknowledged
                && self.cfg.rule == AckRule::Acknowledged
            {
                self.on_acknowledged(n, g, ack)?;
            }
            if self.cfg.rule == AckRule::CommitIndex {
                self.on_commit_rule(n, g)?;
            }
        }
    }

    /// Streams `from..=through` from this node's WAL in chunks of 4.
    fn serve_catch_up(
        &mut self,
        n: usize,
        g: usize,
        req: helix_raft::CatchUpRequest,
    ) -> Result<(), String> {
        let mut next = req.from_index;
        while next <= req.through_index {
            let host = &mut self.nodes[n].groups[g];
            let chunk: Vec<Entry> = (next.0..=req.through_index.0.min(next.0 + 3))
                .filter_map(|i| host.wal.get(LogIndex(i)).cloned())
                .collect();
            if chunk.is_empty() {
                return self.fail(format!("catch-up from {next}: not in the leader's WAL"));
            }
            next = LogIndex(chunk[chunk.len() - 1].index.0 + 1);
            self.stats.catch_up_entries += chunk.len() as u64;
            let r = host.raft.as_mut().expect("up");
            match r.catch_up(req.to, chunk) {
                Ok(true) => {}
                Ok(false) => break,
                Err(e) => return self.fail(format!("catch-up rejected: {e}")),
            }
        }
        Ok(())
    }

    fn on_acknowledged(&mut self, n: usize, g: usize, ack: LogIndex) -> Result<(), String> {
        let host = &self.nodes[n].groups[g];
        let from = host.ack_seen.0 + 1;
        let r = host.raft.as_ref().expect("up");
        let mut entries = Vec::new();
        for i in from..=ack.0 {
            let e = host.wal.get(LogIndex(i)).or_else(|| r.entry(LogIndex(i)));
            match e {
                Some(e) => entries.push(e.clone()),
                None if r.role() == Role::Leader => {
                    return self.fail(format!("leader acknowledged {i} but holds no entry there"));
                }
                None => {}
            }
        }
        let at_term = r.term();
        self.nodes[n].groups[g].ack_seen = ack;
        for e in entries {
            self.expose(g, &e, at_term, "acknowledged")?;
        }
        Ok(())
    }

    /// Hazard rule: producers are answered at the leader's commit index.
    fn on_commit_rule(&mut self, n: usize, g: usize) -> Result<(), String> {
        let host = &self.nodes[n].groups[g];
        let Some(r) = host.raft.as_ref() else {
            return Ok(());
        };
        if r.role() != Role::Leader {
            return Ok(());
        }
        let commit = r.status().commit;
        let mut entries = Vec::new();
        for i in host.ack_seen.0 + 1..=commit.0 {
            if let Some(e) = host.wal.get(LogIndex(i)).or_else(|| r.entry(LogIndex(i))) {
                entries.push(e.clone());
            }
        }
        let at_term = r.term();
        self.nodes[n].groups[g].ack_seen = commit;
        for e in entries {
            self.expose(g, &e, at_term, "answered at commit")?;
        }
        Ok(())
    }
}
