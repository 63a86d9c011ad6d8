//! The host side of the simulation: doing what each `Ready` says (vote,
//! truncation, apply, durable, send, catch-up, acknowledged), group by
//! group or through `MultiRaft::ready`, with crashes at every point of that
//! work; answering proposals; consumer reads; and the record of what was
//! exposed to producers and consumers.

use helix_raft::{Entry, EntryKind, LogIndex, MessageBatch, Ready, Role, Term};

use super::{AckRule, Sim, trace};

/// Where a crash interrupts the handling of a `Ready`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum CrashPoint {
    /// Before the vote is persisted: nothing of the `Ready` happened.
    BeforeHardState,
    AfterHardState,
    AfterTruncation,
    /// Part of `to_apply` written.
    PartialAppend,
    /// Everything written, nothing sent.
    BeforeSend,
}

impl Sim {
    /// Handles every `Ready` node `n` has, through the host path the run
    /// uses. Stops early if a crash interrupts it.
    pub(super) fn process_node(&mut self, n: usize) -> Result<(), String> {
        if !self.nodes[n].running() {
            return Ok(());
        }
        if self.cfg.multi_host {
            self.process_multi(n)
        } else {
            for g in 0..self.cfg.groups {
                self.process_group(n, g)?;
                if !self.nodes[n].running() {
                    return Ok(());
                }
            }
            Ok(())
        }
    }

    /// The per-group path: every group's `Ready` on its own, messages sent
    /// one per batch.
    fn process_group(&mut self, n: usize, g: usize) -> Result<(), String> {
        loop {
            let host_ack = self.nodes[n].groups[g].ack_before_input;
            let Some(r) = self.nodes[n].group_mut(g) else {
                return Ok(());
            };
            if !r.has_ready() {
                let ack = r.acknowledged();
                self.nodes[n].groups[g].ack_before_input = ack;
                return Ok(());
            }
            let node_term = r.term();
            let mut rd = r.ready();
            let messages = std::mem::take(&mut rd.messages);
            let catch_up = std::mem::take(&mut rd.catch_up_messages);
            if !self.handle_ready(n, g, rd, host_ack, node_term)? {
                return Ok(());
            }
            for m in messages.into_iter().chain(catch_up) {
                let batch = MessageBatch {
                    from: m.from,
                    to: m.to,
                    messages: vec![m],
                };
                self.net.send(batch, self.now, &mut self.rng);
            }
            self.after_ready(n, g)?;
        }
    }

    /// The MultiRaft path: one `ready()` for the whole node, every group's
    /// vote and WAL work done, then one batch per destination node.
    fn process_multi(&mut self, n: usize) -> Result<(), String> {
        loop {
            let multi = self.nodes[n].raft.as_mut().expect("running");
            if !multi.has_ready() {
                for g in 0..self.cfg.groups {
                    let ack = self.nodes[n].group(g).expect("hosted").acknowledged();
                    self.nodes[n].groups[g].ack_before_input = ack;
                }
                return Ok(());
            }
            let terms: Vec<Term> = (0..self.cfg.groups)
                .map(|g| self.nodes[n].group(g).expect("hosted").term())
                .collect();
            let multi = self.nodes[n].raft.as_mut().expect("running");
            let mr = multi.ready();
            for (gid, rd) in mr.groups {
                let g = gid.0 as usize;
                let host_ack = self.nodes[n].groups[g].ack_before_input;
                if !self.handle_ready(n, g, rd, host_ack, terms[g])? {
                    return Ok(());
                }
            }
            for b in mr.batches.into_iter().chain(mr.catch_up_batches) {
                self.net.send(b, self.now, &mut self.rng);
            }
            for g in 0..self.cfg.groups {
                self.after_ready(n, g)?;
            }
        }
    }

