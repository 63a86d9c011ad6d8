//! A simulated node: for every group a `RaftGroup` (gone while the node is
//! down), its WAL (what it applied; in fsync mode only the fsynced prefix
//! survives a crash) and its persisted vote.

use helix_raft::{
    Entry, GroupId, HardState, LogIndex, NodeId, RaftConfig, RaftGroup, Restored, Term,
};

/// The WAL of one group on one node.
#[derive(Clone, Debug, Default)]
pub struct SimWal {
    /// `entries[i]` has index `i + 1`.
    pub entries: Vec<Entry>,
    /// Entries `..fsynced` survive a power loss.
    pub fsynced: usize,
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
}

/// One group's host state on one node.
#[derive(Debug)]
pub struct GroupHost {
    pub raft: Option<RaftGroup>,
    pub wal: SimWal,
    pub hard_state: HardState,
    /// Highest acknowledged index this incarnation reported.
    pub ack_seen: LogIndex,
    /// The group's acknowledged index when the last input was fully handled.
    pub ack_before_input: LogIndex,
}

/// One simulated node.
#[derive(Debug)]
pub struct SimNode {
    pub id: NodeId,
    pub up: bool,
    pub groups: Vec<GroupHost>,
}

impl SimNode {
    pub fn new(id: NodeId, groups: usize) -> Self {
        SimNode {
            id,
            up: false,
            groups: (0..groups)
                .map(|_| GroupHost {
                    raft: None,
                    wal: SimWal::default(),
                    hard_state: HardState::default(),
                    ack_seen: LogIndex(0),
                    ack_before_input: LogIndex(0),
                })
                .collect(),
        }
    }

    /// Starts (or restarts) every group from its WAL and persisted vote.
    pub fn start(&mut self, cfg: &RaftConfig, seed: u64) {
        self.up = true;
        for (g, host) in self.groups.iter_mut().enumerate() {
            let restored = Restored {
                hard_state: host.hard_state,
                wal_last: host.wal.last(),
                wal_term_starts: host.wal.term_starts(),
                seed: seed.wrapping_add(g as u64),
            };
            let raft = RaftGroup::new(GroupId(g as u64), cfg.clone(), restored)
                .expect("restore from own WAL is valid");
            host.raft = Some(raft);
            host.ack_seen = LogIndex(0);
            host.ack_before_input = LogIndex(0);
        }
    }

    /// Crash: all memory is lost. `power_loss` also drops unfsynced WAL.
    pub fn crash(&mut self, power_loss: bool) {
        self.up = false;
        for host in &mut self.groups {
            host.raft = None;
            if power_loss {
                let keep = host.wal.fsynced;
                host.wal.entries.truncate(keep);
            }
        }
    }
}
