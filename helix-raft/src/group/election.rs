//! Elections: randomized timeouts, pre-vote, vote, becoming leader,
//! check-quorum and leader transfer (TimeoutNow).

use super::RaftGroup;
use crate::message::MessageBody;
use crate::progress::Progress;
use crate::types::{EntryKind, LogIndex, NodeId, Role, Term};
use bytes::Bytes;

impl RaftGroup {
    /// Follower and (pre-)candidate tick: campaign when the timeout expires.
    pub(super) fn tick_election(&mut self) {
        self.election_elapsed = self.election_elapsed.saturating_add(1);
        if self.election_elapsed >= self.randomized_timeout && self.may_stand() {
            self.election_elapsed = 0;
            if self.cfg.pre_vote {
                self.become_pre_candidate();
            } else {
                self.become_candidate(false);
            }
        }
    }

    /// Leader tick: heartbeats, check-quorum, transfer timeout, catch-up
    /// requests the host never served.
    pub(super) fn tick_leader(&mut self) {
        for (_, pr) in &mut self.progress {
            pr.ticks_since_heard = pr.ticks_since_heard.saturating_add(1);
        }
        self.heartbeat_elapsed = self.heartbeat_elapsed.saturating_add(1);
        self.election_elapsed = self.election_elapsed.saturating_add(1);
        if self.election_elapsed >= self.cfg.election_ticks {
            self.election_elapsed = 0;
            if self.cfg.check_quorum && !self.quorum_active() {
                let term = self.term;
                self.become_follower(term, None);
                return;
            }
            if self.transferee.take().is_some() {
                self.transfer_elapsed = 0;
            }
            if self.stood_down {
                // The hand-over did not happen within an election timeout.
                let term = self.term;
                self.become_follower(term, None);
                return;
            }
        }
        if self.heartbeat_elapsed >= self.cfg.heartbeat_ticks {
            self.heartbeat_elapsed = 0;
            self.send_heartbeats();
        }
        self.tick_catch_up();
    }

    /// Did a majority (this node included) answer since the last round?
    /// Resets the activity flags for the next round.
    fn quorum_active(&mut self) -> bool {
        let mut active = 1;
        for (_, pr) in &mut self.progress {
            if pr.recent_active {
                active += 1;
            }
            pr.recent_active = false;
        }
        active >= self.cfg.quorum()
    }

    /// Whether this replica leads with evidence that it is not cut off: a
    /// majority of the group (this node included) answered within the
    /// lease ([`crate::RaftConfig::lease_ticks`], shorter than the election
    /// timeout), and no connection to those followers was reported broken
    /// since. Only then may the host tell clients that this node leads:
    /// without it the leader may be cut off while the others elect a new
    /// one. Counted in ticks, like everything here; a new leader holds it
    /// at once (its votes are a majority's answers). Check-quorum steps
    /// the leader down later (an election timeout with no majority); in
    /// between the host treats it as not leading.
    #[must_use]
    pub fn has_quorum_lease(&self) -> bool {
        self.lease_ticks_left() > 0
    }

    /// Ticks until the lease ends if no follower answers meanwhile: 0 when
    /// it is not held, `u32::MAX` for a one-voter group (its own majority).
    /// A host that can be paused or stalled (its ticks stop while time
    /// goes on) turns this into a deadline on its own clock, so the lease
    /// also ends while no tick runs.
    #[must_use]
    pub fn lease_ticks_left(&self) -> u32 {
        if self.role != Role::Leader {
            return 0;
        }
        let needed = self.cfg.quorum() - 1;
        if needed == 0 {
            return u32::MAX;
        }
        let silence = || {
            self.progress.iter().map(|(_, pr)| {
                if pr.connection_lost {
                    u32::MAX
                } else {
                    pr.ticks_since_heard
                }
            })
        };
        // The lease holds while `needed` followers answered within it: it
        // rests on the `needed`-th most recent answer, the shortest silence
        // that `needed` silences do not exceed. (Asked on every proposal:
        // counting over a handful of replicas allocates nothing.)
        silence()
            .filter(|s| silence().filter(|t| t <= s).count() >= needed)
            .min()
            .map_or(0, |s| self.cfg.lease_ticks().saturating_sub(s))
    }

