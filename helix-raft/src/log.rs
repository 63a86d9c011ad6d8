//! A replica's Raft log: its WAL prefix followed by an in-memory tail.
//!
//! ```text
//!   1 ........ durable ... applied ..... commit ........ last
//!   |<------- WAL (host) ------->|
//!                 |<------------ memory: mem_start..=last ------->|
//! ```
//!
//! Invariants (checked by the simulator after every step):
//! - `durable <= applied <= commit <= last` and `mem_start <= applied + 1`:
//!   an entry leaves memory only once it has been handed to the host;
//! - the term of every index `1..=last` is known (`TermRuns`), whether the
//!   entry itself is in memory or only in the WAL;
//! - entries are never changed in place: a conflict truncates the suffix
//!   (into the WAL when it reaches below `applied`).

use std::collections::VecDeque;

use crate::budget::MemoryBudget;
use crate::types::{Entry, LogIndex, Term};

/// The term of every index of the log as runs `(first index, term)`: one per
/// leadership change, so a few dozen bytes for a whole WAL.
#[derive(Clone, Debug, Default)]
pub struct TermRuns {
    runs: Vec<(LogIndex, Term)>,
}

impl TermRuns {
    /// Term at `index` of a log whose last index is `last`.
    #[must_use]
    pub fn term_at(&self, index: LogIndex, last: LogIndex) -> Option<Term> {
        if index.0 == 0 {
            return Some(Term(0));
        }
        if index > last {
            return None;
        }
        let pos = self.runs.partition_point(|(start, _)| *start <= index);
        if pos == 0 {
            return None;
        }
        Some(self.runs[pos - 1].1)
    }

    fn push(&mut self, index: LogIndex, term: Term) {
        if self.runs.last().is_none_or(|(_, t)| *t != term) {
            self.runs.push((index, term));
        }
    }

    fn truncate_after(&mut self, index: LogIndex) {
        while self.runs.last().is_some_and(|(start, _)| *start > index) {
            self.runs.pop();
        }
    }

    /// The highest index `<= at` (of a log ending at `last`) whose term is
    /// `<= term`; 0 if none. This is fast backtracking's probe point.
    #[must_use]
    pub fn last_index_with_term_at_most(
        &self,
        term: Term,
        at: LogIndex,
        last: LogIndex,
    ) -> LogIndex {
        let at = at.min(last);
        for (i, (start, t)) in self.runs.iter().enumerate().rev() {
            if *start > at {
                continue;
            }
            if *t <= term {
                let run_end = self
                    .runs
                    .get(i + 1)
                    .map_or(last, |(next_start, _)| next_start.prev());
                return run_end.min(at);
            }
        }
        LogIndex(0)
    }
}

/// Why `try_append` refused an append: the follower's hint for the leader.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AppendReject {
    pub hint_index: LogIndex,
    pub hint_term: Term,
}

/// What `try_append` did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AppendOutcome {
    /// Highest index now known to match the sender's log.
    pub last_new: LogIndex,
    /// Set when a conflict reached applied entries: the host must truncate
    /// its WAL after this index.
    pub wal_truncated_after: Option<LogIndex>,
}

/// The log of one replica of one group.
#[derive(Debug)]
pub struct RaftLog {
    terms: TermRuns,
    last: LogIndex,
    mem: VecDeque<Entry>,
    /// Index of `mem[0]`; `last + 1` when memory is empty.
    mem_start: LogIndex,
    mem_bytes: usize,
    commit: LogIndex,
    /// Handed to the host to append to its WAL.
    applied: LogIndex,
    /// Reported by the host: end of its WAL (or fsynced WAL).
    durable: LogIndex,
    /// Node-wide budget this log's bytes count toward, if any.
    budget: Option<MemoryBudget>,
}

impl Drop for RaftLog {
    fn drop(&mut self) {
        if let Some(b) = &self.budget {
            b.sub(self.mem_bytes);
        }
    }
}

impl RaftLog {
    /// A log restored from the WAL: `wal_last` and the term of every WAL index.
    #[must_use]
    pub fn restored(wal_last: LogIndex, term_starts: &[(LogIndex, Term)]) -> Self {
        let mut terms = TermRuns::default();
        for (start, term) in term_starts {
            if *start <= wal_last {
                terms.push(*start, *term);
            }
        }
        RaftLog {
            terms,
            last: wal_last,
            mem: VecDeque::new(),
            mem_start: wal_last.next(),
            mem_bytes: 0,
            commit: wal_last,
            applied: wal_last,
            durable: wal_last,
            budget: None,
        }
    }

