//! The leader's view of one follower: how far its log matches, what to send
//! next, how many appends are in flight, and how much of it is durable.
//!
//! States (etcd-raft's, plus catch-up from the WAL):
//! - `Probe`: one append at a time until a response shows where logs match;
//! - `Replicate`: optimistic pipelining, at most `max_inflight` appends;
//! - `CatchUp`: the follower needs entries no longer in memory; the host
//!   streams them from its WAL.

use std::collections::VecDeque;

use crate::types::LogIndex;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ProgressState {
    Probe,
    Replicate,
    CatchUp,
}

/// Replication progress of one follower.
#[derive(Clone, Debug)]
pub struct Progress {
    /// Highest index known to match the leader's log.
    pub matched: LogIndex,
    /// Next index to send.
    pub next: LogIndex,
    pub state: ProgressState,
    /// Probe: an append is outstanding; wait for a response or heartbeat.
    pub probe_sent: bool,
    /// Replicate: last index of each append in flight, oldest first.
    inflight: VecDeque<LogIndex>,
    max_inflight: usize,
    /// Durable index reported by the follower, already clamped by it to what
    /// matches this leader; safe to take as a maximum.
    pub durable: LogIndex,
    /// Heard from since the last check-quorum round.
    pub recent_active: bool,
    /// Leader ticks since the follower last answered (ISR, balancing,
    /// the lease).
    pub ticks_since_heard: u32,
    /// The host reported the connection to this follower broken and
    /// nothing arrived from it since: its earlier answers no longer count
    /// towards the leader's lease (the follower, told the same, may be
    /// electing another leader already).
    pub connection_lost: bool,
    /// Ticks spent in `CatchUp` without the host feeding entries.
    pub catch_up_idle: u32,
    /// Commit index last sent to this follower.
    pub commit_sent: LogIndex,
    /// Replicate: `matched` when heartbeat answers began to show the
    /// follower behind what was sent, and how many in a row have shown it
    /// with no progress since.
    pub stall_mark: Option<(LogIndex, u32)>,
}

impl Progress {
    #[must_use]
    pub fn new(next: LogIndex, max_inflight: usize) -> Self {
        Progress {
            matched: LogIndex(0),
            next,
            state: ProgressState::Probe,
            probe_sent: false,
            inflight: VecDeque::with_capacity(max_inflight),
            max_inflight,
            durable: LogIndex(0),
            recent_active: true,
            ticks_since_heard: 0,
            connection_lost: false,
            catch_up_idle: 0,
            commit_sent: LogIndex(0),
            stall_mark: None,
        }
    }

    /// The follower answered (any response of this term).
    pub fn heard(&mut self) {
        self.recent_active = true;
        self.ticks_since_heard = 0;
        self.connection_lost = false;
    }

    pub fn become_probe(&mut self) {
        self.state = ProgressState::Probe;
        self.probe_sent = false;
        self.inflight.clear();
        self.next = self.matched.next();
    }

    pub fn become_replicate(&mut self) {
        self.state = ProgressState::Replicate;
        self.probe_sent = false;
        self.inflight.clear();
        self.next = self.next.max(self.matched.next());
    }

    pub fn become_catch_up(&mut self) {
        self.state = ProgressState::CatchUp;
        self.probe_sent = false;
        self.inflight.clear();
        self.catch_up_idle = 0;
    }

    /// Can another append be sent now?
    #[must_use]
    pub fn is_paused(&self) -> bool {
        match self.state {
            ProgressState::Probe => self.probe_sent,
            ProgressState::Replicate => self.inflight.len() >= self.max_inflight,
            ProgressState::CatchUp => true,
        }
    }

    #[must_use]
    pub fn inflight(&self) -> usize {
        match self.state {
            ProgressState::Probe => usize::from(self.probe_sent),
            ProgressState::Replicate => self.inflight.len(),
            ProgressState::CatchUp => 0,
        }
    }

    /// Records an append whose last entry is `last` (or whose prev is `last`
    /// when it carries no entries).
    pub fn sent(&mut self, last: LogIndex, carried_entries: bool) {
        match self.state {
            ProgressState::Replicate => {
                if carried_entries {
                    self.next = last.next();
                    self.inflight.push_back(last);
                }
            }
            ProgressState::Probe => self.probe_sent = true,
            ProgressState::CatchUp => {}
        }
    }

    /// A success response: the follower matches up to `index`. Returns true
    /// if that was news.
    pub fn on_success(&mut self, index: LogIndex) -> bool {
        while self.inflight.front().is_some_and(|i| *i <= index) {
            self.inflight.pop_front();
        }
        let news = index > self.matched;
        if news {
            self.matched = index;
        }
        self.next = self.next.max(index.next());
        match self.state {
            ProgressState::Probe => self.become_replicate(),
            ProgressState::Replicate | ProgressState::CatchUp => {}
        }
        news
    }

    /// A reject of the append whose prev index was `rejected`. `probe_at` is
    /// where fast backtracking says logs may match; `follower_last` is the
    /// follower's last index. Returns false if the reject was stale.
    pub fn on_reject(
        &mut self,
        rejected: LogIndex,
        probe_at: LogIndex,
        follower_last: LogIndex,
    ) -> bool {
        if follower_last < self.matched {
            // The follower restarted and lost its in-memory tail: what it
            // matched beyond its WAL is gone.
            self.matched = follower_last;
        }
        let backtracked = rejected.min(probe_at.next()).max(self.matched.next());
        match self.state {
            ProgressState::Replicate => {
                if rejected <= self.matched {
                    return false;
                }
                self.become_probe();
                self.next = backtracked;
                true
            }
            ProgressState::Probe => {
                if rejected != self.next.prev() {
                    return false;
                }
                self.next = backtracked;
                self.probe_sent = false;
                true
            }
            ProgressState::CatchUp => {
                self.become_probe();
                self.next = backtracked;
                true
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replicate_pipelines_up_to_the_limit() {
        let mut pr = Progress::new(LogIndex(1), 2);
        assert!(pr.on_success(LogIndex(0)) || pr.state == ProgressState::Replicate);
        pr.sent(LogIndex(3), true);
        pr.sent(LogIndex(5), true);
        assert!(pr.is_paused());
        pr.on_success(LogIndex(3));
        assert!(!pr.is_paused());
        assert_eq!((pr.matched, pr.next), (LogIndex(3), LogIndex(6)));
    }

    #[test]
    fn reject_backtracks_to_the_hint_and_sees_a_lost_tail() {
        let mut pr = Progress::new(LogIndex(11), 5);
        pr.on_success(LogIndex(10));
        pr.sent(LogIndex(12), true);
        // Follower restarted with only 4 entries in its WAL.
        assert!(pr.on_reject(LogIndex(10), LogIndex(4), LogIndex(4)));
        assert_eq!(pr.state, ProgressState::Probe);
        assert_eq!((pr.matched, pr.next), (LogIndex(4), LogIndex(5)));
    }

    #[test]
    fn stale_probe_reject_is_ignored() {
        let mut pr = Progress::new(LogIndex(8), 5);
        pr.on_success(LogIndex(3));
        pr.become_probe();
        pr.sent(LogIndex(3), false);
        assert!(!pr.on_reject(LogIndex(6), LogIndex(2), LogIndex(9)));
    }
}
