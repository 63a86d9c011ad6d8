//! Model-based property tests. Random sequences of append, roll, read,
//! reopen, crash (with tail truncation or bit flips injected between the
//! crash and the reopen), `truncate_after` (also crashed half way), sync and
//! `delete_records_before` run against the real log and a plain in-memory
//! model. After every step the log must equal the model: the same offsets and
//! positions, every read returns exactly the bytes appended at those offsets,
//! and offset, time and entry lookups agree with a linear scan of the model.
//! A damaged tail must reopen as the longest valid prefix; a bit flipped
//! before the tail must be refused (`Corrupt`), never served.

use std::fs;

use proptest::prelude::*;

mod harness;
mod regressions;

use harness::Harness;

use super::support::{batch, pos};
use crate::fault::{self, Point};
use crate::meta::{self, Checkpoint};
use crate::segment::log_path;
use crate::{Durability, LogConfig, PartitionLog, RaftPosition, SyncGroup, WalError};

#[derive(Debug, Clone)]
struct MBatch {
    base: i64,
    next: i64,
    max_ts: i64,
    bytes: Vec<u8>,
}

#[derive(Debug, Clone)]
struct MEntry {
    pos: RaftPosition,
    first_offset: i64,
    batches: Vec<MBatch>,
}

impl MEntry {
    fn len(&self) -> usize {
        self.batches.iter().map(|b| b.bytes.len()).sum()
    }
}

#[derive(Debug, Clone, Default)]
struct Model {
    entries: Vec<MEntry>,
    log_start: i64,
    /// `(segment base, from, to)`: offsets `[from, to)` of the segment at
    /// `segment base` must be refused as corrupt.
    corrupt: Option<(i64, i64, i64)>,
    /// The next offset while no entry is held.
    empty_next: i64,
}

impl Model {
    fn next_offset(&self) -> i64 {
        self.entries.last().map_or(self.empty_next, |e| {
            e.batches.last().map_or(e.first_offset, |b| b.next)
        })
    }
    fn last(&self) -> Option<RaftPosition> {
        self.entries.last().map(|e| e.pos)
    }
    fn batches(&self) -> impl Iterator<Item = &MBatch> {
        self.entries.iter().flat_map(|e| e.batches.iter())
    }
    fn truncate_after(&mut self, index: u64) {
        if let Some(first) = self.entries.first()
            && first.pos.index > index
        {
            self.empty_next = first.first_offset;
        }
        self.entries.retain(|e| e.pos.index <= index);
        self.log_start = self.log_start.min(self.next_offset());
    }
}

#[derive(Debug, Clone)]
enum Damage {
    None,
    /// Cut the active segment's log file at this fraction of its length.
    CutTail(u16),
    /// Flip a bit at this fraction of the active segment's bytes after the
    /// recovery checkpoint.
    FlipTail(u16, u8),
}

#[derive(Debug, Clone)]
enum Op {
    Append {
        batches: u8,
        records: u8,
        len: u16,
        new_term: bool,
        ts: u16,
    },
    Roll,
    Read(u16, u16),
    Reopen,
    Sync,
    Crash(Damage),
    Truncate(u16),
    TruncateCrash {
        keep: u16,
        step: u8,
        tear_intent: bool,
    },
    DeleteBefore(u16),
}

fn op() -> impl Strategy<Value = Op> {
    let damage = prop_oneof![
        Just(Damage::None),
        any::<u16>().prop_map(Damage::CutTail),
        (any::<u16>(), 0u8..8).prop_map(|(f, b)| Damage::FlipTail(f, b)),
    ];
    prop_oneof![
        12 => (0u8..4, 1u8..4, 0u16..700, proptest::bool::weighted(0.15), 0u16..1000).prop_map(
            |(batches, records, len, new_term, ts)| Op::Append { batches, records, len, new_term, ts }
        ),
        1 => Just(Op::Roll),
        3 => (any::<u16>(), 1u16..5000).prop_map(|(a, m)| Op::Read(a, m)),
        1 => Just(Op::Reopen),
        1 => Just(Op::Sync),
        2 => damage.prop_map(Op::Crash),
        1 => any::<u16>().prop_map(Op::Truncate),
        1 => (any::<u16>(), 1u8..=4, any::<bool>())
            .prop_map(|(keep, step, tear_intent)| Op::TruncateCrash { keep, step, tear_intent }),
        1 => any::<u16>().prop_map(Op::DeleteBefore),
    ]
}

fn pick(frac: u16, n: u64) -> u64 {
    (u64::from(frac) * n) / (u64::from(u16::MAX) + 1)
}

fn run(ops: &[Op], fsync: bool, flip: Option<(u16, u8)>) {
    let mut h = Harness::new(fsync);
    for op in ops {
        h.apply(op);
        h.check();
    }
    if let Some((frac, bit)) = flip {
        h.flip_sealed(frac, bit);
        h.check();
        for a in [0u16, 9000, 30000, 65000] {
            h.check_read(a, 3000);
        }
    }
}

fn cases() -> u32 {
    std::env::var("WAL_MODEL_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(64)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(), ..ProptestConfig::default() })]

    #[test]
    fn log_matches_model(
        ops in proptest::collection::vec(op(), 1..60),
        fsync in any::<bool>(),
        flip in proptest::option::of((any::<u16>(), 0u8..8)),
    ) {
        run(&ops, fsync, flip);
    }
}
