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
use std::path::Path;

use proptest::prelude::*;

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

struct Harness {
    dir: tempfile::TempDir,
    config: LogConfig,
    log: Option<PartitionLog>,
    model: Model,
}

impl Harness {
    fn new(fsync: bool) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let config = LogConfig {
            segment_bytes: 2048,
            index_interval_bytes: 200,
            checkpoint_interval_bytes: 1500,
            durability: if fsync {
                Durability::Fsync
            } else {
                Durability::ReplicationOnly
            },
            sync_group: fsync.then(SyncGroup::new),
            ..LogConfig::default()
        };
        let (log, rec) = PartitionLog::open(dir.path(), config.clone()).unwrap();
        assert_eq!(rec.next_offset, 0);
        Harness {
            dir,
            config,
            log: Some(log),
            model: Model::default(),
        }
    }

    fn log(&mut self) -> &mut PartitionLog {
        self.log.as_mut().expect("log open")
    }

    fn reopen(&mut self) -> crate::Recovery {
        let (log, rec) = PartitionLog::open(self.dir.path(), self.config.clone()).unwrap();
        self.log = Some(log);
        rec
    }

    fn first_held_index(&self) -> Option<u64> {
        self.model.entries.first().map(|e| e.pos.index)
    }

    fn apply(&mut self, op: &Op) {
        match op.clone() {
            Op::Append {
                batches,
                records,
                len,
                new_term,
                ts,
            } => {
                let last = self
                    .model
                    .last()
                    .unwrap_or(RaftPosition { term: 1, index: 0 });
                let p = pos(last.term + u64::from(new_term), last.index + 1);
                let mut off = self.model.next_offset();
                let first_offset = off;
                let mut bs = Vec::new();
                let mut bytes = Vec::new();
                for k in 0..batches {
                    let b = batch(
                        off,
                        i32::from(records),
                        i64::from(ts) + i64::from(k),
                        usize::from(len),
                    );
                    bytes.extend_from_slice(&b);
                    let next = off + i64::from(records);
                    bs.push(MBatch {
                        base: off,
                        next,
                        max_ts: i64::from(ts) + i64::from(k) + i64::from(records) - 1,
                        bytes: b,
                    });
                    off = next;
                }
                let info = self.log().append(p, &bytes).unwrap();
                assert_eq!((info.first_offset, info.next_offset), (first_offset, off));
                self.model.entries.push(MEntry {
                    pos: p,
                    first_offset,
                    batches: bs,
                });
            }
            Op::Roll => self.log().roll().unwrap(),
            Op::Read(a, m) => self.check_read(a, usize::from(m)),
            Op::Reopen => {
                self.log.take().unwrap().close().unwrap();
                let rec = self.reopen();
                assert_eq!(rec.truncated_tail, None);
                assert_eq!(rec.scanned_bytes, 0, "clean close: nothing to re-verify");
            }
            Op::Sync => {
                let last = self.model.last();
                assert_eq!(self.log().sync().unwrap(), last);
            }
            Op::Crash(damage) => self.crash(damage),
            Op::Truncate(k) => {
                let Some(first) = self.first_held_index() else {
                    return;
                };
                let last = self.model.last().map_or(0, |l| l.index);
                let index = first - 1 + pick(k, last - first + 2);
                self.log().truncate_after(index).unwrap();
                self.model.truncate_after(index);
            }
            Op::TruncateCrash {
                keep,
                step,
                tear_intent,
            } => {
                let Some(first) = self.first_held_index() else {
                    return;
                };
                let last = self.model.last().map_or(0, |l| l.index);
                let index = first - 1 + pick(keep, last - first + 1);
                if index >= last {
                    return;
                }
                let dir = self.dir.path().to_path_buf();
                fault::inject(&dir, Point::Truncate(step), 5, 0, 1);
                let r = self.log().truncate_after(index);
                fault::clear(&dir);
                assert!(r.is_err(), "the injected crash stops the truncation");
                self.log.take().unwrap().crash();
                let old = tear_intent && step == 1;
                if old {
                    // The intent never became whole: the old end must remain.
                    let path = dir.join(meta::TRUNCATE_INTENT);
                    let mut raw = fs::read(&path).unwrap();
                    raw[6] ^= 0x20;
                    fs::write(&path, raw).unwrap();
                }
                let rec = self.reopen();
                assert_eq!(rec.finished_truncation, !old);
                if !old {
                    self.model.truncate_after(index);
                }
            }
            Op::DeleteBefore(k) => {
                let start = self.model.log_start;
                let next = self.model.next_offset();
                let offset = start + pick(k, (next - start + 1) as u64) as i64;
                self.log().delete_records_before(offset).unwrap();
                self.model.log_start = self.model.log_start.max(offset);
                let held = self
                    .log()
                    .shared
                    .snapshot()
                    .iter()
                    .find_map(|s| s.entries())
                    .map(|e| e.0);
                let ls = self.model.log_start;
                let dropped: Vec<_> = match held {
                    Some(first) => self
                        .model
                        .entries
                        .iter()
                        .filter(|e| e.pos.index < first)
                        .cloned()
                        .collect(),
                    None => Vec::new(),
                };
                for e in &dropped {
                    let end = e.batches.last().map_or(e.first_offset, |b| b.next);
                    assert!(
                        end <= ls,
                        "a deleted segment held offset {end} ≥ log start {ls}"
                    );
                }
                self.model.entries.drain(..dropped.len());
            }
        }
    }

    /// Crash (no flush, no final checkpoint), damage the tail, reopen.
    fn crash(&mut self, damage: Damage) {
        let log = self.log.take().unwrap();
        let active = log.shared.snapshot().last().cloned().unwrap();
        let base = active.base_offset;
        let (first_index, count) = active.entries().unwrap_or((u64::MAX, 0));
        log.crash();
        let path = log_path(self.dir.path(), base);
        let len = fs::metadata(&path).unwrap().len();
        // Positions of the active segment's entries, from the model.
        let mut at = 0u64;
        let spans: Vec<(u64, u64, u64)> = self
            .model
            .entries
            .iter()
            .filter(|e| {
                count > 0 && e.pos.index >= first_index && e.pos.index < first_index + count
            })
            .map(|e| {
                let s = (e.pos.index, at, at + e.len() as u64);
                at += e.len() as u64;
                s
            })
            .collect();
        assert_eq!(
            at, len,
            "model and segment agree on the active segment's size"
        );
        let cut_at = match damage {
            Damage::None => None,
            Damage::CutTail(f) => {
                let k = pick(f, len + 1);
                let file = fs::OpenOptions::new().write(true).open(&path).unwrap();
                file.set_len(k).unwrap();
                Some(k)
            }
            Damage::FlipTail(f, bit) => {
                let trusted = Checkpoint::read(self.dir.path())
                    .unwrap()
                    .filter(|cp| cp.segment_base == base)
                    .map_or(0, |cp| cp.position);
                if len <= trusted {
                    None
                } else {
                    let b = trusted + pick(f, len - trusted);
                    let mut raw = fs::read(&path).unwrap();
                    raw[b as usize] ^= 1 << bit;
                    fs::write(&path, raw).unwrap();
                    Some(b)
                }
            }
        };
        let rec = self.reopen();
        match cut_at {
            None => assert_eq!(rec.truncated_tail, None),
            Some(k) => {
                // Keep the longest prefix of the segment's entries that ends by k.
                let keep_upto = spans
                    .iter()
                    .take_while(|(_, _, end)| *end <= k)
                    .last()
                    .map(|s| s.0);
                let first_cut = spans.iter().find(|(_, _, end)| *end > k).map(|s| s.0);
                if let Some(cut_index) = first_cut {
                    let _ = keep_upto;
                    self.model.truncate_after(cut_index - 1);
                    let t = rec.truncated_tail.expect("a damaged tail is reported");
                    assert_eq!(t.from_offset, self.model.next_offset());
                } else {
                    assert_eq!(rec.truncated_tail.map(|t| t.bytes).unwrap_or(0), 0);
                }
            }
        }
        assert_eq!(rec.next_offset, self.model.next_offset());
        assert_eq!(rec.last_position, self.model.last());
    }

    fn check_read(&mut self, a: u16, max: usize) {
        let model = self.model.clone();
        let next = model.next_offset();
        if next == model.log_start {
            return;
        }
        let offset = model.log_start + pick(a, (next - model.log_start) as u64) as i64;
        let reader = self.log().reader();
        let result = reader.read(offset, max);
        let start = model.batches().position(|b| b.next > offset).unwrap();
        let expected: Vec<&MBatch> = model.batches().skip(start).collect();
        if let Some((_, from, to)) = model.corrupt
            && expected[0].base >= from
            && expected[0].base < to
        {
            assert!(
                matches!(result, Err(WalError::Corrupt { .. })),
                "{result:?}"
            );
            return;
        }
        let r = result.unwrap();
        assert_eq!(r.first_offset, expected[0].base);
        let mut at = 0;
        let mut n = 0;
        for b in &expected {
            if at == r.bytes.len() {
                break;
            }
            assert_eq!(
                &r.bytes[at..at + b.bytes.len()],
                &b.bytes[..],
                "batch at {}",
                b.base
            );
            at += b.bytes.len();
            n += 1;
        }
        assert_eq!(at, r.bytes.len(), "read is batch aligned");
        assert!(
            n == 1 || at <= max,
            "more than max_bytes only for a single batch"
        );
        assert_eq!(r.next_offset, expected[n - 1].next);
    }

    /// Full comparison of the log with the model.
    fn check(&mut self) {
        let model = self.model.clone();
        let log = self.log.as_ref().unwrap();
        assert_eq!(log.next_offset(), model.next_offset());
        assert_eq!(log.last_position(), model.last());
        assert_eq!(log.log_start_offset(), model.log_start);
        let reader = log.reader();
        assert_eq!(reader.next_offset(), model.next_offset());
        // Every offset reads back the batch that holds it.
        for b in model.batches().filter(|b| b.next > model.log_start) {
            let corrupt = model
                .corrupt
                .is_some_and(|(_, f, t)| b.base >= f && b.base < t);
            for o in b.base.max(model.log_start)..b.next {
                match reader.read(o, 1) {
                    Ok(r) if !corrupt => assert_eq!(&r.bytes[..], &b.bytes[..], "offset {o}"),
                    Err(WalError::Corrupt { .. }) if corrupt => {}
                    other => panic!("offset {o} (corrupt: {corrupt}): {other:?}"),
                }
            }
        }
        // Raft positions.
        for e in &model.entries {
            assert_eq!(log.term_of(e.pos.index).unwrap(), Some(e.pos.term));
        }
        let last = model.last().map_or(0, |l| l.index);
        assert_eq!(log.term_of(last + 1).unwrap(), None);
        let max_term = model.last().map_or(1, |l| l.term);
        for t in 0..=max_term + 1 {
            let expect = model
                .entries
                .iter()
                .rposition(|e| e.pos.term <= t)
                .map(|i| {
                    let end = model
                        .entries
                        .get(i + 1)
                        .map_or(model.next_offset(), |n| n.first_offset);
                    (model.entries[i].pos.term, end)
                });
            let got = log
                .end_offset_for_term(t)
                .unwrap()
                .map(|e| (e.term, e.end_offset));
            assert_eq!(got, expect, "end_offset_for_term({t})");
        }
        // Time lookups agree with a linear scan (batch granularity).
        for ts in [0i64, 1, 250, 500, 999, 1003, 2000] {
            let hit = model
                .batches()
                .find(|b| b.next > model.log_start && b.max_ts >= ts);
            let got = reader.offset_for_timestamp(ts);
            // The damaged segment is scanned when it holds offsets at or
            // after the log start and its newest timestamp (kept in its
            // intact time index) reaches `ts`; the lookup is then refused
            // unless a batch before the damage answers.
            let answered_before_damage =
                hit.is_some_and(|b| b.base < model.corrupt.map_or(i64::MAX, |c| c.1));
            let refused = model.corrupt.is_some_and(|(seg_base, _, to)| {
                !answered_before_damage
                    && to > model.log_start
                    && model
                        .batches()
                        .filter(|b| b.base >= seg_base && b.base < to)
                        .any(|b| b.max_ts >= ts)
            });
            if refused {
                assert!(
                    matches!(got, Err(WalError::Corrupt { .. })),
                    "ts {ts}: {got:?}"
                );
                continue;
            }
            let expect = hit.map(|b| b.base.max(model.log_start));
            assert_eq!(got.unwrap(), expect, "ts {ts}");
        }
        // Catch-up stream.
        if model.corrupt.is_none()
            && let Some(first) = model.entries.first()
        {
            let got: Vec<_> = log
                .entries_from(first.pos.index)
                .map(|r| r.unwrap())
                .collect();
            assert_eq!(got.len(), model.entries.len());
            for (g, e) in got.iter().zip(&model.entries) {
                assert_eq!(g.0, e.pos);
                let bytes: Vec<u8> = e.batches.iter().flat_map(|b| b.bytes.clone()).collect();
                assert_eq!(&g.1[..], &bytes[..]);
            }
        }
    }

    /// Flips a bit in a sealed segment (before the tail) after a clean close;
    /// the batch holding it, and everything after it in that segment, must be
    /// refused.
    fn flip_sealed(&mut self, frac: u16, bit: u8) {
        let log = self.log.take().unwrap();
        let segments = log.shared.snapshot();
        log.close().unwrap();
        let sealed: Vec<_> = segments[..segments.len() - 1]
            .iter()
            .filter(|s| s.len() > 0 && s.next_offset() > self.model.log_start)
            .collect();
        if sealed.is_empty() {
            self.reopen();
            return;
        }
        let seg = sealed[pick(frac, sealed.len() as u64) as usize];
        let path = log_path(self.dir.path(), seg.base_offset);
        let mut raw = fs::read(&path).unwrap();
        let b = pick(frac.rotate_left(7), raw.len() as u64) as usize;
        // Find the batch holding byte b.
        let mut at = 0usize;
        let mut hit = None;
        for bt in self
            .model
            .batches()
            .filter(|x| x.base >= seg.base_offset && x.next <= seg.next_offset())
        {
            if b < at + bt.bytes.len() {
                hit = Some((bt.base, b - at));
                break;
            }
            at += bt.bytes.len();
        }
        let Some((base, within)) = hit else {
            self.reopen();
            return;
        };
        if (12..16).contains(&within) {
            // partitionLeaderEpoch: covered only at tail recovery (see ADR 0001).
            self.reopen();
            return;
        }
        raw[b] ^= 1 << bit;
        eprintln!(
            "flip seg {} byte {b} (batch {base} +{within}) bit {bit}",
            seg.base_offset
        );
        fs::write(&path, raw).unwrap();
        self.model.corrupt = Some((seg.base_offset, base, seg.next_offset()));
        let rec = self.reopen();
        assert_eq!(
            rec.truncated_tail, None,
            "corruption before the tail is not cut"
        );
    }
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

