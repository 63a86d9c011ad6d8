//! The partition's Raft group (helix-raft) and its persisted vote.
//!
//! The group is restored from the WAL's last Raft position and the
//! persisted `(term, voted_for)`; a single node runs it as a one-voter group,
//! which elects itself at once and appends a no-op of its new term (that
//! entry is what lets the acknowledged index move, see DESIGN.md).

use std::path::{Path, PathBuf};

use helix_raft::{GroupId, HardState, LogIndex, NodeId, RaftConfig, RaftGroup, Restored, Term};
use helix_wal::RaftPosition;

use crate::error::{HelixError, Result};

/// The persisted vote of one group: `term voted_for` in a small file,
/// replaced atomically and fsynced before anything depends on it.
#[derive(Debug)]
pub struct HardStateFile {
    path: PathBuf,
}

impl HardStateFile {
    pub fn new(dir: &Path) -> HardStateFile {
        HardStateFile {
            path: dir.join("raft-hard-state"),
        }
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
        Ok(HardState {
            term: Term(term),
            voted_for: (voted != 0).then_some(NodeId(voted)),
        })
    }

    pub fn store(&self, hs: HardState) -> Result<()> {
        let tmp = self.path.with_extension("tmp");
        let text = format!("{} {}\n", hs.term.0, hs.voted_for.map_or(0, |n| n.0));
        std::fs::write(&tmp, text)?;
        std::fs::File::open(&tmp)?.sync_all()?;
        std::fs::rename(&tmp, &self.path)?;
        if let Some(dir) = self.path.parent() {
            std::fs::File::open(dir)?.sync_all()?;
        }
        Ok(())
    }
}

/// Builds the group of a partition from its vote and WAL end, and makes
/// this node its leader (one voter).
pub fn start_group(
    node: i32,
    group: u64,
    hard_state: HardState,
    wal_last: Option<RaftPosition>,
) -> Result<RaftGroup> {
    let node = NodeId(
        u64::try_from(node).map_err(|_| HelixError::Config("node id must be positive".into()))?,
    );
    let cfg = RaftConfig::new(node, vec![node]);
    let restored = Restored {
        hard_state,
        wal_last: wal_last.map(|p| (LogIndex(p.index), Term(p.term))),
        // A one-voter group may leave the term starts empty; a replicated
        // group will need them from the WAL's entry index.
        wal_term_starts: Vec::new(),
        seed: group ^ node.0,
    };
    let mut g = RaftGroup::new(GroupId(group), cfg, restored)?;
    g.campaign();
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
        };
        f.store(hs).expect("store");
        assert_eq!(HardStateFile::new(dir.path()).load().expect("load"), hs);
    }

    #[test]
    fn a_restarted_one_voter_group_leads_at_a_higher_term() {
        let g = start_group(
            1,
            9,
            HardState::default(),
            Some(RaftPosition { term: 3, index: 10 }),
        )
        .expect("group");
        assert_eq!(g.role(), helix_raft::Role::Leader);
        assert_eq!(g.term(), Term(4));
    }
}
