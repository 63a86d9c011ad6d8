//! What a replica publishes for readers besides its watermarks: its
//! leadership (role, term, leader, serving), in-sync replicas, whether it
//! is caught up and whether it has synced since its start.

use helix_raft::{RaftGroup, Role};

use super::PartitionState;
use crate::error::HelixError;
use crate::replica::Leadership;

impl PartitionState {
    /// Publishes a change of role, term or leader; a replica that stops
    /// leading fails whatever waits for its proposals (retriable: the
    /// client finds the new leader).
    pub fn leadership(&mut self, group: &RaftGroup) -> Option<Leadership> {
        let now = Leadership {
            role: group.role(),
            term: group.term(),
            leader: group.leader(),
            serving: group.role() == Role::Leader
                && group.term_at(group.acknowledged()) == Some(group.term()),
        };
        if now == self.leadership {
            return None;
        }
        let was_leader = self.leadership.role == Role::Leader;
        self.leadership = now;
        if now.role != Role::Leader {
            self.publish_isr(Vec::new());
        } else if group.config().voters.len() == 1 {
            self.publish_isr(group.config().voters.clone());
        }
        self.published.leadership.send_replace(now);
        if was_leader && now.role != Role::Leader {
            self.fail_all(&HelixError::NotLeader);
        }
        Some(now)
    }

    /// The in-sync replicas last published.
    pub fn isr(&self) -> Vec<helix_raft::NodeId> {
        self.published
            .isr
            .lock()
            .map(|i| i.clone())
            .unwrap_or_default()
    }

    /// Publishes the in-sync replicas computed by the leader's shard.
    /// Whether this replica is caught up (see `host::isr::CaughtUp`).
    pub fn publish_caught_up(&self, caught_up: bool) {
        self.published
            .caught_up
            .store(caught_up, std::sync::atomic::Ordering::Relaxed);
    }

    /// Marks the replica synced once `group` has applied and acknowledged
    /// what its leader had committed when it told this follower (leader:
    /// an entry of its own term acknowledged, so everything before is).
    /// `s` is `group`'s status at this tick.
    pub fn publish_synced(&self, group: &RaftGroup, s: &helix_raft::Status) {
        use std::sync::atomic::Ordering;
        if self.published.synced_since_start.load(Ordering::Relaxed) {
            return;
        }
        // Acknowledged, not only applied: the high watermark (what readers
        // of this replica, the controller's view among them, go by) moves
        // with the acknowledged index.
        let synced = match s.role {
            Role::Leader => group.term_at(s.acknowledged) == Some(s.term),
            _ => {
                s.leader.is_some()
                    && s.leader_commit.0 > 0
                    && s.applied >= s.leader_commit
                    && s.acknowledged >= s.leader_commit
            }
        };
        if synced {
            self.published
                .synced_since_start
                .store(true, Ordering::Release);
        }
    }

    pub fn publish_quorum(&self, progress: Option<crate::replica::QuorumProgress>) {
        if let Ok(mut q) = self.published.quorum.lock() {
            *q = progress;
        }
    }

    pub fn publish_isr(&self, isr: Vec<helix_raft::NodeId>) {
        if let Ok(mut i) = self.published.isr.lock() {
            *i = isr;
        }
    }
}
