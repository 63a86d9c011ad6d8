//! The follower's side: AppendEntries (with WAL truncation on a conflict),
//! heartbeats, commit notices and durable reports.
//!
//! Everything a follower takes from the leader (commit, acknowledged) and
//! everything it reports (durable) is clamped by `leader_match`, the highest
//! index it has verified against this term's leader. A heartbeat's commit
//! index therefore never commits an entry the follower has not verified.

use super::RaftGroup;
use crate::message::MessageBody;
use crate::types::{Entry, LogIndex, NodeId, Term};

impl RaftGroup {
    pub(super) fn handle_append(
        &mut self,
        from: NodeId,
        prev_index: LogIndex,
        prev_term: Term,
        entries: &[Entry],
        commit: LogIndex,
        acknowledged: LogIndex,
    ) {
        let term = self.term;
        let (prev_index, prev_term, entries) = match self.restart(prev_index, prev_term, entries) {
            Some(first) => (first.index, first.term, &entries[1..]),
            None => (prev_index, prev_term, entries),
        };
        match self.log.try_append(prev_index, prev_term, entries) {
            Ok(outcome) => {
                if let Some(keep) = outcome.wal_truncated_after {
                    self.truncate_wal_after =
                        Some(self.truncate_wal_after.map_or(keep, |k| k.min(keep)));
                    self.counters.wal_truncations += 1;
                }
                self.leader_match = self.leader_match.max(outcome.last_new);
                self.learn_commit(commit, acknowledged);
                self.maybe_restored();
                let durable = self.verified_durable();
                self.durable_reported = self.durable_reported.max(durable);
                let last_index = self.log.last_index();
                self.send(
                    from,
                    term,
                    MessageBody::AppendResponse {
                        reject: false,
                        index: self.leader_match,
                        hint_index: LogIndex(0),
                        hint_term: Term(0),
                        last_index,
                        durable,
                    },
                );
            }
            Err(reject) => {
                let durable = self.verified_durable();
                let last_index = self.log.last_index();
                self.send(
                    from,
                    term,
                    MessageBody::AppendResponse {
                        reject: true,
                        index: prev_index,
                        hint_index: reject.hint_index,
                        hint_term: reject.hint_term,
                        last_index,
                        durable,
                    },
                );
            }
        }
    }

    /// An append whose `prev_term` is 0 at an index above 0 (no real entry
    /// has term 0) says the leader holds nothing below its first entry,
    /// the leader's first held entry: the log starts over there unless it
    /// already holds it committed (`RaftLog::restart_at`). Returns that
    /// entry, after which the rest of the append continues. A replica of
    /// an older version rejects such an append, as before.
    fn restart<'e>(
        &mut self,
        prev_index: LogIndex,
        prev_term: Term,
        entries: &'e [Entry],
    ) -> Option<&'e Entry> {
        let first = entries.first()?;
        if prev_term != Term(0) || prev_index == LogIndex(0) || first.index != prev_index.next() {
            return None;
        }
        if self.log.restart_at(first) {
            // Everything the truncation would have cut is gone already.
            self.truncate_wal_after = None;
            self.restart_wal_at = Some(first.index);
            self.leader_match = self.leader_match.min(first.index);
            self.counters.wal_truncations += 1;
        }
        Some(first)
    }

    pub(super) fn handle_heartbeat(
        &mut self,
        from: NodeId,
        commit: LogIndex,
        acknowledged: LogIndex,
    ) {
        self.learn_commit(commit, acknowledged);
        self.maybe_restored();
        let durable = self.verified_durable();
        self.durable_reported = self.durable_reported.max(durable);
        let term = self.term;
        let matched = self.leader_match;
        self.send(
            from,
            term,
            MessageBody::HeartbeatResponse { matched, durable },
        );
    }

    /// Takes the leader's commit and acknowledged indexes, clamped to what
    /// this follower has verified against the leader.
    pub(super) fn learn_commit(&mut self, commit: LogIndex, acknowledged: LogIndex) {
        self.leader_commit = self.leader_commit.max(commit);
        self.leader_ack = self.leader_ack.max(acknowledged);
        self.log.commit_to(commit.min(self.leader_match));
        let ack = acknowledged.min(self.leader_match);
        if ack > self.acknowledged {
            self.acknowledged = ack;
        }
    }

    /// Durable index as reported to the leader: only the part verified to
    /// match its log, so the leader may take reports as a maximum.
    fn verified_durable(&self) -> LogIndex {
        self.log.durable().min(self.leader_match)
    }

    /// A learner becomes a voter again once its durable log, verified
    /// against this term's leader, reaches an index that leader acknowledged
    /// in its own term: every entry acknowledged before (in any term) lies
    /// at or below it, so this replica holds again whatever it may have
    /// helped acknowledge before it lost its log.
    pub(super) fn maybe_restored(&mut self) {
        let ack = self.leader_ack;
        if self.learner
            && ack > LogIndex(0)
            && self.log.term_at(ack) == Some(self.term)
            && self.verified_durable() >= ack
        {
            self.learner = false;
        }
    }

    /// After the host reports a new durable index, tell the leader at once:
    /// the acknowledged index waits for it.
    pub(super) fn report_durable(&mut self) {
        let Some(leader) = self.leader else { return };
        let durable = self.verified_durable();
        if durable <= self.durable_reported {
            return;
        }
        self.durable_reported = durable;
        let (term, index, last_index) = (self.term, self.leader_match, self.log.last_index());
        self.send(
            leader,
            term,
            MessageBody::AppendResponse {
                reject: false,
                index,
                hint_index: LogIndex(0),
                hint_term: Term(0),
                last_index,
                durable,
            },
        );
    }
}