    /// The host's connection to `node` broke (on a kill the kernel closes
    /// it at once). A leader stops counting `node`'s earlier answers
    /// towards its lease (its followers, told the same, may be electing
    /// another leader already); returns whether that ended the lease.
    /// A follower of `node` forgets it as leader, so it grants
    /// the other followers' pre-votes, and campaigns soon instead of after
    /// a whole election timeout: in `rank` ticks, `rank` being its place
    /// after `node` in the voter list (the first in line at once), so the
    /// followers do not split the vote, and each group's "next in line"
    /// differs with its placement.
    /// Safe to call when `node` is alive: a pre-vote still needs a majority
    /// that no longer hears a leader, and the leader's next message makes
    /// it the known leader again (and a live follower's next answer gives
    /// the leader its lease back). Without pre-vote a follower does nothing
    /// (a campaign would raise the term and depose a live leader). Returns
    /// whether it acted (the leader was forgotten, or the lease ended).
    pub fn peer_lost(&mut self, node: NodeId) -> bool {
        if self.role == Role::Leader {
            let held = self.has_quorum_lease();
            if let Some((_, pr)) = self.progress.iter_mut().find(|(n, _)| *n == node) {
                pr.connection_lost = true;
            }
            return held && !self.has_quorum_lease();
        }
        if !self.cfg.pre_vote || self.role != Role::Follower || self.leader != Some(node) {
            return false;
        }
        self.leader = None;
        let voters = &self.cfg.voters;
        let (Some(lost), Some(me)) = (
            voters.iter().position(|n| *n == node),
            voters.iter().position(|n| *n == self.cfg.node),
        ) else {
            return true;
        };
        let rank = (me + voters.len() - lost - 1) % voters.len();
        if rank == 0 && self.may_stand() {
            // First in line: ask for pre-votes now. A follower that has not
            // yet noticed the loss refuses (it is in the lease); the next
            // in line then stands at its turn, and this one grants it.
            self.election_elapsed = 0;
            self.become_pre_candidate();
            return true;
        }
        let wait = rank as u32;
        self.election_elapsed = self
            .election_elapsed
            .max(self.randomized_timeout.saturating_sub(wait));
        true
    }

    /// A leader is known and was heard from within the election timeout.
    pub(super) fn in_lease(&self) -> bool {
        self.cfg.check_quorum
            && self.leader.is_some()
            && self.election_elapsed < self.cfg.election_ticks
    }

    fn become_pre_candidate(&mut self) {
        self.role = Role::PreCandidate;
        self.leader = None;
        self.votes.clear();
        self.votes.push((self.cfg.node, true));
        self.progress.clear();
        self.randomize_timeout();
        if self.tally() == Some(true) {
            self.become_candidate(false);
            return;
        }
        let (last_index, last_term) = (self.log.last_index(), self.log.last_term());
        let term = Term(self.term.0 + 1);
        let peers: Vec<NodeId> = self.peers().collect();
        for to in peers {
            self.send(
                to,
                term,
                MessageBody::PreVote {
                    last_index,
                    last_term,
                },
            );
        }
    }

    pub(super) fn become_candidate(&mut self, transfer: bool) {
        let term = Term(self.term.0 + 1);
        self.reset(term);
        self.role = Role::Candidate;
        self.voted_for = Some(self.cfg.node);
        self.votes.push((self.cfg.node, true));
        self.counters.elections_started += 1;
        if self.tally() == Some(true) {
            self.become_leader();
            return;
        }
        let (last_index, last_term) = (self.log.last_index(), self.log.last_term());
        let peers: Vec<NodeId> = self.peers().collect();
        for to in peers {
            self.send(
                to,
                term,
                MessageBody::Vote {
                    last_index,
                    last_term,
                    transfer,
                },
            );
        }
    }