    /// Counts this log's memory toward a node-wide budget.
    pub fn set_budget(&mut self, budget: Option<MemoryBudget>) {
        if let Some(b) = &self.budget {
            b.sub(self.mem_bytes);
        }
        if let Some(b) = &budget {
            b.add(self.mem_bytes);
        }
        self.budget = budget;
    }

    fn add_bytes(&mut self, n: usize) {
        self.mem_bytes += n;
        if let Some(b) = &self.budget {
            b.add(n);
        }
    }

    fn sub_bytes(&mut self, n: usize) {
        self.mem_bytes -= n;
        if let Some(b) = &self.budget {
            b.sub(n);
        }
    }

    #[must_use]
    pub fn last_index(&self) -> LogIndex {
        self.last
    }

    #[must_use]
    pub fn last_term(&self) -> Term {
        self.term_at(self.last).unwrap_or(Term(0))
    }

    #[must_use]
    pub fn term_at(&self, index: LogIndex) -> Option<Term> {
        self.terms.term_at(index, self.last)
    }

    #[must_use]
    pub fn terms(&self) -> &TermRuns {
        &self.terms
    }

    #[must_use]
    pub fn commit(&self) -> LogIndex {
        self.commit
    }

    #[must_use]
    pub fn applied(&self) -> LogIndex {
        self.applied
    }

    #[must_use]
    pub fn durable(&self) -> LogIndex {
        self.durable
    }

    #[must_use]
    pub fn mem_start(&self) -> LogIndex {
        self.mem_start
    }

    #[must_use]
    pub fn mem_bytes(&self) -> usize {
        self.mem_bytes
    }

    /// Is `(term, index)` at least as up to date as this log (§5.4.1)?
    #[must_use]
    pub fn is_up_to_date(&self, last_index: LogIndex, last_term: Term) -> bool {
        (last_term, last_index) >= (self.last_term(), self.last)
    }

    /// Appends one entry at `last + 1` (the leader's own proposals).
    pub fn append(&mut self, entry: Entry) {
        debug_assert_eq!(entry.index, self.last.next());
        self.terms.push(entry.index, entry.term);
        self.last = entry.index;
        self.add_bytes(entry.cost());
        self.mem.push_back(entry);
        self.assert_positions();
    }

    /// The order of the log's positions (module doc), asserted after every
    /// change to one of them. Debug builds only: the simulator and every
    /// test run them; a release build pays nothing on the hot path.
    fn assert_positions(&self) {
        debug_assert!(
            self.durable <= self.applied && self.applied <= self.commit && self.commit <= self.last,
            "log positions out of order: durable {:?} applied {:?} commit {:?} last {:?}",
            self.durable,
            self.applied,
            self.commit,
            self.last
        );
        debug_assert!(
            self.mem_start <= self.applied.next(),
            "an entry left memory before it was applied: mem_start {:?} applied {:?}",
            self.mem_start,
            self.applied
        );
    }

    /// The follower side of AppendEntries: check `prev`, skip entries already
    /// present, truncate at the first conflict and append the rest.
    pub fn try_append(
        &mut self,
        prev_index: LogIndex,
        prev_term: Term,
        entries: &[Entry],
    ) -> Result<AppendOutcome, AppendReject> {
        if self.term_at(prev_index) != Some(prev_term) {
            let at = prev_index.min(self.last);
            let hint_index = self
                .terms
                .last_index_with_term_at_most(prev_term, at, self.last);
            let hint_term = self.term_at(hint_index).unwrap_or(Term(0));
            return Err(AppendReject {
                hint_index,
                hint_term,
            });
        }
        let mut wal_truncated_after = None;
        let mut expected = prev_index.next();
        for entry in entries {
            if entry.index != expected {
                // Not contiguous: take what was consistent so far.
                break;
            }
            expected = expected.next();
            match self.term_at(entry.index) {
                Some(term) if term == entry.term => continue,
                Some(_) => {
                    let keep = entry.index.prev();
                    if keep < self.applied {
                        wal_truncated_after = Some(keep);
                    }
                    self.truncate_after(keep);
                    self.append(entry.clone());
                }
                None => self.append(entry.clone()),
            }
        }
        Ok(AppendOutcome {
            last_new: expected.prev(),
            wal_truncated_after,
        })
    }

    /// Drops every entry above `keep` (memory and, if below `applied`, the
    /// positions that describe the WAL).
    fn truncate_after(&mut self, keep: LogIndex) {
        while self.mem.back().is_some_and(|e| e.index > keep) {
            if let Some(e) = self.mem.pop_back() {
                self.sub_bytes(e.cost());
            }
        }
        self.terms.truncate_after(keep);
        self.last = keep;
        self.commit = self.commit.min(keep);
        self.applied = self.applied.min(keep);
        self.durable = self.durable.min(keep);
        if self.mem_start > keep.next() {
            self.mem_start = keep.next();
        }
        self.assert_positions();
    }