#[test]
fn model_smoke_sequence() {
    use Op::*;
    let ops = vec![
        Append {
            batches: 2,
            records: 3,
            len: 500,
            new_term: false,
            ts: 10,
        },
        Append {
            batches: 0,
            records: 1,
            len: 0,
            new_term: true,
            ts: 0,
        },
        Append {
            batches: 3,
            records: 1,
            len: 600,
            new_term: false,
            ts: 20,
        },
        Crash(Damage::CutTail(40000)),
        Append {
            batches: 1,
            records: 2,
            len: 100,
            new_term: true,
            ts: 30,
        },
        TruncateCrash {
            keep: 100,
            step: 2,
            tear_intent: false,
        },
        Append {
            batches: 2,
            records: 2,
            len: 700,
            new_term: false,
            ts: 40,
        },
        DeleteBefore(30000),
        Reopen,
    ];
    run(&ops, false, Some((1, 3)));
}

#[allow(dead_code)]
fn _assert_path(_: &Path) {}

#[test]
fn model_regression_truncate_to_empty_then_roll_and_crash() {
    use Op::*;
    let ops = vec![
        Append {
            batches: 0,
            records: 1,
            len: 0,
            new_term: false,
            ts: 0,
        },
        Append {
            batches: 0,
            records: 1,
            len: 0,
            new_term: false,
            ts: 0,
        },
        Append {
            batches: 1,
            records: 2,
            len: 0,
            new_term: false,
            ts: 0,
        },
        Append {
            batches: 1,
            records: 1,
            len: 5,
            new_term: false,
            ts: 0,
        },
        Append {
            batches: 0,
            records: 1,
            len: 0,
            new_term: false,
            ts: 0,
        },
        DeleteBefore(16384),
        Truncate(55),
        Append {
            batches: 2,
            records: 3,
            len: 260,
            new_term: false,
            ts: 96,
        },
        Roll,
        Crash(Damage::CutTail(22572)),
    ];
    run(&ops, true, None);
}

