//! A compaction swap on a real log: two sealed segments rewritten into one
//! (every batch kept, so the bytes can be compared), with a crash at each
//! step of the swap; the reopened log serves exactly what it served before.

use std::path::Path;

use super::support::{append_batches, pos, small_config};
use crate::batch::Batches;
use crate::compaction::commit_swap;
use crate::fault::{self, Point};
use crate::rewrite::SegmentRewrite;
use crate::{PartitionLog, RaftPosition};

fn bases(dir: &Path) -> Vec<i64> {
    let mut out: Vec<i64> = std::fs::read_dir(dir)
        .unwrap()
        .filter_map(|e| {
            let name = e.ok()?.file_name().into_string().ok()?;
            name.strip_suffix(".log")?.parse().ok()
        })
        .collect();
    out.sort_unstable();
    out
}

/// Everything the log serves, batch by batch, from its start.
fn read_all(log: &PartitionLog) -> Vec<u8> {
    let reader = log.reader();
    let mut out = Vec::new();
    let mut at = reader.log_start_offset();
    while at < reader.next_offset() {
        let r = reader.read(at, 1 << 20).unwrap();
        let last = Batches::new(&r.bytes).last().unwrap().unwrap().0;
        out.extend_from_slice(&r.bytes);
        at = last.next_offset();
    }
    out
}

#[test]
fn a_crash_at_any_step_of_a_swap_leaves_a_log_that_serves_the_same() {
    for (step, skip) in [(0, 0), (1, 0), (2, 0), (3, 0), (3, 1), (4, 0), (5, 0)] {
        let dir = tempfile::tempdir().unwrap();
        let mut log = PartitionLog::open(dir.path(), small_config()).unwrap().0;
        for i in 1..=40u64 {
            append_batches(&mut log, pos(1 + i / 20, i), 2, 2, 1000 + i as i64, 60);
        }
        let before = read_all(&log);
        let terms: Vec<_> = (1..=40).map(|i| log.term_of(i).unwrap()).collect();
        let next = log.next_offset();
        let entries: Vec<(RaftPosition, bytes::Bytes)> =
            log.entries_from(1).map(|e| e.unwrap()).collect();
        log.close().unwrap();
        let segs = bases(dir.path());
        assert!(segs.len() >= 3, "{segs:?}");
        let (b0, b1, b2) = (segs[0], segs[1], segs[2]);

        let mut w = SegmentRewrite::create(dir.path(), b0, 256).unwrap();
        for (p, bytes) in &entries {
            let mut hs = Batches::new(bytes).map(|b| b.unwrap().0);
            let first = hs.next().unwrap();
            let next_offset = hs.last().unwrap_or(first).next_offset();
            if first.base_offset >= b2 {
                break;
            }
            w.push_entry(*p, first.base_offset, next_offset, bytes)
                .unwrap();
        }
        let intent = w.finish(vec![b0, b1]).unwrap();
        if step > 0 {
            fault::inject(dir.path(), Point::CompactSwap(step), libc::EIO, skip, 1);
            assert!(commit_swap(dir.path(), &intent).is_err());
            fault::clear(dir.path());
        } else {
            commit_swap(dir.path(), &intent).unwrap();
        }

        let (log, _) = PartitionLog::open(dir.path(), small_config()).unwrap();
        let merged = !bases(dir.path()).contains(&b1);
        assert_eq!(
            merged,
            step != 1,
            "step {step}/{skip}: new segment iff the intent was written"
        );
        assert_eq!(log.next_offset(), next);
        assert_eq!(read_all(&log), before, "step {step}/{skip}");
        let after: Vec<_> = (1..=40).map(|i| log.term_of(i).unwrap()).collect();
        assert_eq!(after, terms, "step {step}/{skip}");
        let leftovers: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .filter_map(|e| e.ok()?.file_name().into_string().ok())
            .filter(|n| n.ends_with(".cleaned") || n.ends_with(".deleted") || n == "compact-intent")
            .collect();
        assert!(leftovers.is_empty(), "step {step}/{skip}: {leftovers:?}");
    }
}