    /// Starts the log over at `first`, the leader's first held entry, for a
    /// follower that needs entries the leader deleted below its log start
    /// (Raft's InstallSnapshot, where the snapshot is only "the log starts
    /// here"). Safe because only committed entries are dropped: the
    /// leader's WAL holds applied entries only, so `first` and everything
    /// below it is committed, and whatever this log holds above its own
    /// commit is replaced by the leader's entries as on any conflict.
    ///
    /// Afterwards `first` is the only entry: committed, in memory, handed
    /// to the host by the next `take_to_apply` (the host must first empty
    /// its WAL: `first` starts it, at the leader's offsets); the term of
    /// every index below it is unknown, so appends resume at `prev =
    /// first`. Refused (`false`, nothing changed) when this log holds
    /// `first` already (its term at that index is `first.term`, or its
    /// commit reaches it: committed entries match the leader's): then
    /// everything up to it matches the leader's log (Log Matching), no
    /// entry is dropped, not even one this replica reported durable, and
    /// ordinary appends continue after it.
    pub fn restart_at(&mut self, first: &Entry) -> bool {
        if self.commit >= first.index || self.term_at(first.index) == Some(first.term) {
            return false;
        }
        while let Some(e) = self.mem.pop_back() {
            self.sub_bytes(e.cost());
        }
        self.terms = TermRuns::default();
        self.terms.push(first.index, first.term);
        self.last = first.index;
        self.commit = first.index;
        self.applied = first.index.prev();
        self.durable = first.index.prev();
        self.mem_start = first.index;
        self.add_bytes(first.cost());
        self.mem.push_back(first.clone());
        self.assert_positions();
        true
    }

    /// Raises the commit index (never lowers it, never past `last`).
    pub fn commit_to(&mut self, index: LogIndex) -> bool {
        let index = index.min(self.last);
        if index > self.commit {
            self.commit = index;
            self.assert_positions();
            true
        } else {
            false
        }
    }

    /// Committed entries not yet handed to the host; marks them applied.
    pub fn take_to_apply(&mut self) -> Vec<Entry> {
        if self.commit <= self.applied {
            return Vec::new();
        }
        let from = (self.applied.0 + 1 - self.mem_start.0) as usize;
        let to = (self.commit.0 + 1 - self.mem_start.0) as usize;
        let out: Vec<Entry> = self.mem.range(from..to).cloned().collect();
        self.applied = self.commit;
        self.assert_positions();
        out
    }

    #[must_use]
    pub fn has_to_apply(&self) -> bool {
        self.commit > self.applied
    }

    /// The host reports its WAL end (or fsynced end). Clamped to `applied`:
    /// the host cannot have written what it was not given.
    pub fn durable_to(&mut self, index: LogIndex) -> bool {
        let index = index.min(self.applied);
        if index > self.durable {
            self.durable = index;
            self.assert_positions();
            true
        } else {
            false
        }
    }

    /// Entries `from..` up to `max_bytes` (at least one) if `from` is still in
    /// memory; `None` if it must come from the WAL.
    #[must_use]
    pub fn entries_from(&self, from: LogIndex, max_bytes: usize) -> Option<Vec<Entry>> {
        if from < self.mem_start {
            return None;
        }
        let skip = (from.0 - self.mem_start.0) as usize;
        let mut out = Vec::new();
        let mut bytes = 0;
        for e in self.mem.iter().skip(skip) {
            if !out.is_empty() && bytes + e.cost() > max_bytes {
                break;
            }
            bytes += e.cost();
            out.push(e.clone());
        }
        Some(out)
    }

    /// Releases memory of entries up to `index`, never past `applied`.
    pub fn release_to(&mut self, index: LogIndex) {
        let index = index.min(self.applied);
        while self.mem.front().is_some_and(|e| e.index <= index) {
            if let Some(e) = self.mem.pop_front() {
                self.sub_bytes(e.cost());
                self.mem_start = e.index.next();
            }
        }
        self.assert_positions();
    }

