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

#[test]
fn a_cleaned_segment_with_gaps_is_served_below_the_cleaner_checkpoint_only() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = PartitionLog::open(dir.path(), small_config()).unwrap().0;
    for i in 1..=40u64 {
        append_batches(&mut log, pos(1 + i / 20, i), 2, 2, 1000 + i as i64, 60);
    }
    let terms: Vec<_> = (1..=40).map(|i| log.term_of(i).unwrap()).collect();
    let before = read_all(&log);
    let entries: Vec<(RaftPosition, bytes::Bytes)> =
        log.entries_from(1).map(|e| e.unwrap()).collect();
    log.close().unwrap();
    let segs = bases(dir.path());
    let (b0, b1) = (segs[0], segs[1]);

    // Keep the second batch of every entry of the first segment, and
    // nothing of its last entry: gaps inside entries and a trailing gap.
    let in_b0: Vec<_> = entries
        .iter()
        .filter(|(_, b)| Batches::new(b).next().unwrap().unwrap().0.base_offset < b1)
        .collect();
    let mut w = SegmentRewrite::create(dir.path(), b0, 256).unwrap();
    let mut kept = Vec::new();
    let mut trailing_gap = 0;
    for (n, (p, bytes)) in in_b0.iter().enumerate() {
        let hs: Vec<_> = Batches::new(bytes).map(|b| b.unwrap()).collect();
        let (first, next) = (hs[0].0.base_offset, hs[1].0.next_offset());
        if n + 1 == in_b0.len() {
            w.push_entry(*p, first, next, &[]).unwrap();
            trailing_gap = first;
        } else {
            let second = &bytes[hs[1].1.clone()];
            w.push_entry(*p, first, next, second).unwrap();
            kept.extend_from_slice(second);
        }
    }
    commit_swap(dir.path(), &w.finish(vec![b0]).unwrap()).unwrap();
    // Without the cleaner checkpoint the gaps read as damage: refused,
    // never served.
    let log = PartitionLog::open(dir.path(), small_config()).unwrap().0;
    let r = log.reader().read(0, 1 << 20);
    assert!(matches!(r, Err(crate::WalError::Corrupt { .. })), "{r:?}");
    drop(log);
    // What the later segments served before, unchanged.
    let at_b1 = Batches::new(&before)
        .map(|b| b.unwrap())
        .find(|(h, _)| h.base_offset >= b1)
        .unwrap()
        .1
        .start;
    let rest = &before[at_b1..];

    crate::meta::write_cleaner_checkpoint(dir.path(), b1).unwrap();
    let log = PartitionLog::open(dir.path(), small_config()).unwrap().0;
    let mut expected = kept.clone();
    expected.extend_from_slice(rest);
    assert_eq!(read_all(&log), expected);
    // A read in a gap gets the next batch; in the trailing gap, the next
    // segment's first batch.
    let r = log.reader().read(b0, 1).unwrap();
    assert_eq!(r.first_offset, b0 + 2);
    let r = log.reader().read(trailing_gap, 1).unwrap();
    assert_eq!(r.first_offset, b1);
    // Raft positions are untouched; the emptied entry streams as empty.
    let after: Vec<_> = (1..=40).map(|i| log.term_of(i).unwrap()).collect();
    assert_eq!(after, terms);
    let streamed: Vec<_> = log.entries_from(1).map(|e| e.unwrap()).collect();
    assert_eq!(streamed.len(), 40);
    assert!(streamed[in_b0.len() - 1].1.is_empty());
    // The stored view still tells the emptied entry's offsets.
    let mut stream = log.entries_from(in_b0.len() as u64);
    let emptied = stream.next_stored().unwrap().unwrap();
    assert_eq!(
        (emptied.first_offset, emptied.next_offset),
        (trailing_gap, b1)
    );
    assert!(emptied.batches.is_empty());

    // A base offset that rots but stays in order is no gap: the entry's
    // header checksum catches it, and nothing from there on is served.
    drop(log);
    let first_len = crate::batch::BatchHeader::parse(&kept).unwrap().total_len();
    let second = crate::batch::BatchHeader::parse(&kept[first_len..]).unwrap();
    let path = dir.path().join(format!("{b0:020}.log"));
    let mut raw = std::fs::read(&path).unwrap();
    raw[first_len..first_len + 8].copy_from_slice(&(second.base_offset - 1).to_be_bytes());
    std::fs::write(&path, raw).unwrap();
    let log = PartitionLog::open(dir.path(), small_config()).unwrap().0;
    assert_eq!(log.reader().read(b0, 1).unwrap().first_offset, b0 + 2);
    let r = log.reader().read(second.base_offset, 1);
    assert!(
        matches!(&r, Err(crate::WalError::Corrupt { position, .. }) if *position == first_len as u64),
        "{r:?}"
    );
}