    fn become_leader(&mut self) {
        let term = self.term;
        self.reset(term);
        self.role = Role::Leader;
        self.leader = Some(self.cfg.node);
        self.counters.elections_won += 1;
        let next = self.log.last_index().next();
        let max_inflight = self.cfg.max_inflight_appends;
        self.progress = self
            .peers()
            .map(|p| (p, Progress::new(next, max_inflight)))
            .collect();
        // The acknowledgement rule needs an entry of this term.
        self.append_entry(EntryKind::Noop, Bytes::new());
    }

    /// Grants or refuses a (pre-)vote. The term rules already ran.
    pub(super) fn handle_vote_request(
        &mut self,
        from: NodeId,
        term: Term,
        last_index: LogIndex,
        last_term: Term,
        pre: bool,
    ) {
        let can_vote = if pre {
            term > self.term
        } else {
            self.voted_for == Some(from) || (self.voted_for.is_none() && self.leader.is_none())
        };
        let grant = can_vote && !self.learner && self.log.is_up_to_date(last_index, last_term);
        if pre {
            let answer_term = if grant { term } else { self.term };
            self.send(
                from,
                answer_term,
                MessageBody::PreVoteResponse { reject: !grant },
            );
        } else {
            if grant {
                self.voted_for = Some(from);
                self.election_elapsed = 0;
            }
            self.send(
                from,
                self.term,
                MessageBody::VoteResponse { reject: !grant },
            );
        }
    }

    pub(super) fn handle_vote_response(
        &mut self,
        from: NodeId,
        term: Term,
        reject: bool,
        pre: bool,
    ) {
        let expected = match (self.role, pre) {
            (Role::PreCandidate, true) => Term(self.term.0 + 1),
            (Role::Candidate, false) => self.term,
            _ => return,
        };
        if term != expected {
            return;
        }
        if !self.votes.iter().any(|(n, _)| *n == from) {
            self.votes.push((from, !reject));
        }
        match self.tally() {
            Some(true) if pre => self.become_candidate(false),
            Some(true) => self.become_leader(),
            Some(false) => {
                let term = self.term;
                self.become_follower(term, None);
            }
            None => {}
        }
    }

    /// `Some(true)` when a majority granted, `Some(false)` when a majority
    /// refused, `None` while undecided.
    fn tally(&self) -> Option<bool> {
        let granted = self.votes.iter().filter(|(_, g)| *g).count();
        let refused = self.votes.len() - granted;
        if granted >= self.cfg.quorum() {
            Some(true)
        } else if refused >= self.cfg.quorum() {
            Some(false)
        } else {
            None
        }
    }

    /// Hands leadership to `to` (graceful shutdown, rebalancing): new
    /// proposals are refused until `to` is caught up and told to campaign,
    /// or an election timeout passes.
    pub fn transfer_leader(&mut self, to: NodeId) {
        if self.role != Role::Leader || to == self.cfg.node || !self.is_voter(to) {
            return;
        }
        self.transferee = Some(to);
        self.transfer_elapsed = 0;
        self.election_elapsed = 0;
        self.maybe_send_timeout_now(to);
    }

    /// Sends TimeoutNow to the transferee once its log matches ours.
    pub(super) fn maybe_send_timeout_now(&mut self, to: NodeId) {
        if self.transferee != Some(to) {
            return;
        }
        let last = self.log.last_index();
        let caught_up = self
            .progress
            .iter()
            .any(|(n, pr)| *n == to && pr.matched == last);
        if caught_up {
            let term = self.term;
            self.send(to, term, MessageBody::TimeoutNow);
        } else {
            self.send_append(to);
        }
    }
}