    /// Entry at `index` if it is in memory.
    #[must_use]
    pub fn entry(&self, index: LogIndex) -> Option<&Entry> {
        if index < self.mem_start || index > self.last {
            return None;
        }
        self.mem.get((index.0 - self.mem_start.0) as usize)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::EntryKind;
    use bytes::Bytes;

    fn e(index: u64, term: u64) -> Entry {
        Entry {
            term: Term(term),
            index: LogIndex(index),
            kind: EntryKind::Normal,
            data: Bytes::from_static(b"x"),
        }
    }

    #[test]
    fn term_runs_answer_every_index_and_backtrack() {
        let mut log = RaftLog::restored(LogIndex(0), &[]);
        for (i, t) in [(1, 1), (2, 1), (3, 2), (4, 2), (5, 4)] {
            log.append(e(i, t));
        }
        assert_eq!(log.term_at(LogIndex(2)), Some(Term(1)));
        assert_eq!(log.term_at(LogIndex(4)), Some(Term(2)));
        assert_eq!(log.term_at(LogIndex(6)), None);
        let runs = log.terms();
        assert_eq!(
            runs.last_index_with_term_at_most(Term(3), LogIndex(5), LogIndex(5)),
            LogIndex(4)
        );
        assert_eq!(
            runs.last_index_with_term_at_most(Term(1), LogIndex(5), LogIndex(5)),
            LogIndex(2)
        );
        assert_eq!(
            runs.last_index_with_term_at_most(Term(0), LogIndex(5), LogIndex(5)),
            LogIndex(0)
        );
    }

    #[test]
    fn conflict_below_applied_asks_for_wal_truncation() {
        let mut log = RaftLog::restored(LogIndex(0), &[]);
        for i in 1..=4 {
            log.append(e(i, 1));
        }
        log.commit_to(LogIndex(3));
        assert_eq!(log.take_to_apply().len(), 3);
        log.durable_to(LogIndex(3));
        let out = log
            .try_append(LogIndex(1), Term(1), &[e(2, 1), e(3, 2)])
            .expect("prev matches");
        assert_eq!(out.wal_truncated_after, Some(LogIndex(2)));
        assert_eq!(out.last_new, LogIndex(3));
        assert_eq!(
            (log.applied(), log.durable(), log.commit()),
            (LogIndex(2), LogIndex(2), LogIndex(2))
        );
        assert_eq!(log.term_at(LogIndex(3)), Some(Term(2)));
        assert_eq!(log.last_index(), LogIndex(3));
    }

    #[test]
    fn release_never_passes_applied() {
        let mut log = RaftLog::restored(LogIndex(0), &[]);
        for i in 1..=4 {
            log.append(e(i, 1));
        }
        log.commit_to(LogIndex(2));
        log.take_to_apply();
        log.release_to(LogIndex(4));
        assert_eq!(log.mem_start(), LogIndex(3));
        assert!(log.entries_from(LogIndex(2), 10).is_none());
        assert_eq!(log.entries_from(LogIndex(3), 1).map(|v| v.len()), Some(1));
    }

    #[test]
    fn a_restart_at_the_leaders_first_held_entry_drops_the_rest() {
        let mut log = RaftLog::restored(LogIndex(0), &[]);
        for i in 1..=4 {
            log.append(e(i, 1));
        }
        log.commit_to(LogIndex(2));
        log.take_to_apply();
        log.durable_to(LogIndex(2));
        // The leader holds nothing below index 9 (term 3).
        assert!(log.restart_at(&e(9, 3)));
        assert_eq!(
            (log.last_index(), log.commit(), log.applied(), log.durable()),
            (LogIndex(9), LogIndex(9), LogIndex(8), LogIndex(8))
        );
        assert_eq!(log.last_term(), Term(3));
        assert_eq!(log.term_at(LogIndex(4)), None, "below the start: unknown");
        assert_eq!(log.take_to_apply(), vec![e(9, 3)], "the host stores it");
        // Appends resume after it.
        let out = log
            .try_append(LogIndex(9), Term(3), &[e(10, 3)])
            .expect("prev matches");
        assert_eq!(out.last_new, LogIndex(10));
        assert!(log.try_append(LogIndex(4), Term(1), &[]).is_err());
        log.durable_to(LogIndex(9));
        assert_eq!(log.durable(), LogIndex(9));
    }

    #[test]
    fn a_restart_at_an_entry_already_held_is_refused() {
        let mut log = RaftLog::restored(LogIndex(0), &[]);
        for i in 1..=4 {
            log.append(e(i, 1));
        }
        log.commit_to(LogIndex(3));
        assert!(!log.restart_at(&e(3, 1)));
        assert_eq!((log.last_index(), log.commit()), (LogIndex(4), LogIndex(3)));
        assert!(!log.restart_at(&e(4, 1)), "it holds that entry already");
        assert_eq!(log.last_index(), LogIndex(4));
        assert!(log.restart_at(&e(4, 2)), "a conflicting tail may go");
        assert_eq!((log.last_index(), log.last_term()), (LogIndex(4), Term(2)));
    }
}
