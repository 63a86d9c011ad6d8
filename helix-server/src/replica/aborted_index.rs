//! The aborted-transaction index of one partition as replicated state
//! holds it (ADR 0026 "A bounded aborted index"): the recent entries in
//! memory (`tail`, at most [`TAIL_ENTRIES`] once sealed), and a short
//! description of each sealed chunk of older entries, whose entries live
//! in a file per chunk (`txn_index.rs`, Kafka's `.txnindex`). Pure data:
//! sealing, loading and repairing chunks is `txn_index.rs`'s I/O.
//!
//! The entries are a function of the log (every replica derives the same
//! ones, in marker order); where the chunk boundaries fall is local to a
//! replica and never changes an answer.

use std::collections::VecDeque;

use serde::{Deserialize, Serialize};

use super::markers::AbortedTxn;

/// Entries held in memory before they are sealed into a chunk file: the
/// in-memory part of the index never holds more once sealed (a failed
/// seal keeps them and is retried at the next abort).
pub const TAIL_ENTRIES: usize = 512;

/// One sealed chunk: entries whose markers are in
/// `first_marker..=last_marker`, in marker order, stored in the file named
/// by `first_marker`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct SealedChunk {
    pub first_marker: i64,
    pub last_marker: i64,
    /// The smallest first offset of its transactions: a fetch ending at or
    /// below it overlaps none of them.
    pub min_first: i64,
    pub count: u32,
    /// CRC-32C of the file's bytes (a file replaced by another is damaged).
    pub crc: u32,
}

impl SealedChunk {
    /// Whether a fetch of `[from, upper)` may overlap one of its entries.
    pub fn may_overlap(&self, from: i64, upper: i64) -> bool {
        self.last_marker >= from && self.min_first < upper
    }
}

/// Sealed chunks (oldest first) and the unsealed tail, in marker order.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(from = "Stored")]
pub struct AbortedIndex {
    pub sealed: Vec<SealedChunk>,
    pub tail: VecDeque<AbortedTxn>,
}

/// What a snapshot holds: this version's shape, or an older version's
/// whole list (read into the tail, sealed at the next seal).
#[derive(Deserialize)]
#[serde(untagged)]
enum Stored {
    Index {
        sealed: Vec<SealedChunk>,
        tail: VecDeque<AbortedTxn>,
    },
    Whole(VecDeque<AbortedTxn>),
}

impl From<Stored> for AbortedIndex {
    fn from(s: Stored) -> Self {
        match s {
            Stored::Index { sealed, tail } => AbortedIndex { sealed, tail },
            Stored::Whole(tail) => AbortedIndex {
                sealed: Vec::new(),
                tail,
            },
        }
    }
}

impl AbortedIndex {
    /// An index of `entries` alone, in memory (what a log restart
    /// carries).
    pub fn in_memory(entries: VecDeque<AbortedTxn>) -> AbortedIndex {
        AbortedIndex {
            sealed: Vec::new(),
            tail: entries,
        }
    }

    pub fn push(&mut self, a: AbortedTxn) {
        self.tail.push_back(a);
    }

    /// Entries held in memory (the bound the tests check).
    #[cfg(test)]
    pub fn held(&self) -> usize {
        self.tail.len()
    }

    /// Whether the tail is due to be sealed.
    pub fn full(&self) -> bool {
        self.tail.len() >= TAIL_ENTRIES
    }

    /// Whether anything lies wholly below `log_start`.
    pub fn any_below(&self, log_start: i64) -> bool {
        match self.sealed.first() {
            Some(c) => c.last_marker < log_start,
            None => self.tail.front().is_some_and(|a| a.last_offset < log_start),
        }
    }

    /// Drops what lies wholly below `log_start` (the chunk files are
    /// removed by `txn_index::remove_unlisted`).
    pub fn trim(&mut self, log_start: i64) {
        let keep = self.sealed.partition_point(|c| c.last_marker < log_start);
        self.sealed.drain(..keep);
        while self.tail.front().is_some_and(|a| a.last_offset < log_start) {
            self.tail.pop_front();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_older_snapshots_whole_list_reads_as_the_tail() {
        let old = r#"[{"producer_id":1,"first_offset":0,"last_offset":5}]"#;
        let index: AbortedIndex = serde_json::from_str(old).expect("old shape");
        assert_eq!(index.tail.len(), 1);
        assert!(index.sealed.is_empty());
        let new = serde_json::to_string(&index).expect("encode");
        let again: AbortedIndex = serde_json::from_str(&new).expect("new shape");
        assert_eq!(again, index);
    }
}
