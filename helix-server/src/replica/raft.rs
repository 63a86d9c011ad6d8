//! A replica's Raft group (helix-raft) and its persisted vote.
//!
//! The group is restored from the persisted `(term, voted_for)`, the WAL's
//! last Raft position and the first index of every term in the WAL, so a
//! restarted replica votes and checks appends against its whole WAL at
//! once. A one-voter group (a single node) elects itself immediately and
//! appends a no-op of its new term (the entry that lets the acknowledged
//! index move, see docs/design.md).

use std::path::{Path, PathBuf};

use helix_raft::{
    GroupId, HardState, LogIndex, MemoryBudget, NodeId, RaftConfig, RaftGroup, Restored, Term,
};
use helix_wal::PartitionLog;

use crate::error::{HelixError, Result};

/// The persisted vote of one group: `term voted_for` in a small file, with
/// a third word `learner` while the replica may not vote (it lost its log,
/// see [`HardState::learner`]), replaced atomically and fsynced before
/// anything depends on it.
#[derive(Debug)]
pub struct HardStateFile {
    path: PathBuf,
    /// The learner flag last stored, to say once when it clears.
    learner: std::sync::atomic::AtomicBool,
}

const LEARNER: &str = "learner";

impl HardStateFile {
    pub fn new(dir: &Path) -> HardStateFile {
        HardStateFile {
            path: dir.join("raft-hard-state"),
            learner: std::sync::atomic::AtomicBool::new(false),
        }
    }

    /// Whether a vote was ever stored: a replica without one has never
    /// taken part in its group.
    pub fn exists(&self) -> bool {
        self.path.exists()
    }

    pub fn load(&self) -> Result<HardState> {
        let text = match std::fs::read_to_string(&self.path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(HardState::default()),
            Err(e) => return Err(e.into()),
        };
        let bad = || HelixError::CorruptState(format!("{}: {text:?}", self.path.display()));
        let mut parts = text.split_whitespace();
        let term: u64 = parts.next().and_then(|t| t.parse().ok()).ok_or_else(bad)?;
        let voted: u64 = parts.next().and_then(|t| t.parse().ok()).ok_or_else(bad)?;
        let learner = match parts.next() {
            None => false,
            Some(LEARNER) => true,
            Some(_) => return Err(bad()),
        };
        self.learner
            .store(learner, std::sync::atomic::Ordering::Relaxed);
        Ok(HardState {
            term: Term(term),
            voted_for: (voted != 0).then_some(NodeId(voted)),
            learner,
        })
    }

    /// Writes the new vote to a temporary file and flushes it (its bytes
    /// only), then renames it over the old one; the rename is durable once
    /// the directory is flushed.
    fn stage(&self, hs: HardState) -> Result<()> {
        use std::io::Write;
        let tmp = self.path.with_extension("tmp");
        let learner = if hs.learner { " learner" } else { "" };
        let text = format!(
            "{} {}{learner}\n",
            hs.term.0,
            hs.voted_for.map_or(0, |n| n.0)
        );
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(text.as_bytes())?;
        f.sync_data()?;
        std::fs::rename(&tmp, &self.path)?;
        let was = self
            .learner
            .swap(hs.learner, std::sync::atomic::Ordering::Relaxed);
        if was && !hs.learner {
            tracing::info!(
                dir = %self.path.parent().unwrap_or(Path::new(".")).display(),
                term = hs.term.0,
                "replica restored from the leader past what it had lost: it votes again"
            );
        }
        Ok(())
    }

    /// Stores every vote, durable when this returns: each file written,
    /// flushed and renamed, then each directory flushed once. Only these
    /// small files are flushed: a `syncfs` here also wrote back every log
    /// byte the node had not flushed yet (hundreds of MB under load with
    /// `replication-only`), which held the shard, and every group on it,
    /// for a second or more at each election or leadership hand-over.
    pub fn store_all<'a>(
        votes: impl IntoIterator<Item = (&'a HardStateFile, HardState)>,
    ) -> Result<()> {
        let mut dirs: Vec<PathBuf> = Vec::new();
        for (file, hs) in votes {
            file.stage(hs)?;
            let dir = file.path.parent().unwrap_or(Path::new(".")).to_path_buf();
            if !dirs.contains(&dir) {
                dirs.push(dir);
            }
        }
        for dir in dirs {
            std::fs::File::open(&dir)?.sync_all()?;
        }
        Ok(())
    }

    pub fn store(&self, hs: HardState) -> Result<()> {
        HardStateFile::store_all([(self, hs)])
    }
}

/// The node-wide Raft settings every group of this node is built with.
#[derive(Debug, Clone)]
pub struct RaftSettings {
    pub election_ticks: u32,
    pub heartbeat_ticks: u32,
    pub max_inflight_appends: usize,
    pub max_append_bytes: usize,
    /// Bound of one group's in-memory log.
    pub max_inmem_bytes: usize,
    /// Shared by every group of the node.
    pub node_budget: Option<MemoryBudget>,
}

