//! Helpers shared by the crate tests.

use crate::batch::build_test_batch;
use crate::{LogConfig, PartitionLog, RaftPosition};

pub fn pos(term: u64, index: u64) -> RaftPosition {
    RaftPosition { term, index }
}

/// A batch of `records` records at `base`, with timestamps `ts..=ts+records-1`
/// and a payload of `len` bytes derived from `base`.
pub fn batch(base: i64, records: i32, ts: i64, len: usize) -> Vec<u8> {
    let payload: Vec<u8> = (0..len).map(|i| (base as usize * 31 + i) as u8).collect();
    build_test_batch(base, records, ts, ts + i64::from(records) - 1, &payload)
}

/// Appends an entry of `n` batches of `records` records each; returns its bytes.
pub fn append_batches(
    log: &mut PartitionLog,
    p: RaftPosition,
    n: usize,
    records: i32,
    ts: i64,
    len: usize,
) -> Vec<u8> {
    let mut buf = Vec::new();
    let mut off = log.next_offset();
    for _ in 0..n {
        buf.extend(batch(off, records, ts, len));
        off += i64::from(records);
    }
    log.append(p, &buf).expect("append");
    buf
}

pub fn small_config() -> LogConfig {
    LogConfig {
        segment_bytes: 4096,
        index_interval_bytes: 256,
        checkpoint_interval_bytes: 2048,
        ..LogConfig::default()
    }
}
