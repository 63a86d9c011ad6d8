//! Interim one-voter Raft driver (see docs/adr/0010) with the shape of
//! helix-raft's `RaftGroup` contract: `propose` → `ready()` (entries to apply,
//! acknowledged index) → host appends to its WAL → `durable_to(index)`.
//!
//! With one voter, an entry is committed as soon as it is proposed and
//! acknowledged once the host reports it durable. The term is bumped at every
//! start (an election won alone) and persisted, so leader epochs in the log
//! grow across restarts as they will with real elections.

use std::collections::VecDeque;
use std::path::Path;

use bytes::Bytes;

use crate::error::{HelixError, Result};

/// A Raft term (= Kafka leader epoch).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default)]
pub struct Term(pub u64);

/// A position in the group's Raft log.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default)]
pub struct LogIndex(pub u64);

/// A committed entry the host must apply.
#[derive(Debug)]
pub struct Entry {
    pub term: Term,
    pub index: LogIndex,
    pub data: Bytes,
}

/// What the host must do next.
#[derive(Debug, Default)]
pub struct Ready {
    /// Committed entries, in index order: apply each (append to the WAL).
    pub to_apply: Vec<Entry>,
    /// Every proposal up to here may be answered.
    pub acknowledged: LogIndex,
}

/// A Raft group with exactly one voter: this node.
#[derive(Debug)]
pub struct OneVoterGroup {
    term: Term,
    last_index: LogIndex,
    durable: LogIndex,
    unapplied: VecDeque<Entry>,
}

const TERM_FILE: &str = "raft-term";

impl OneVoterGroup {
    /// Starts the group in `dir`, winning an election at a term above every
    /// term seen before (`last_log_term` is the WAL's last epoch).
    pub fn start(dir: &Path, last_log_term: u64) -> Result<OneVoterGroup> {
        let path = dir.join(TERM_FILE);
        let stored = match std::fs::read_to_string(&path) {
            Ok(s) => s
                .trim()
                .parse::<u64>()
                .map_err(|e| HelixError::CorruptState(format!("{}: {e}", path.display())))?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => 0,
            Err(e) => return Err(e.into()),
        };
        let term = Term(stored.max(last_log_term) + 1);
        let tmp = path.with_extension("tmp");
        std::fs::write(&tmp, term.0.to_string())?;
        std::fs::File::open(&tmp)?.sync_all()?;
        std::fs::rename(&tmp, &path)?;
        Ok(OneVoterGroup {
            term,
            last_index: LogIndex(0),
            durable: LogIndex(0),
            unapplied: VecDeque::new(),
        })
    }

    pub fn term(&self) -> Term {
        self.term
    }

    /// Appends a proposal to the (in-memory) Raft log; with one voter it is
    /// committed at once.
    pub fn propose(&mut self, data: Bytes) -> LogIndex {
        self.last_index = LogIndex(self.last_index.0 + 1);
        self.unapplied.push_back(Entry {
            term: self.term,
            index: self.last_index,
            data,
        });
        self.last_index
    }

    /// The host's WAL now holds every entry up to `index` durably.
    pub fn durable_to(&mut self, index: LogIndex) {
        debug_assert!(index <= self.last_index);
        self.durable = self.durable.max(index);
    }

    pub fn ready(&mut self) -> Ready {
        Ready {
            to_apply: self.unapplied.drain(..).collect(),
            acknowledged: self.durable,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proposals_commit_at_once_and_are_acknowledged_when_durable() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut g = OneVoterGroup::start(dir.path(), 0).expect("start");
        assert_eq!(g.term(), Term(1));
        let i = g.propose(Bytes::from_static(b"x"));
        let r = g.ready();
        assert_eq!(r.to_apply.len(), 1);
        assert_eq!(r.acknowledged, LogIndex(0));
        g.durable_to(i);
        assert_eq!(g.ready().acknowledged, i);
    }

    #[test]
    fn every_restart_is_a_new_term_above_the_log() {
        let dir = tempfile::tempdir().expect("tempdir");
        assert_eq!(
            OneVoterGroup::start(dir.path(), 0).expect("start").term(),
            Term(1)
        );
        assert_eq!(
            OneVoterGroup::start(dir.path(), 0).expect("start").term(),
            Term(2)
        );
        assert_eq!(
            OneVoterGroup::start(dir.path(), 9).expect("start").term(),
            Term(10)
        );
    }
}
