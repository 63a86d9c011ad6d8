//! The in-sync replicas of a group this node leads, as Kafka defines them:
//! a follower stays in sync while it has caught up with the leader within
//! the last `replica.lag.time.max.ms`. "Caught up" at a tick means its
//! matched index reached the leader's last index of the previous tick (a
//! follower under steady load is always a little behind the very end).
//! A dead follower stops catching up and leaves after the lag time; ISR is
//! reported, it does not gate acknowledgements (Raft's majority does).

use std::collections::HashMap;

use helix_raft::{LogIndex, NodeId, Status};

/// A follower that has not answered for more ticks than this (heartbeats go
/// every tick) is not catching up, however far its matched index got.
pub const HEARD_WITHIN_TICKS: u32 = 3;

/// One led group's ISR bookkeeping, in ticks.
#[derive(Debug, Default)]
pub struct IsrTracker {
    caught_up_at: HashMap<NodeId, u64>,
    last_index_before: LogIndex,
    current: Vec<NodeId>,
}

impl IsrTracker {
    /// Updates with the group's status at tick `now`; returns the new ISR
    /// (leader first, then followers by id) when it changed.
    pub fn tick(&mut self, now: u64, me: NodeId, status: &Status, lag: u64) -> Option<Vec<NodeId>> {
        for f in &status.followers {
            let at = self.caught_up_at.entry(f.node).or_insert(now);
            // Kafka's followers fetch all the time, so an idle one that
            // stopped fetching leaves the ISR too: caught up means heard
            // from recently as well as matched.
            if f.matched >= self.last_index_before && f.ticks_since_heard <= HEARD_WITHIN_TICKS {
                *at = now;
            }
        }
        self.last_index_before = status.last_index;
        let mut isr = vec![me];
        let mut followers: Vec<NodeId> = status
            .followers
            .iter()
            .filter(|f| {
                self.caught_up_at
                    .get(&f.node)
                    .is_some_and(|at| now.saturating_sub(*at) <= lag)
            })
            .map(|f| f.node)
            .collect();
        followers.sort();
        isr.extend(followers);
        if isr == self.current {
            return None;
        }
        self.current = isr.clone();
        Some(isr)
    }
}

/// A replica's own answer to "am I caught up?", the follower's side of
/// the ISR rule: at a tick a follower is caught up when its durable index
/// reached the commit index its leader had sent by the previous tick, and
/// it stays in sync while it caught up within the lag. A leader is in
/// sync. A replica that has not yet heard a leader since it started is
/// not (a restarted node is behind until it proves otherwise).
#[derive(Debug, Default)]
pub struct CaughtUp {
    commit_before: Option<LogIndex>,
    at: Option<u64>,
}

