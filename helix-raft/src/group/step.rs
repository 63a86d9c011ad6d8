//! `step`: the term rules of the Raft paper (plus pre-vote and the leader
//! lease of check-quorum), then dispatch by message kind.

use super::RaftGroup;
use crate::error::RaftError;
use crate::message::{Message, MessageBody};
use crate::types::Role;

impl RaftGroup {
    /// Handles one message from a peer.
    pub fn step(&mut self, m: Message) -> Result<(), RaftError> {
        if m.group != self.group {
            return Err(RaftError::WrongGroup {
                expected: self.group,
                got: m.group,
            });
        }
        if m.to != self.cfg.node {
            return Err(RaftError::WrongNode {
                expected: self.cfg.node,
                got: m.to,
            });
        }
        if m.from == self.cfg.node || !self.is_voter(m.from) {
            return Err(RaftError::UnknownPeer(m.from));
        }
        if m.term > self.term {
            if !self.accept_higher_term(&m) {
                return Ok(());
            }
        } else if m.term < self.term {
            self.answer_lower_term(&m);
            return Ok(());
        }
        self.dispatch(m);
        Ok(())
    }

    /// A message from a higher term. Returns false if it must be ignored.
    fn accept_higher_term(&mut self, m: &Message) -> bool {
        match &m.body {
            MessageBody::PreVote { .. }
            | MessageBody::Vote {
                transfer: false, ..
            } => {
                if self.in_lease() {
                    // A leader is alive: do not let a returning partitioned
                    // node disrupt it.
                    return false;
                }
                if matches!(m.body, MessageBody::PreVote { .. }) {
                    // Pre-votes never change the voter's term.
                    return true;
                }
                // Only a granted vote or the leader resets a follower's
                // election timer (Raft 5.2): a candidate with a stale log
                // raising the term again and again must not keep the
                // up-to-date nodes from ever campaigning.
                let (was_follower, elapsed) = (self.role == Role::Follower, self.election_elapsed);
                self.become_follower(m.term, None);
                if was_follower {
                    self.election_elapsed = elapsed;
                }
            }
            MessageBody::PreVoteResponse { reject: false } => {
                // A granted pre-vote carries the term we would campaign at.
            }
            MessageBody::Append { .. }
            | MessageBody::Heartbeat { .. }
            | MessageBody::Commit { .. }
            | MessageBody::TimeoutNow => self.become_follower(m.term, Some(m.from)),
            _ => self.become_follower(m.term, None),
        }
        true
    }

    /// A message from a lower term: tell a stale leader or pre-candidate
    /// about our term so it steps down, otherwise drop it.
    fn answer_lower_term(&mut self, m: &Message) {
        match m.body {
            MessageBody::Append { .. } | MessageBody::Heartbeat { .. } => {
                let last_index = self.log.last_index();
                self.send(
                    m.from,
                    self.term,
                    MessageBody::AppendResponse {
                        reject: true,
                        index: crate::types::LogIndex(0),
                        hint_index: crate::types::LogIndex(0),
                        hint_term: crate::types::Term(0),
                        last_index,
                        durable: crate::types::LogIndex(0),
                    },
                );
            }
            MessageBody::PreVote { .. } => {
                self.send(
                    m.from,
                    self.term,
                    MessageBody::PreVoteResponse { reject: true },
                );
            }
            _ => {}
        }
    }

    fn dispatch(&mut self, m: Message) {
        match m.body {
            MessageBody::PreVote {
                last_index,
                last_term,
            } => self.handle_vote_request(m.from, m.term, last_index, last_term, true),
            MessageBody::Vote {
                last_index,
                last_term,
                ..
            } => self.handle_vote_request(m.from, m.term, last_index, last_term, false),
            MessageBody::PreVoteResponse { reject } => {
                self.handle_vote_response(m.from, m.term, reject, true)
            }
            MessageBody::VoteResponse { reject } => {
                self.handle_vote_response(m.from, m.term, reject, false)
            }
            MessageBody::Append {
                prev_index,
                prev_term,
                entries,
                commit,
                acknowledged,
            } => {
                if self.follow(m.from) {
                    self.handle_append(
                        m.from,
                        prev_index,
                        prev_term,
                        &entries,
                        commit,
                        acknowledged,
                    );
                }
            }
            MessageBody::Heartbeat {
                commit,
                acknowledged,
            } => {
                if self.follow(m.from) {
                    self.handle_heartbeat(m.from, commit, acknowledged);
                }
            }
            MessageBody::Commit {
                commit,
                acknowledged,
            } => {
                if self.follow(m.from) {
                    self.learn_commit(commit, acknowledged);
                }
            }
            MessageBody::TimeoutNow => {
                if self.role == Role::Follower && self.may_stand() {
                    self.become_candidate(true);
                }
            }
            MessageBody::AppendResponse {
                reject,
                index,
                hint_index,
                hint_term,
                last_index,
                durable,
            } => {
                if self.role == Role::Leader {
                    self.handle_append_response(
                        m.from, reject, index, hint_index, hint_term, last_index, durable,
                    );
                }
            }
            MessageBody::HeartbeatResponse { matched, durable } => {
                if self.role == Role::Leader {
                    self.handle_heartbeat_response(m.from, matched, durable);
                }
            }
        }
    }

    /// A message only the leader of this term sends arrived: make sure we
    /// follow it. Returns false if this node is itself the leader (a second
    /// leader in one term would be a safety bug; the message is dropped).
    fn follow(&mut self, from: crate::types::NodeId) -> bool {
        match self.role {
            Role::Leader => false,
            Role::Follower => {
                if self.leader != Some(from) {
                    self.leader = Some(from);
                    self.leader_match = crate::types::LogIndex(0);
                    self.durable_reported = crate::types::LogIndex(0);
                }
                self.election_elapsed = 0;
                true
            }
            Role::PreCandidate | Role::Candidate => {
                self.become_follower(self.term, Some(from));
                true
            }
        }
    }
}
