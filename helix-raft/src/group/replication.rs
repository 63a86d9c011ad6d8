//! The leader's side of replication: appending, pipelined sends per
//! follower, fast backtracking, the commit index (majority in memory), the
//! acknowledged index (durable on a majority, current term), catch-up from
//! the WAL and release of in-memory entries.
//!
//! Sends are deferred: proposals and commit advances mark the group dirty
//! and `flush` (run by `ready()`) batches everything new into one append per
//! follower, so a burst of proposals costs one message, not one each.

use bytes::Bytes;

use super::RaftGroup;
use crate::error::RaftError;
use crate::message::{CatchUpRequest, Message, MessageBody};
use crate::progress::ProgressState;
use crate::types::{Entry, EntryKind, LogIndex, NodeId, Role, Term};

impl RaftGroup {
    /// Appends an entry of the current term to the leader's log.
    pub(super) fn append_entry(&mut self, kind: EntryKind, data: Bytes) -> LogIndex {
        let index = self.log.last_index().next();
        self.log.append(Entry {
            term: self.term,
            index,
            kind,
            data,
        });
        if self.cfg.quorum() == 1 {
            // Only a one-voter group commits on the leader's own append.
            self.maybe_commit();
        }
        self.flush_pending = true;
        index
    }

    fn progress_index(&self, node: NodeId) -> Option<usize> {
        self.progress.iter().position(|(n, _)| *n == node)
    }

    /// Sends whatever each follower can take now; a follower that can take
    /// nothing but lags behind the commit index gets a `Commit` message.
    pub(super) fn flush(&mut self) {
        if !self.flush_pending || self.role != Role::Leader {
            self.flush_pending = false;
            return;
        }
        self.flush_pending = false;
        let peers: Vec<NodeId> = self.peers().collect();
        for to in peers {
            self.send_appends(to);
            let Some(i) = self.progress_index(to) else {
                continue;
            };
            if self.progress[i].1.commit_sent < self.log.commit() {
                self.progress[i].1.commit_sent = self.log.commit();
                let (term, commit, acknowledged) =
                    (self.term, self.log.commit(), self.acknowledged);
                self.send(
                    to,
                    term,
                    MessageBody::Commit {
                        commit,
                        acknowledged,
                    },
                );
            }
        }
    }

    /// Sends appends to `to` until its pipeline is full or it is caught up.
    pub(super) fn send_appends(&mut self, to: NodeId) {
        while self.send_append(to) {
            let Some(i) = self.progress_index(to) else {
                return;
            };
            let pr = &self.progress[i].1;
            if pr.state != ProgressState::Replicate || pr.next > self.log.last_index() {
                return;
            }
        }
    }

    /// Sends one append to `to` if its progress allows. Returns true if sent.
    pub(super) fn send_append(&mut self, to: NodeId) -> bool {
        let Some(i) = self.progress_index(to) else {
            return false;
        };
        let pr = &self.progress[i].1;
        if pr.is_paused() {
            return false;
        }
        let next = pr.next;
        let prev_index = next.prev();
        let entries = match (
            self.log.term_at(prev_index),
            self.log.entries_from(next, self.cfg.max_append_bytes),
        ) {
            (Some(prev_term), Some(entries)) => Some((prev_term, entries)),
            _ => None,
        };
        let Some((prev_term, entries)) = entries else {
            self.start_catch_up(to, next);
            return false;
        };
        let pr = &mut self.progress[i].1;
        if entries.is_empty() && pr.state == ProgressState::Replicate {
            return false;
        }
        let last = entries.last().map_or(prev_index, |e| e.index);
        pr.sent(last, !entries.is_empty());
        pr.commit_sent = self.log.commit();
        self.send_append_message(to, prev_index, prev_term, entries);
        true
    }

    /// An AppendEntries carrying the leader's current commit and acknowledged
    /// indexes, so followers learn both at once (never at the next tick).
    fn send_append_message(
        &mut self,
        to: NodeId,
        prev_index: LogIndex,
        prev_term: Term,
        entries: Vec<Entry>,
    ) {
        let body = self.append_body(prev_index, prev_term, entries);
        let term = self.term;
        self.send(to, term, body);
    }

    fn append_body(
        &self,
        prev_index: LogIndex,
        prev_term: Term,
        entries: Vec<Entry>,
    ) -> MessageBody {
        MessageBody::Append {
            prev_index,
            prev_term,
            entries,
            commit: self.log.commit(),
            acknowledged: self.acknowledged,
        }
    }

    /// `to` needs entries from `from` that are only in the WAL.
    fn start_catch_up(&mut self, to: NodeId, from: LogIndex) {
        let Some(i) = self.progress_index(to) else {
            return;
        };
        let through = self.log.mem_start().prev();
        self.progress[i].1.become_catch_up();
        self.catch_up.push(CatchUpRequest {
            to,
            from_index: from,
            through_index: through,
        });
    }

