//! What a shard publishes about leadership and does with it: role, term,
//! leader, ISR and lease of every group after a round, leader balancing
//! (handing groups back to their preferred leader), and the hand-over of
//! every led group at a graceful shutdown.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use helix_raft::{GroupId, RaftGroup};

use super::Shard;
use crate::replica::Published;

/// Leader balancing hands back at most this many groups per shard at a
/// time: each hand-over sends that partition's clients to another node, and
/// dozens at once stalled produce for about 2 s under load.
pub(super) const BALANCE_BATCH: usize = 2;
/// Ticks between two steps of a balancing round (0.5 s by default).
pub(super) const BALANCE_STEP_TICKS: u64 = 10;
/// Balancing intervals a group is left alone after a hand-back that did not
/// happen (each failed attempt holds its produce for an election timeout).
pub(super) const HANDBACK_RETRY_ROUNDS: u64 = 3;

impl Shard {
    /// Publishes role, term and leader of every group that may have changed,
    /// and after a tick the ISR of every group this node leads.
    pub(super) fn publish_leadership(&mut self) {
        let ticked = std::mem::take(&mut self.ticked);
        let ids: Vec<GroupId> = if ticked {
            self.touched.clear();
            self.states.keys().copied().collect()
        } else {
            std::mem::take(&mut self.touched).into_iter().collect()
        };
        let me = self.multi.node();
        for id in ids {
            let (Some(group), Some(state)) = (self.multi.group(id), self.states.get_mut(&id))
            else {
                continue;
            };
            // A lease that ends is withdrawn before, one that begins is
            // published after, the role: readers never see a lease held
            // by a replica that no longer leads.
            let left = group.lease_ticks_left();
            let lease = (self.published.get(&id), self.tick, &*self.changes);
            if left == 0 {
                publish_lease(lease, id, left, group);
            }
            let changed = state.leadership(group);
            if left > 0 {
                publish_lease(lease, id, left, group);
            }
            if let Some(now) = changed {
                let s = group.status();
                tracing::info!(
                    group = id.0,
                    role = ?now.role,
                    term = now.term.0,
                    leader = ?now.leader.map(|n| n.0),
                    last_index = s.last_index.0,
                    commit = s.commit.0,
                    acknowledged = s.acknowledged.0,
                    "leadership changed"
                );
                self.changes.fetch_add(1, Ordering::Relaxed);
                crate::metrics::Metrics::count(
                    &crate::metrics::metrics().counters.leader_changes,
                    1,
                );
                if now.role != helix_raft::Role::Leader {
                    self.isr.remove(&id);
                }
            }
            if !ticked {
                continue;
            }
            let status = group.status();
            if id == GroupId(0) {
                state.publish_quorum(quorum_progress(&status, self.tick));
            }
            let caught_up =
                self.caught_up
                    .entry(id)
                    .or_default()
                    .tick(self.ticks, &status, self.isr_lag_ticks);
            state.publish_caught_up(caught_up);
            state.publish_synced(group, &status);
            if group.role() == helix_raft::Role::Leader
                && group.config().voters.len() > 1
                && let Some(isr) = self.isr.entry(id).or_default().tick(
                    self.ticks,
                    me,
                    &status,
                    self.isr_lag_ticks,
                )
            {
                tracing::info!(group = id.0, isr = ?isr.iter().map(|n| n.0).collect::<Vec<_>>(), "in-sync replicas changed");
                state.publish_isr(isr);
                self.changes.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    /// Leader balancing (Kafka's auto.leader.rebalance): a group led here
    /// whose preferred leader (first replica) is another node, in the ISR
    /// and fully caught up, is handed back to it; so leadership returns to
    /// where placement spread it once a restarted node has caught up. At
    /// most `batch` groups start a hand-over per call (those already handing
    /// over count); true when more may be waiting.
    pub(super) fn restore_preferred_leaders(&mut self, batch: usize) -> bool {
        let me = self.multi.node();
        let mut ids: Vec<GroupId> = self.states.keys().copied().collect();
        ids.sort_unstable();
        let mut moving = 0;
        for id in ids {
            if moving == batch {
                return true;
            }
            let Some(g) = self.multi.group_mut(id) else {
                continue;
            };
            let Some(&preferred) = g.config().voters.first() else {
                continue;
            };
            if g.role() != helix_raft::Role::Leader || preferred == me {
                continue;
            }
            let status = g.status();
            if status.transferring_to.is_some() {
                moving += 1;
                continue;
            }
            if let Some(&(term, at)) = self.handbacks.get(&id) {
                let retry_after =
                    HANDBACK_RETRY_ROUNDS.saturating_mul(self.balance_every.unwrap_or(0));
                if term == status.term && self.ticks < at.saturating_add(retry_after) {
                    continue; // it did not take over: leave it be for a while
                }
            }
            let caught_up = status.followers.iter().any(|f| {
                f.node == preferred
                    && f.matched == status.last_index
                    && f.ticks_since_heard <= crate::host::isr::HEARD_WITHIN_TICKS
            });
            let in_sync = self
                .states
                .get(&id)
                .is_some_and(|s| s.isr().contains(&preferred));
            if caught_up && in_sync {
                tracing::info!(
                    group = id.0,
                    to = preferred.0,
                    "handing leadership back to the preferred replica"
                );
                g.transfer_leader(preferred);
                self.handbacks.insert(id, (status.term, self.ticks));
                self.touched.insert(id);
                moving += 1;
            }
        }
        false
    }

    /// Hands `id` to its preferred replica at once if this node leads it
    /// and the preferred replica is in the ISR and caught up (ElectLeaders).
    pub(super) fn hand_back(&mut self, id: GroupId) {
        let me = self.multi.node();
        let in_sync = |preferred| {
            self.states
                .get(&id)
                .is_some_and(|s| s.isr().contains(&preferred))
        };
        let Some(g) = self.multi.group(id) else {
            return;
        };
        let Some(&preferred) = g.config().voters.first() else {
            return;
        };
        let status = g.status();
        let caught_up = status.followers.iter().any(|f| {
            f.node == preferred
                && f.matched == status.last_index
                && f.ticks_since_heard <= crate::host::isr::HEARD_WITHIN_TICKS
        });
        if g.role() != helix_raft::Role::Leader
            || preferred == me
            || status.transferring_to.is_some()
            || !caught_up
            || !in_sync(preferred)
        {
            return;
        }
        tracing::info!(
            group = id.0,
            to = preferred.0,
            "electing the preferred replica on request"
        );
        if let Some(g) = self.multi.group_mut(id) {
            g.transfer_leader(preferred);
        }
        self.touched.insert(id);
    }

    /// Graceful shutdown: every group led here is handed to its most
    /// caught-up follower, so clients see one retriable error, not a timeout.
    pub(super) fn step_down_all(&mut self) {
        let ids: Vec<GroupId> = self.states.keys().copied().collect();
        for id in ids {
            let Some(g) = self.multi.group_mut(id) else {
                continue;
            };
            if g.role() != helix_raft::Role::Leader {
                continue;
            }
            let status = g.status();
            if let Some(best) = status.followers.iter().max_by_key(|f| (f.matched, f.node)) {
                g.transfer_leader(best.node);
                self.touched.insert(id);
            }
        }
    }
}

/// Where a lease is published: the replica's view, the tick length, the
/// gossip's change counter.
type LeaseSink<'a> = (
    Option<&'a Arc<Published>>,
    std::time::Duration,
    &'a AtomicU64,
);

/// Publishes `group`'s leader lease (`ticks_left` ticks of the tick length
/// from now, a deadline on the host's clock); a change of whether it is
/// held is gossiped at once (a leader's report claims the lease), and a
/// lease a leader loses is logged and counted.
fn publish_lease(
    (published, tick, changes): LeaseSink<'_>,
    id: GroupId,
    ticks_left: u32,
    group: &RaftGroup,
) {
    let held = ticks_left > 0;
    if !published.is_some_and(|p| p.publish_lease(ticks_left, tick)) {
        return;
    }
    changes.fetch_add(1, Ordering::Relaxed);
    if !held && group.role() == helix_raft::Role::Leader {
        tracing::info!(
            group = id.0,
            term = group.term().0,
            "leader lease lost: no majority answered within the lease; not naming itself leader"
        );
        crate::metrics::Metrics::count(&crate::metrics::metrics().counters.leader_lease_losses, 1);
    }
}

/// The controller group's replication as this replica sees it (the
/// followers' progress only where it leads), for DescribeQuorum.
fn quorum_progress(
    s: &helix_raft::Status,
    tick: std::time::Duration,
) -> Option<crate::replica::QuorumProgress> {
    let now = crate::clock::now_ms();
    let tick_ms = i64::try_from(tick.as_millis()).unwrap_or(i64::MAX);
    Some(crate::replica::QuorumProgress {
        last_index: s.last_index.0,
        commit: if s.role == helix_raft::Role::Leader {
            s.commit.0
        } else {
            s.leader_commit.0
        },
        followers: s
            .followers
            .iter()
            .map(|f| crate::replica::FollowerProgress {
                node: f.node,
                matched: f.matched.0,
                heard_ms: now
                    .saturating_sub(tick_ms.saturating_mul(i64::from(f.ticks_since_heard))),
            })
            .collect(),
        at_ms: now,
    })
}