impl CaughtUp {
    pub fn tick(&mut self, now: u64, status: &Status, lag: u64) -> bool {
        if status.role == helix_raft::Role::Leader {
            self.at = Some(now);
            self.commit_before = None;
            return true;
        }
        if let Some(before) = self.commit_before
            && status.leader.is_some()
            && status.durable >= before
        {
            self.at = Some(now);
        }
        self.commit_before = (status.leader_commit.0 > 0).then_some(status.leader_commit);
        self.at.is_some_and(|at| now.saturating_sub(at) <= lag)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use helix_raft::{FollowerStatus, Role, Term};

    fn status(last: u64, followers: &[(u64, u64)]) -> Status {
        Status {
            role: Role::Leader,
            term: Term(1),
            leader: Some(NodeId(1)),
            commit: LogIndex(last),
            leader_commit: LogIndex(last),
            applied: LogIndex(last),
            durable: LogIndex(last),
            acknowledged: LogIndex(last),
            last_index: LogIndex(last),
            mem_start: LogIndex(1),
            inmem_bytes: 0,
            followers: followers
                .iter()
                .map(|(node, matched)| FollowerStatus {
                    node: NodeId(*node),
                    matched: LogIndex(*matched),
                    next: LogIndex(matched + 1),
                    durable: LogIndex(*matched),
                    inflight: 0,
                    catching_up: false,
                    ticks_since_heard: 0,
                })
                .collect(),
            elections_started: 0,
            elections_won: 0,
            wal_truncations: 0,
            transferring_to: None,
            learner: false,
        }
    }

    #[test]
    fn a_follower_that_stops_catching_up_leaves_after_the_lag_and_returns() {
        let mut t = IsrTracker::default();
        let me = NodeId(1);
        let all = vec![NodeId(1), NodeId(2), NodeId(3)];
        assert_eq!(
            t.tick(0, me, &status(10, &[(2, 10), (3, 10)]), 5),
            Some(all.clone())
        );
        // Node 3 stops at 10 while the log grows (at tick 1 it still had
        // all the leader had at tick 0); node 2 trails by a tick.
        for now in 1..=6 {
            let last = 10 + now * 10;
            assert_eq!(
                t.tick(now, me, &status(last, &[(2, last - 10), (3, 10)]), 5),
                None
            );
        }
        assert_eq!(
            t.tick(7, me, &status(80, &[(2, 70), (3, 10)]), 5),
            Some(vec![NodeId(1), NodeId(2)])
        );
        // Node 3 catches up again: back at once.
        assert_eq!(
            t.tick(8, me, &status(80, &[(2, 80), (3, 80)]), 5),
            Some(all)
        );
    }

    #[test]
    fn an_idle_follower_that_stops_answering_leaves_after_the_lag() {
        let mut t = IsrTracker::default();
        let me = NodeId(1);
        let all = vec![NodeId(1), NodeId(2), NodeId(3)];
        assert_eq!(
            t.tick(0, me, &status(10, &[(2, 10), (3, 10)]), 5),
            Some(all.clone())
        );
        // Nothing is written, so node 3's matched index stays "caught up";
        // but it stopped answering (cut off, or dead): it must still leave.
        let silent = |since: u32| {
            let mut s = status(10, &[(2, 10), (3, 10)]);
            s.followers[1].ticks_since_heard = since;
            s
        };
        for now in 1..=5 {
            let got = t.tick(now, me, &silent(now as u32), 5);
            assert_eq!(got, None, "tick {now}");
        }
        let mut left = None;
        for now in 6..=10 {
            left = left.or(t.tick(now, me, &silent(now as u32), 5));
        }
        assert_eq!(left, Some(vec![NodeId(1), NodeId(2)]));
        // It answers again: back at once.
        assert_eq!(t.tick(11, me, &silent(0), 5), Some(all));
    }

    fn follower(durable: u64, leader_commit: u64) -> Status {
        let mut s = status(0, &[]);
        s.role = Role::Follower;
        s.leader = Some(NodeId(2));
        s.durable = LogIndex(durable);
        s.leader_commit = LogIndex(leader_commit);
        s
    }

    #[test]
    fn a_restarted_follower_is_behind_until_it_reaches_what_its_leader_committed() {
        let mut c = CaughtUp::default();
        // Nothing heard from a leader yet.
        assert!(!c.tick(1, &follower(10, 0), 5));
        // First heard: the leader is at 500; not caught up on hearsay.
        assert!(!c.tick(2, &follower(10, 500), 5));
        assert!(!c.tick(3, &follower(200, 600), 5));
        // Not yet 600, what the leader had sent a tick ago...
        assert!(!c.tick(4, &follower(550, 600), 5));
        // ...now reached.
        assert!(c.tick(4, &follower(600, 650), 5));
        // Under steady load it stays in sync while it keeps up...
        assert!(c.tick(5, &follower(650, 700), 5));
        // ...and falls out after `lag` ticks without catching up.
        for now in 6..=10 {
            assert!(c.tick(now, &follower(650, 900), 5), "tick {now}");
        }
        assert!(!c.tick(11, &follower(650, 900), 5));
    }

    #[test]
    fn a_leader_is_in_sync_and_an_election_within_the_lag_does_not_count() {
        let mut c = CaughtUp::default();
        let mut leader = status(5, &[]);
        leader.leader_commit = LogIndex(5);
        assert!(c.tick(1, &leader, 3));
        let mut candidate = follower(5, 5);
        candidate.role = Role::Candidate;
        candidate.leader = None;
        assert!(c.tick(2, &candidate, 3));
        assert!(!c.tick(5, &candidate, 3));
    }
}