    /// Entries read from the leader's WAL for a follower in catch-up, in
    /// order, starting at the index the request (or the previous call)
    /// reached. Returns whether more are wanted; `false` means stop (done,
    /// or the request is no longer current).
    pub fn catch_up(&mut self, to: NodeId, entries: Vec<Entry>) -> Result<bool, RaftError> {
        self.send_caught_up(to, entries, false)
    }

    /// Like [`Self::catch_up`], for a follower that needs entries the
    /// leader's WAL no longer holds (deleted below its log start):
    /// `entries` start at the WAL's first held entry, which must be
    /// committed. The follower's log starts over there
    /// (`RaftLog::restart_at`), told by an append whose `prev_term` is 0.
    pub fn catch_up_restart(&mut self, to: NodeId, entries: Vec<Entry>) -> Result<bool, RaftError> {
        self.send_caught_up(to, entries, true)
    }

    fn send_caught_up(
        &mut self,
        to: NodeId,
        entries: Vec<Entry>,
        restart: bool,
    ) -> Result<bool, RaftError> {
        if self.role != Role::Leader {
            return Ok(false);
        }
        let Some(i) = self.progress_index(to) else {
            return Err(RaftError::UnknownPeer(to));
        };
        if self.progress[i].1.state != ProgressState::CatchUp {
            return Ok(false);
        }
        if entries.is_empty() {
            return Err(RaftError::InvalidCatchUp("no entries"));
        }
        for pair in entries.windows(2) {
            if pair[1].index != pair[0].index.next() {
                return Err(RaftError::InvalidCatchUp("not contiguous"));
            }
        }
        if entries
            .iter()
            .any(|e| self.log.term_at(e.index) != Some(e.term))
        {
            return Err(RaftError::InvalidCatchUp(
                "term differs from the leader's log",
            ));
        }
        // Responses may have moved the follower on while the host streamed:
        // skip what it already has; a gap is the host's error.
        let next = self.progress[i].1.next;
        let restart = restart && entries[0].index > next;
        if restart && entries[0].index > self.log.commit() {
            return Err(RaftError::InvalidCatchUp(
                "a restart at an entry not committed",
            ));
        }
        if !restart && entries[0].index > next {
            return Err(RaftError::InvalidCatchUp(
                "does not start where the follower needs",
            ));
        }
        let mut entries = entries;
        entries.retain(|e| e.index >= next);
        let Some(first) = entries.first() else {
            return Ok(self.finish_catch_up_if_in_memory(to));
        };
        let prev_index = first.index.prev();
        let prev_term = if restart {
            Term(0)
        } else {
            let Some(term) = self.log.term_at(prev_index) else {
                return Err(RaftError::InvalidCatchUp(
                    "term of the previous entry unknown",
                ));
            };
            term
        };
        let last = entries[entries.len() - 1].index;
        let pr = &mut self.progress[i].1;
        pr.next = last.next();
        pr.catch_up_idle = 0;
        pr.commit_sent = self.log.commit();
        let more = pr.next < self.log.mem_start();
        if !more {
            pr.become_replicate();
        }
        let body = self.append_body(prev_index, prev_term, entries);
        self.catch_up_msgs.push(Message {
            group: self.group,
            from: self.cfg.node,
            to,
            term: self.term,
            body,
        });
        if !more {
            self.send_appends(to);
        }
        Ok(more)
    }

    /// Ends catch-up once the follower's next index is back in memory.
    /// Returns whether more WAL entries are wanted.
    fn finish_catch_up_if_in_memory(&mut self, to: NodeId) -> bool {
        let Some(i) = self.progress_index(to) else {
            return false;
        };
        let pr = &mut self.progress[i].1;
        if pr.state != ProgressState::CatchUp {
            return false;
        }
        if pr.next < self.log.mem_start() {
            return true;
        }
        pr.become_replicate();
        self.send_appends(to);
        false
    }

    /// Catch-up the host did not serve within two election timeouts is
    /// abandoned; the follower is probed again (and asked for again).
    pub(super) fn tick_catch_up(&mut self) {
        let limit = 2 * self.cfg.election_ticks;
        for (_, pr) in &mut self.progress {
            if pr.state == ProgressState::CatchUp {
                pr.catch_up_idle += 1;
                if pr.catch_up_idle > limit {
                    pr.become_probe();
                }
            }
        }
    }

    /// Heartbeats carry the commit and acknowledged indexes; the follower
    /// clamps both to what it knows matches this leader.
    pub(super) fn send_heartbeats(&mut self) {
        let (term, commit, acknowledged) = (self.term, self.log.commit(), self.acknowledged);
        let peers: Vec<NodeId> = self.peers().collect();
        for to in peers {
            self.send(
                to,
                term,
                MessageBody::Heartbeat {
                    commit,
                    acknowledged,
                },
            );
        }
    }

