//! Group configuration and what the host restores on start.
//!
//! Timeouts are in ticks; the host decides how long a tick is (the server
//! uses 100 ms). Keep `catch-up step < election timeout < request timeout`.

use crate::budget::MemoryBudget;
use crate::error::RaftError;
use crate::types::{HardState, LogIndex, NodeId, Term};

/// Default election timeout: 10 ticks (randomised in `[10, 20)`).
pub const DEFAULT_ELECTION_TICKS: u32 = 10;
/// Default heartbeat interval: 1 tick.
pub const DEFAULT_HEARTBEAT_TICKS: u32 = 1;
/// Default AppendEntries in flight per follower (docs/design.md: 5).
pub const DEFAULT_MAX_INFLIGHT_APPENDS: usize = 5;
/// Default byte limit of the entries in one AppendEntries: 1 MiB.
pub const DEFAULT_MAX_APPEND_BYTES: usize = 1 << 20;
/// Default in-memory log budget of one group: 64 MiB.
pub const DEFAULT_MAX_INMEM_BYTES: usize = 64 << 20;
/// How many ticks shorter a leader's lease is than the election timeout.
/// A follower honours its leader for `election_ticks` counted from when a
/// leader's message reached it; the leader counts its lease from when the
/// follower's answer reached it, which is later, and the two nodes' ticks
/// are out of phase by up to one tick. Two ticks of margin make the lease
/// end before any follower could grant a pre-vote to another candidate,
/// unless an answer took more than a tick to come back.
pub const LEASE_MARGIN_TICKS: u32 = 2;

/// Configuration of one replica of one group.
#[derive(Clone, Debug)]
pub struct RaftConfig {
    /// This replica's node.
    pub node: NodeId,
    /// Every voter of the group, this node included. One voter = single-node.
    pub voters: Vec<NodeId>,
    /// Base election timeout in ticks; the actual timeout is drawn from
    /// `[election_ticks, 2 * election_ticks)` after every reset.
    pub election_ticks: u32,
    /// A leader sends heartbeats every this many ticks. Must be below
    /// `election_ticks`.
    pub heartbeat_ticks: u32,
    /// AppendEntries in flight per follower in the replicate state.
    pub max_inflight_appends: usize,
    /// Byte limit of the entries batched into one AppendEntries (at least one
    /// entry is always sent).
    pub max_append_bytes: usize,
    /// Ask for pre-votes before raising the term.
    pub pre_vote: bool,
    /// A leader steps down when it has not heard from a majority within an
    /// election timeout; followers ignore votes while they hear a leader.
    pub check_quorum: bool,
    /// Bound on the bytes of this group's in-memory log; proposals beyond it
    /// get `ProposeError::Backpressure`.
    pub max_inmem_bytes: usize,
    /// Optional budget shared by all groups of the node: proposals are
    /// refused while it is full. `None`: only the per-group bound applies.
    pub node_budget: Option<MemoryBudget>,
}

impl RaftConfig {
    /// A configuration with the documented defaults.
    #[must_use]
    pub fn new(node: NodeId, voters: Vec<NodeId>) -> Self {
        RaftConfig {
            node,
            voters,
            election_ticks: DEFAULT_ELECTION_TICKS,
            heartbeat_ticks: DEFAULT_HEARTBEAT_TICKS,
            max_inflight_appends: DEFAULT_MAX_INFLIGHT_APPENDS,
            max_append_bytes: DEFAULT_MAX_APPEND_BYTES,
            pre_vote: true,
            check_quorum: true,
            max_inmem_bytes: DEFAULT_MAX_INMEM_BYTES,
            node_budget: None,
        }
    }

    pub(crate) fn validate(&self) -> Result<(), RaftError> {
        if !self.voters.contains(&self.node) {
            return Err(RaftError::NotAVoter(self.node));
        }
        let mut sorted = self.voters.clone();
        sorted.sort();
        sorted.dedup();
        if sorted.len() != self.voters.len() {
            return Err(RaftError::InvalidConfig("duplicate voter"));
        }
        if self.election_ticks < 2 || self.heartbeat_ticks == 0 {
            return Err(RaftError::InvalidConfig(
                "election_ticks >= 2, heartbeat_ticks >= 1",
            ));
        }
        if self.heartbeat_ticks >= self.election_ticks {
            return Err(RaftError::InvalidConfig(
                "heartbeat_ticks must be below election_ticks",
            ));
        }
        if self.max_inflight_appends == 0 || self.max_append_bytes == 0 {
            return Err(RaftError::InvalidConfig(
                "inflight and append limits must be positive",
            ));
        }
        Ok(())
    }

    /// Votes needed to win: a strict majority of the voters.
    #[must_use]
    pub fn quorum(&self) -> usize {
        self.voters.len() / 2 + 1
    }

    /// A leader holds its lease while a majority (itself included) answered
    /// within this many ticks: [`LEASE_MARGIN_TICKS`] less than the
    /// election timeout, at least one tick.
    #[must_use]
    pub fn lease_ticks(&self) -> u32 {
        self.election_ticks
            .saturating_sub(LEASE_MARGIN_TICKS)
            .max(1)
    }
}

/// What survived a restart: the persisted vote and the WAL prefix.
///
/// The in-memory tail is gone by definition. The host fsyncs the WAL before
/// building this in fsync mode, because the whole WAL is taken as durable.
#[derive(Clone, Debug, Default)]
pub struct Restored {
    pub hard_state: HardState,
    /// Index and term of the last entry in the WAL; `None` when empty.
    pub wal_last: Option<(LogIndex, Term)>,
    /// For every term present in the WAL, the first index holding it, in
    /// ascending order (a handful of pairs: one per leadership change). The
    /// group needs the term of any WAL index to check AppendEntries and to
    /// backtrack. May be left empty only for a one-voter group (then the
    /// whole WAL is taken to be of the last entry's term).
    pub wal_term_starts: Vec<(LogIndex, Term)>,
    /// Seed of the election-timeout PRNG; differ it per node and group.
    pub seed: u64,
}

impl Restored {
    /// A fresh replica: no vote, empty WAL.
    #[must_use]
    pub fn fresh(seed: u64) -> Self {
        Restored {
            seed,
            ..Restored::default()
        }
    }
}
