//! `PartitionLog::replace_segments`: the compaction swap under an open
//! log, with readers reading and the writer appending while it happens.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use super::support::{append_batches, pos, small_config};
use crate::batch::Batches;
use crate::fault::{self, Point};
use crate::rewrite::SegmentRewrite;
use crate::{LogReader, PartitionLog, SwapIntent, WalError};

/// Every batch from the log start to `end`, read as a consumer does.
fn read_to(reader: &LogReader, end: i64) -> Vec<u8> {
    let mut out = Vec::new();
    let mut at = reader.log_start_offset();
    while at < end {
        let r = reader.read(at, 1 << 20).unwrap();
        let mut next = at;
        for b in Batches::new(&r.bytes) {
            let (h, range) = b.unwrap();
            if h.base_offset >= end {
                break;
            }
            out.extend_from_slice(&r.bytes[range]);
            next = h.next_offset();
        }
        assert!(next > at, "a read at {at} made no progress");
        at = next;
    }
    out
}

/// Rewrites the sealed segments `[0, n)` of the open log into one cleaned
/// segment, keeping every batch (so the bytes served must not change).
fn rewrite_first(log: &PartitionLog, n: usize) -> SwapIntent {
    let segs = log.reader().segments();
    let group = &segs[..n];
    let end = group[n - 1].next_offset;
    let mut w = SegmentRewrite::create(log.dir(), group[0].base_offset, 256).unwrap();
    let mut stream = log.reader().entries_from(1);
    while let Some(e) = stream.next_stored() {
        let e = e.unwrap();
        if e.first_offset >= end {
            break;
        }
        w.push_entry(e.pos, e.first_offset, e.next_offset, &e.batches)
            .unwrap();
    }
    w.finish(group.iter().map(|s| s.base_offset).collect())
        .unwrap()
}

#[test]
fn replace_segments_swaps_under_readers_and_a_writer() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = PartitionLog::open(dir.path(), small_config()).unwrap().0;
    for i in 1..=90u64 {
        append_batches(&mut log, pos(1, i), 2, 2, 1000 + i as i64, 60);
    }
    let sealed_end = log.reader().segments()[3].next_offset;
    let before = read_to(&log.reader(), sealed_end);
    let terms: Vec<_> = (1..=90).map(|i| log.term_of(i).unwrap()).collect();

    let stop = Arc::new(AtomicBool::new(false));
    let readers: Vec<_> = (0..3)
        .map(|_| {
            let reader = log.reader();
            let stop = stop.clone();
            let before = before.clone();
            std::thread::spawn(move || {
                let mut reads = 0;
                while !stop.load(Ordering::Relaxed) || reads == 0 {
                    assert_eq!(read_to(&reader, sealed_end), before);
                    let streamed: Vec<_> = reader.entries_from(1).take(30).collect();
                    assert_eq!(
                        streamed.len(),
                        30,
                        "{:?}",
                        streamed.last().map(|e| e.as_ref().map(|x| x.0))
                    );
                    for (i, e) in streamed.into_iter().enumerate() {
                        assert_eq!(e.unwrap().0.index, i as u64 + 1);
                    }
                    reads += 1;
                }
                reads
            })
        })
        .collect();
    let intent = rewrite_first(&log, 4);
    let old_bases = intent.old_bases.clone();
    log.replace_segments(&intent).unwrap();
    // The writer goes on appending into its active segment.
    for i in 91..=110u64 {
        append_batches(&mut log, pos(2, i), 2, 2, 2000 + i as i64, 60);
    }
    stop.store(true, Ordering::Relaxed);
    for r in readers {
        assert!(r.join().unwrap() > 0);
    }

    let segs = log.reader().segments();
    assert_eq!(segs[0].base_offset, old_bases[0]);
    assert!(!segs.iter().any(|s| old_bases[1..].contains(&s.base_offset)));
    assert_eq!(read_to(&log.reader(), sealed_end), before);
    let after: Vec<_> = (1..=90).map(|i| log.term_of(i).unwrap()).collect();
    assert_eq!(after, terms);
    let next = log.next_offset();
    let all = read_to(&log.reader(), next);
    log.close().unwrap();

    // The swap is durable: a reopen serves the same, with no leftovers.
    let log = PartitionLog::open(dir.path(), small_config()).unwrap().0;
    assert_eq!(log.next_offset(), next);
    assert_eq!(read_to(&log.reader(), next), all);
    let leftovers: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| n.ends_with(".cleaned") || n.ends_with(".deleted") || n == "compact-intent")
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
}

#[test]
fn replace_segments_refuses_segments_the_log_no_longer_holds() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = PartitionLog::open(dir.path(), small_config()).unwrap().0;
    for i in 1..=60u64 {
        append_batches(&mut log, pos(1, i), 2, 2, 1000 + i as i64, 60);
    }
    let intent = rewrite_first(&log, 2);
    // Retention took the first segment meanwhile.
    let second = log.reader().segments()[1].base_offset;
    log.delete_records_before(second).unwrap();
    let before = read_to(&log.reader(), log.next_offset());
    let r = log.replace_segments(&intent);
    assert!(matches!(r, Err(WalError::SwapRefused(_))), "{r:?}");
    assert_eq!(read_to(&log.reader(), log.next_offset()), before);
    let cleaned = std::fs::read_dir(dir.path())
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| n.ends_with(".cleaned"))
        .count();
    assert_eq!(cleaned, 0);
    // The log still takes appends.
    append_batches(&mut log, pos(1, 61), 1, 1, 5000, 10);
}

#[test]
fn a_replace_that_fails_before_its_intent_leaves_the_old_segments_serving() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = PartitionLog::open(dir.path(), small_config()).unwrap().0;
    for i in 1..=60u64 {
        append_batches(&mut log, pos(1, i), 2, 2, 1000 + i as i64, 60);
    }
    let next = log.next_offset();
    let before = read_to(&log.reader(), next);
    let bases: Vec<i64> = log
        .reader()
        .segments()
        .iter()
        .map(|s| s.base_offset)
        .collect();
    let intent = rewrite_first(&log, 2);
    fault::inject(dir.path(), Point::CompactSwap(1), libc::EIO, 0, 1);
    assert!(log.replace_segments(&intent).is_err());
    fault::clear(dir.path());
    let after: Vec<i64> = log
        .reader()
        .segments()
        .iter()
        .map(|s| s.base_offset)
        .collect();
    assert_eq!(after, bases);
    // The old segments were not retired for good: a fresh mapping reads.
    for s in log.shared.snapshot() {
        s.unmap();
    }
    assert_eq!(read_to(&log.reader(), next), before);
    append_batches(&mut log, pos(1, 61), 1, 1, 5000, 10);
}