impl Default for RaftSettings {
    fn default() -> Self {
        let d = RaftConfig::new(NodeId(1), vec![NodeId(1)]);
        RaftSettings {
            election_ticks: d.election_ticks,
            heartbeat_ticks: d.heartbeat_ticks,
            max_inflight_appends: d.max_inflight_appends,
            max_append_bytes: d.max_append_bytes,
            max_inmem_bytes: d.max_inmem_bytes,
            node_budget: None,
        }
    }
}

/// Who a replica is: its node, its group and the group's voters.
#[derive(Debug, Clone)]
pub struct GroupSpec {
    pub node: NodeId,
    pub group: GroupId,
    pub voters: Vec<NodeId>,
    pub raft: RaftSettings,
}

/// Builds a replica's group from its persisted vote and its WAL (last
/// position and the first index of every term in it). A one-voter group
/// campaigns at once: it is leader immediately, at a new term whose no-op
/// entry lets the acknowledged index move (docs/design.md).
pub fn restore_group(
    spec: &GroupSpec,
    hard_state: HardState,
    log: &PartitionLog,
) -> Result<RaftGroup> {
    let mut cfg = RaftConfig::new(spec.node, spec.voters.clone());
    cfg.election_ticks = spec.raft.election_ticks;
    cfg.heartbeat_ticks = spec.raft.heartbeat_ticks;
    cfg.max_inflight_appends = spec.raft.max_inflight_appends;
    cfg.max_append_bytes = spec.raft.max_append_bytes;
    cfg.max_inmem_bytes = spec.raft.max_inmem_bytes;
    cfg.node_budget = spec.raft.node_budget.clone();
    let wal_last = log.last_position();
    let wal_term_starts = if wal_last.is_some() {
        log.term_starts()?
            .into_iter()
            .map(|p| (LogIndex(p.index), Term(p.term)))
            .collect()
    } else {
        Vec::new()
    };
    let restored = Restored {
        hard_state,
        wal_last: wal_last.map(|p| (LogIndex(p.index), Term(p.term))),
        wal_term_starts,
        seed: spec.group.0 ^ spec.node.0.rotate_left(32),
    };
    let mut g = RaftGroup::new(spec.group, cfg, restored)?;
    if spec.voters == [spec.node] {
        g.campaign();
    }
    Ok(g)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_vote_survives_a_restart() {
        let dir = tempfile::tempdir().expect("tempdir");
        let f = HardStateFile::new(dir.path());
        assert_eq!(f.load().expect("empty"), HardState::default());
        let hs = HardState {
            term: Term(4),
            voted_for: Some(NodeId(1)),
            learner: false,
        };
        f.store(hs).expect("store");
        assert_eq!(HardStateFile::new(dir.path()).load().expect("load"), hs);
        let learner = HardState {
            learner: true,
            ..hs
        };
        f.store(learner).expect("store");
        assert_eq!(
            std::fs::read_to_string(dir.path().join("raft-hard-state")).expect("read"),
            "4 1 learner\n"
        );
        assert_eq!(
            HardStateFile::new(dir.path()).load().expect("load"),
            learner
        );
        std::fs::write(dir.path().join("raft-hard-state"), "4 1 maybe\n").expect("write");
        assert!(HardStateFile::new(dir.path()).load().is_err());
    }

    #[test]
    fn a_restarted_one_voter_group_leads_at_a_higher_term() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (mut log, _) =
            PartitionLog::open(dir.path(), helix_wal::LogConfig::default()).expect("open");
        for index in 1..=10 {
            let term = if index < 5 { 1 } else { 3 };
            log.append(helix_wal::RaftPosition { term, index }, &[])
                .expect("append");
        }
        let spec = GroupSpec {
            node: NodeId(1),
            group: GroupId(9),
            voters: vec![NodeId(1)],
            raft: RaftSettings::default(),
        };
        let g = restore_group(&spec, HardState::default(), &log).expect("group");
        assert_eq!(g.role(), helix_raft::Role::Leader);
        assert_eq!(g.term(), Term(4));
        // A replica of a three-voter group restores the term of every WAL
        // index and waits for an election.
        let spec = GroupSpec {
            voters: vec![NodeId(1), NodeId(2), NodeId(3)],
            ..spec
        };
        let g = restore_group(&spec, HardState::default(), &log).expect("group");
        assert_eq!(g.role(), helix_raft::Role::Follower);
        assert_eq!(g.term_at(LogIndex(4)), Some(Term(1)));
        assert_eq!(g.term_at(LogIndex(5)), Some(Term(3)));
    }
}