    /// Vote, truncation, apply, durable, catch-up, acknowledged: one
    /// group's `Ready` (its messages are sent by the caller). Returns false
    /// if a crash interrupted it (the node is down).
    fn handle_ready(
        &mut self,
        n: usize,
        g: usize,
        rd: Ready,
        known_ack: LogIndex,
        node_term: Term,
    ) -> Result<bool, String> {
        if trace() {
            let r = self.nodes[n].group(g).expect("up");
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
        let crash_at = self.draw_crash_point(rd.to_apply.len());
        if crash_at == Some(CrashPoint::BeforeHardState) {
            return self.crash_mid_ready(n);
        }
        if let Some(hs) = rd.hard_state {
            self.nodes[n].groups[g].hard_state = hs;
        }
        if crash_at == Some(CrashPoint::AfterHardState) {
            return self.crash_mid_ready(n);
        }
        if let Some(keep) = rd.truncate_wal_after {
            self.check_truncation(n, g, keep, known_ack, node_term)?;
            let wal = &mut self.nodes[n].groups[g].wal;
            if wal.fsync_started.is_some_and(|s| s > keep.0 as usize) {
                self.stats.fsync_races += 1;
            }
            wal.truncate_after(keep.0 as usize);
            self.stats.wal_truncations += 1;
        }
        if crash_at == Some(CrashPoint::AfterTruncation) {
            return self.crash_mid_ready(n);
        }
        let partial = match crash_at {
            Some(CrashPoint::PartialAppend) => {
                Some(self.rng.in_range(0, rd.to_apply.len() as u64) as usize)
            }
            _ => None,
        };
        for (i, e) in rd.to_apply.iter().enumerate() {
            if partial == Some(i) {
                return self.crash_mid_ready(n);
            }
            self.check_apply(n, g, e, node_term)?;
            self.nodes[n].groups[g].wal.entries.push(e.clone());
        }
        if !self.cfg.fsync
            && let Some(last) = rd.to_apply.last()
        {
            let r = self.nodes[n].group_mut(g).expect("up");
            r.durable_to(last.index).map_err(|e| e.to_string())?;
        }
        if crash_at == Some(CrashPoint::BeforeSend) {
            return self.crash_mid_ready(n);
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
        Ok(true)
    }

    fn draw_crash_point(&mut self, appends: usize) -> Option<CrashPoint> {
        if !self.faults_on || self.rng.in_range(0, 1000) >= self.cfg.mid_ready_crash_per_mille {
            return None;
        }
        Some(match self.rng.in_range(0, 5) {
            0 => CrashPoint::BeforeHardState,
            1 => CrashPoint::AfterHardState,
            2 => CrashPoint::AfterTruncation,
            3 if appends > 0 => CrashPoint::PartialAppend,
            _ => CrashPoint::BeforeSend,
        })
    }

    fn crash_mid_ready(&mut self, n: usize) -> Result<bool, String> {
        self.stats.mid_ready_crashes += 1;
        self.crash_node(n);
        self.check_majority_holds("after a crash inside a Ready")?;
        Ok(false)
    }

    /// A node that is no longer leader answers what it still holds with a
    /// retriable error: the client's book forgets those proposals.
    fn after_ready(&mut self, n: usize, g: usize) -> Result<(), String> {
        let leader = self.nodes[n]
            .group(g)
            .is_some_and(|r| r.role() == Role::Leader);
        if !leader {
            self.nodes[n].groups[g].pending.clear();
        }
        Ok(())
    }

    /// A consumer reads a random node's WAL up to what that node may serve:
    /// its acknowledged index (or, under the hazard rule, the leader's
    /// commit index).
    pub(super) fn consumer_read(&mut self) -> Result<(), String> {
        let n = self.rng.in_range(0, self.nodes.len() as u64) as usize;
        let g = self.rng.in_range(0, self.cfg.groups as u64) as usize;
        if !self.nodes[n].running() {
            return Ok(());
        }
        let r = self.nodes[n].group(g).expect("running");
        let hw = match self.cfg.rule {
            AckRule::Acknowledged => r.acknowledged(),
            AckRule::CommitIndex if r.role() == Role::Leader => r.status().commit,
            AckRule::CommitIndex => return Ok(()),
        };
        let at_term = r.term();
        let wal = &self.nodes[n].groups[g].wal;
        let upto = hw.0.min(wal.entries.len() as u64);
        let entries: Vec<Entry> = wal.entries[..upto as usize].to_vec();
        self.stats.consumer_reads += 1;
        for e in entries {
            self.expose(g, &e, at_term, "consumer read")?;
        }
        Ok(())
    }

    /// Records that `e` was acknowledged or read; it must never change, its
    /// payload must be one the driver proposed, and at one index only.
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
                match e.kind {
                    EntryKind::Noop if !e.data.is_empty() => {
                        return self.fail(format!(
                            "group {g}: {what} exposes a no-op entry {} carrying data",
                            e.index
                        ));
                    }
                    EntryKind::Noop => {}
                    EntryKind::Normal => {
                        if !h.proposed.contains(&e.data) {
                            let msg = format!(
                                "group {g}: {what} exposes {:?} at {}, which nobody proposed",
                                e.data, e.index
                            );
                            return self.fail(msg);
                        }
                        if let Some(other) = h.exposed_at.insert(e.data.clone(), e.index.0)
                            && other != e.index.0
                        {
                            let msg = format!(
                                "group {g}: payload {:?} exposed at {other} and again at {}",
                                e.data, e.index
                            );
                            return self.fail(msg);
                        }
                    }
                }
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

    /// An fsync that starts and completes at once, for every group.
    pub(super) fn fsync_node(&mut self, n: usize) -> Result<(), String> {
        if !self.nodes[n].running() {
            return Ok(());
        }
        for g in 0..self.cfg.groups {
            let wal = &mut self.nodes[n].groups[g].wal;
            wal.fsync_started = None;
            wal.fsynced = wal.entries.len();
            let durable = LogIndex(wal.fsynced as u64);
            let r = self.nodes[n].group_mut(g).expect("running");
            r.durable_to(durable).map_err(|e| e.to_string())?;
        }
        self.process_node(n)
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
            let wal = &self.nodes[n].groups[g].wal;
            let chunk: Vec<Entry> = (next.0..=req.through_index.0.min(next.0 + 3))
                .filter_map(|i| wal.get(LogIndex(i)).cloned())
                .collect();
            if chunk.is_empty() {
                return self.fail(format!("catch-up from {next}: not in the leader's WAL"));
            }
            next = LogIndex(chunk[chunk.len() - 1].index.0 + 1);
            self.stats.catch_up_entries += chunk.len() as u64;
            let r = self.nodes[n].group_mut(g).expect("up");
            match r.catch_up(req.to, chunk) {
                Ok(true) => {}
                Ok(false) => break,
                Err(e) => return self.fail(format!("catch-up rejected: {e}")),
            }
        }
        Ok(())
    }

    /// The node reports a new acknowledged index: record what it exposes,
    /// and (on the leader) answer the proposals it covers, checking each
    /// answer against the client's own record of what it sent.
    fn on_acknowledged(&mut self, n: usize, g: usize, ack: LogIndex) -> Result<(), String> {
        let host = &self.nodes[n].groups[g];
        let from = host.ack_seen.0 + 1;
        let r = self.nodes[n].group(g).expect("up");
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
        let is_leader = r.role() == Role::Leader;
        self.nodes[n].groups[g].ack_seen = ack;
        for e in entries {
            self.expose(g, &e, at_term, "acknowledged")?;
        }
        if is_leader {
            self.answer(n, g, ack)?;
        }
        Ok(())
    }

    /// Answers the leader's proposals up to `ack`: as written where the
    /// entry at the index has the proposal's term, else retriable.
    fn answer(&mut self, n: usize, g: usize, ack: LogIndex) -> Result<(), String> {
        let host = &mut self.nodes[n].groups[g];
        let (done, waiting): (Vec<_>, Vec<_>) =
            host.pending.drain(..).partition(|p| p.index <= ack);
        host.pending = waiting;
        for p in done {
            let Some(e) = self.nodes[n].groups[g].wal.get(p.index) else {
                return self.fail(format!(
                    "leader answers {} but its WAL ends before it",
                    p.index
                ));
            };
            if e.term != p.term {
                continue;
            }
            if e.data != p.data {
                let msg = format!(
                    "group {g}: the client that sent {:?} was answered at {}, which holds {:?}",
                    p.data, p.index, e.data
                );
                return self.fail(msg);
            }
            self.stats.answered += 1;
            self.history[g]
                .answered
                .insert(p.index.0, (p.term, p.data.clone()));
        }
        Ok(())
    }

    /// Hazard rule: producers are answered at the leader's commit index.
    fn on_commit_rule(&mut self, n: usize, g: usize) -> Result<(), String> {
        let host = &self.nodes[n].groups[g];
        let Some(r) = self.nodes[n].group(g) else {
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