    #[allow(clippy::too_many_arguments)]
    pub(super) fn handle_append_response(
        &mut self,
        from: NodeId,
        reject: bool,
        index: LogIndex,
        hint_index: LogIndex,
        hint_term: Term,
        last_index: LogIndex,
        durable: LogIndex,
    ) {
        let Some(i) = self.progress_index(from) else {
            return;
        };
        let pr = &mut self.progress[i].1;
        pr.heard();
        pr.durable = pr.durable.max(durable);
        if reject {
            let last = self.log.last_index();
            let probe_at = if hint_term.0 > 0 {
                self.log
                    .terms()
                    .last_index_with_term_at_most(hint_term, hint_index, last)
            } else {
                hint_index
            };
            let pr = &mut self.progress[i].1;
            if pr.on_reject(index, probe_at, last_index) {
                self.send_appends(from);
            }
        } else {
            if self.progress[i].1.on_success(index) {
                self.maybe_commit();
            }
            if self.progress[i].1.state == ProgressState::CatchUp {
                self.finish_catch_up_if_in_memory(from);
            }
            self.maybe_send_timeout_now(from);
            self.send_appends(from);
        }
        self.maybe_acknowledge();
    }

    pub(super) fn handle_heartbeat_response(
        &mut self,
        from: NodeId,
        matched: LogIndex,
        durable: LogIndex,
    ) {
        let Some(i) = self.progress_index(from) else {
            return;
        };
        let pr = &mut self.progress[i].1;
        pr.heard();
        pr.durable = pr.durable.max(durable);
        // `matched` was verified by the follower against this term's log:
        // as good as an append success whose response was lost.
        if matched > pr.matched && matched <= self.log.last_index() && pr.on_success(matched) {
            self.maybe_commit();
        }
        if self.progress[i].1.state == ProgressState::CatchUp {
            self.finish_catch_up_if_in_memory(from);
        }
        let pr = &mut self.progress[i].1;
        match pr.state {
            ProgressState::Probe => pr.probe_sent = false,
            ProgressState::Replicate => {
                // The follower has not confirmed everything sent (appends
                // lost, or it restarted and lost its tail). Appends may still
                // be on their way: under load a follower can take hundreds of
                // milliseconds to receive and store a pipeline of large
                // appends, and resending them then only adds load (a collapse
                // to a tenth of the throughput with 48 MiB in flight, when
                // two answers 100 ms apart were enough to resend). So probe
                // when answers spanning an election timeout show no progress,
                // or two in a row show less than the follower had confirmed
                // (it lost its tail).
                let lost_tail = matched < pr.matched;
                let behind = lost_tail || matched < pr.next.prev() || pr.is_paused();
                let patience = (self.cfg.election_ticks / self.cfg.heartbeat_ticks).max(2);
                let answers = match pr.stall_mark {
                    Some((at, n)) if at == pr.matched => n + 1,
                    _ => 1,
                };
                if !behind {
                    pr.stall_mark = None;
                } else if answers >= patience || (lost_tail && answers >= 2) {
                    pr.stall_mark = None;
                    pr.become_probe();
                } else {
                    pr.stall_mark = Some((pr.matched, answers));
                }
            }
            ProgressState::CatchUp => {}
        }
        if self.progress[i].1.matched < self.log.last_index()
            || matched < self.progress[i].1.matched
        {
            self.send_appends(from);
        }
        self.maybe_acknowledge();
    }

    /// Commit the highest current-term index replicated (in memory) on a
    /// majority. Entries of earlier terms commit with it (§5.4.2).
    pub(super) fn maybe_commit(&mut self) {
        let mine = self.log.last_index();
        let n = self.quorum_position(mine, |pr| pr.matched);
        if n > self.log.commit() && self.log.term_at(n) == Some(self.term) && self.log.commit_to(n)
        {
            self.flush_pending = true;
            // A one-voter group has nothing durable to wait for but its own WAL.
            self.maybe_acknowledge();
        }
    }

    /// The acknowledged index: the highest current-term index durable on a
    /// majority, counting each follower only up to where its log is known to
    /// match ours (it clamps its report so).
    pub(super) fn maybe_acknowledge(&mut self) {
        let mine = self.log.durable();
        let n = self.quorum_position(mine, |pr| pr.durable);
        if n > self.acknowledged && self.log.term_at(n) == Some(self.term) {
            self.acknowledged = n;
        }
    }

    /// The highest position reached by a majority, given this node's own.
    fn quorum_position(
        &self,
        mine: LogIndex,
        of: impl Fn(&crate::progress::Progress) -> LogIndex,
    ) -> LogIndex {
        let mut positions: Vec<LogIndex> = Vec::with_capacity(self.progress.len() + 1);
        positions.push(mine);
        positions.extend(self.progress.iter().map(|(_, pr)| of(pr)));
        positions.sort_unstable_by(|a, b| b.cmp(a));
        positions[self.cfg.quorum() - 1]
    }

    /// Releases in-memory entries nobody needs from memory any more: applied
    /// here and (on a leader) matched by every follower.
    pub(super) fn release_memory(&mut self) {
        let mut upto = self.log.applied();
        if self.role == Role::Leader {
            for (_, pr) in &self.progress {
                upto = upto.min(pr.matched);
            }
        }
        self.log.release_to(upto);
    }
}