#[test]
fn model_regression_cut_tail_after_retention_then_append() {
    use Op::*;
    let ops = vec![
        Append {
            batches: 2,
            records: 1,
            len: 530,
            new_term: false,
            ts: 0,
        },
        Append {
            batches: 1,
            records: 1,
            len: 223,
            new_term: false,
            ts: 0,
        },
        Append {
            batches: 1,
            records: 1,
            len: 522,
            new_term: false,
            ts: 0,
        },
        DeleteBefore(39322),
        Crash(Damage::CutTail(0)),
        Append {
            batches: 0,
            records: 1,
            len: 0,
            new_term: false,
            ts: 0,
        },
    ];
    run(&ops, false, None);
}

#[test]
fn model_regression_flip_after_truncate_crashes() {
    use Op::*;
    let a = |batches, len, ts| Append {
        batches,
        records: 1,
        len,
        new_term: false,
        ts,
    };
    let ops = vec![
        a(2, 257, 0),
        a(0, 0, 0),
        TruncateCrash {
            keep: 32768,
            step: 1,
            tear_intent: false,
        },
        a(0, 0, 0),
        a(0, 0, 0),
        a(0, 0, 0),
        TruncateCrash {
            keep: 16384,
            step: 1,
            tear_intent: false,
        },
        a(1, 18, 250),
        a(1, 342, 0),
        a(1, 128, 0),
        a(2, 86, 0),
        a(2, 163, 0),
    ];
    run(&ops, false, Some((29899, 0)));
}

