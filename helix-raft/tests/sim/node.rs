//! A simulated node: a `MultiRaft` holding every group (gone while the node
//! is down), and per group its WAL (what it applied; written bytes survive a
//! process crash, only the fsynced prefix survives a power loss), its
//! persisted vote and the proposals it has yet to answer. A node may also
//! be paused (a GC pause, SIGSTOP): memory intact, no ticks, input queued.

use std::collections::VecDeque;

use bytes::Bytes;
use helix_raft::{
    Entry, GroupId, HardState, LogIndex, MessageBatch, MultiRaft, NodeId, RaftConfig, RaftGroup,
    Restored, Term,
};

/// The WAL of one group on one node.
#[derive(Clone, Debug, Default)]
pub struct SimWal {
    /// `entries[i]` has index `i + 1`.
    pub entries: Vec<Entry>,
    /// Entries `..fsynced` survive a power loss.
    pub fsynced: usize,
    /// An fsync in progress: the WAL length when it started. A truncation
    /// while it runs lowers it (it may only report up to the cut).
    pub fsync_started: Option<usize>,
}

impl SimWal {
    pub fn last(&self) -> Option<(LogIndex, Term)> {
        self.entries.last().map(|e| (e.index, e.term))
    }

    pub fn get(&self, index: LogIndex) -> Option<&Entry> {
        if index.0 == 0 {
            return None;
        }
        self.entries.get((index.0 - 1) as usize)
    }

    /// Whether this WAL holds exactly `(index, term, data)`.
    pub fn holds(&self, index: u64, term: Term, data: &Bytes) -> bool {
        self.get(LogIndex(index))
            .is_some_and(|e| e.term == term && e.data == *data)
    }

    /// First index of every term in the WAL, as the host would derive it
    /// from its entry index.
    pub fn term_starts(&self) -> Vec<(LogIndex, Term)> {
        let mut out: Vec<(LogIndex, Term)> = Vec::new();
        for e in &self.entries {
            if out.last().is_none_or(|(_, t)| *t != e.term) {
                out.push((e.index, e.term));
            }
        }
        out
    }

    pub fn truncate_after(&mut self, keep: usize) {
        self.entries.truncate(keep);
        self.fsynced = self.fsynced.min(keep);
        if let Some(s) = self.fsync_started.as_mut() {
            *s = (*s).min(keep);
        }
    }
}

/// A proposal the leader has yet to answer: the client's own record of
/// what it sent, never read back from a replica.
#[derive(Clone, Debug)]
pub struct Pending {
    pub index: LogIndex,
    pub term: Term,
    pub data: Bytes,
}

/// One group's host state on one node.
#[derive(Debug, Default)]
pub struct GroupHost {
    pub wal: SimWal,
    pub hard_state: HardState,
    /// Highest acknowledged index this incarnation reported.
    pub ack_seen: LogIndex,
    /// The group's acknowledged index when the last input was fully handled.
    pub ack_before_input: LogIndex,
    pub pending: Vec<Pending>,
    /// This replica lost its log at least once in the run.
    pub lost_log: bool,
}

/// One simulated node.
#[derive(Debug)]
pub struct SimNode {
    pub id: NodeId,
    pub raft: Option<MultiRaft>,
    pub groups: Vec<GroupHost>,
    /// Paused until this tick: no ticks, no processing; input waits in
    /// `inbox` and is handled in order on resume.
    pub paused_until: Option<u64>,
    pub inbox: VecDeque<MessageBatch>,
    /// Ticks per four global ticks: 3 slow clock, 4 normal, 5 fast.
    pub tick_rate: u64,
    pub tick_credit: u64,
}

impl SimNode {
    pub fn new(id: NodeId, groups: usize, tick_rate: u64) -> Self {
        SimNode {
            id,
            raft: None,
            groups: (0..groups).map(|_| GroupHost::default()).collect(),
            paused_until: None,
            inbox: VecDeque::new(),
            tick_rate,
            tick_credit: 0,
        }
    }

    pub fn up(&self) -> bool {
        self.raft.is_some()
    }

    /// Up and not paused: may tick, take input and be proposed to.
    pub fn running(&self) -> bool {
        self.raft.is_some() && self.paused_until.is_none()
    }

    pub fn group(&self, g: usize) -> Option<&RaftGroup> {
        self.raft.as_ref()?.group(GroupId(g as u64))
    }

    pub fn group_mut(&mut self, g: usize) -> Option<&mut RaftGroup> {
        self.raft.as_mut()?.group_mut(GroupId(g as u64))
    }

    /// Starts (or restarts) every group from its WAL and persisted vote.
    /// A restored group counts its whole WAL as durable, so the host makes
    /// it so first (helix-wal syncs what recovery kept at open): bytes a
    /// process crash left in the page cache are fsynced here.
    pub fn start(&mut self, cfg: &RaftConfig, seed: u64) {
        let mut multi = MultiRaft::new(self.id);
        for (g, host) in self.groups.iter_mut().enumerate() {
            host.wal.fsynced = host.wal.entries.len();
            let restored = Restored {
                hard_state: host.hard_state,
                wal_last: host.wal.last(),
                wal_term_starts: host.wal.term_starts(),
                seed: seed.wrapping_add(g as u64),
            };
            multi
                .add_group(GroupId(g as u64), cfg.clone(), restored)
                .expect("restore from own WAL is valid");
            host.ack_seen = LogIndex(0);
            host.ack_before_input = LogIndex(0);
        }
        self.raft = Some(multi);
        self.paused_until = None;
        self.inbox.clear();
    }

    /// Group `g`'s log is damaged and set aside while the node is down (it
    /// restarts empty), or loses its tail past `keep` entries (a host
    /// restart took what was only in the page cache, though reported
    /// durable): it restarts with what is left, keeping its vote, as a
    /// learner.
    pub fn lose_log(&mut self, g: usize, keep: usize) {
        let host = &mut self.groups[g];
        host.wal.truncate_after(keep);
        host.wal.fsync_started = None;
        host.hard_state.learner = true;
        host.lost_log = true;
    }

    /// Crash: all memory is lost, unanswered proposals with it. A process
    /// crash keeps written WAL bytes (the page cache survives); a power
    /// loss keeps only the fsynced prefix.
    pub fn crash(&mut self, power_loss: bool) {
        self.raft = None;
        self.paused_until = None;
        self.inbox.clear();
        for host in &mut self.groups {
            host.pending.clear();
            host.wal.fsync_started = None;
            if power_loss {
                let keep = host.wal.fsynced;
                host.wal.entries.truncate(keep);
            }
        }
    }
}