#[test]
fn model_regression_time_lookup_after_sealed_flip() {
    use Op::*;
    let a = |batches, len, ts| Append {
        batches,
        records: 1,
        len,
        new_term: false,
        ts,
    };
    let ops = vec![
        a(1, 493, 250),
        a(2, 364, 0),
        DeleteBefore(16384),
        Crash(Damage::FlipTail(25860, 0)),
        a(2, 45, 0),
        a(2, 239, 0),
        a(0, 0, 0),
        a(0, 0, 0),
        TruncateCrash {
            keep: 39322,
            step: 1,
            tear_intent: false,
        },
        a(2, 281, 0),
    ];
    run(&ops, false, Some((62674, 1)));
}

#[test]
fn model_regression_flip_in_header_of_sealed_batch() {
    use Op::*;
    let a = |batches, records, len| Append {
        batches,
        records,
        len,
        new_term: false,
        ts: 0,
    };
    let ops = vec![
        a(1, 3, 0),
        a(0, 1, 0),
        a(0, 1, 0),
        a(0, 1, 0),
        Truncate(13108),
        a(1, 1, 0),
        a(3, 1, 334),
        a(2, 1, 310),
        a(2, 1, 360),
        a(1, 1, 404),
        a(3, 1, 467),
        a(0, 1, 0),
        a(0, 1, 0),
        a(3, 1, 94),
    ];
    run(&ops, false, Some((37896, 0)));
}
