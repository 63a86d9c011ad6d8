//! The swap of a prepared pass on a replica's writer: the latest value per
//! key served after it, and the cleaner checkpoint where the swaps done
//! put it when one of them is refused.

use std::collections::HashMap;

use bytes::Bytes;
use helix_raft::LogIndex;
use helix_wal::LogConfig;

use crate::compact::clean::DerivedState;
use crate::compact::clean::tests::{batch_of, contents};
use crate::compact::pass::{self, LogShape, PassSettings, Prepared};
use crate::replica::Recovered;
use crate::replica::entry;
use crate::replica::txn_tests::{apply, open_replica_with};

const KEYS: usize = 5;

fn small() -> LogConfig {
    LogConfig {
        segment_bytes: 2048,
        index_interval_bytes: 256,
        ..LogConfig::default()
    }
}

/// A replica that applied and acknowledged 150 single-record entries over
/// `KEYS` keys.
fn replica(dir: &std::path::Path) -> Recovered {
    let mut r = open_replica_with(dir, small());
    for i in 0..150u64 {
        let key = format!("k{}", i as usize % KEYS);
        let value = format!("v{i}");
        let b = Bytes::from(batch_of(0, &[(Some(&key), Some(&value))], -1));
        apply(
            &mut r,
            i + 1,
            entry::encode_produce([vec![b]].iter().map(Vec::as_slice)),
        );
    }
    r.state.acknowledged(LogIndex(150));
    r
}

fn prepare(r: &Recovered) -> Prepared {
    let settings = PassSettings {
        dedupe_buffer_bytes: 1 << 20,
        load_factor: 0.9,
        write_buffer_bytes: 64 << 10,
        delete_retention_ms: 86_400_000,
        now_ms: 1_000_000,
        horizon_passed: false,
    };
    let shape = LogShape {
        segment_bytes: 2048,
        index_interval_bytes: 256,
    };
    pass::prepare(
        &r.partition.reader(),
        shape,
        r.partition.high_watermark().0,
        &settings,
        &DerivedState::default(),
        &mut |_| {},
    )
    .expect("prepare")
    .expect("something to clean")
}

fn everything(r: &Recovered) -> Vec<(i64, Option<String>, Option<String>)> {
    let reader = r.partition.reader();
    let mut out = Vec::new();
    let mut at = reader.log_start_offset();
    while at < reader.next_offset() {
        let read = reader.read(at, 1 << 20).expect("read");
        let mut batches = Vec::new();
        for b in helix_wal::batch::Batches::new(&read.bytes) {
            let (h, range) = b.expect("batch");
            batches.push(read.bytes.slice(range));
            at = h.next_offset();
        }
        out.extend(contents(&batches));
    }
    out
}

fn once_per_key_below(records: &[(i64, Option<String>, Option<String>)], below: i64) -> bool {
    let mut seen: HashMap<&str, usize> = HashMap::new();
    for (_, k, _) in records.iter().filter(|r| r.0 < below) {
        *seen.entry(k.as_deref().unwrap_or("")).or_default() += 1;
    }
    seen.values().all(|n| *n == 1)
}

#[test]
fn a_swapped_pass_serves_the_latest_value_per_key_and_moves_the_checkpoint() {
    let dir = tempfile::tempdir().unwrap();
    let mut r = replica(dir.path());
    let before = everything(&r);
    let prepared = prepare(&r);
    let below = prepared.outcome.cleaned_below;
    let swapped = r
        .state
        .swap_cleaned(below, &prepared.intents)
        .expect("swap");
    assert_eq!(swapped, prepared.intents.len());
    let after = everything(&r);
    assert!(once_per_key_below(&after, below), "{after:?}");
    // The latest value of each key written below the cleaned point, at its
    // offset; everything above untouched.
    let mut latest: HashMap<String, (i64, Option<String>)> = HashMap::new();
    for (o, k, v) in before.iter().filter(|x| x.0 < below) {
        latest.insert(k.clone().unwrap(), (*o, v.clone()));
    }
    for (o, k, v) in after.iter().filter(|x| x.0 < below) {
        assert_eq!(latest.get(k.as_deref().unwrap()), Some(&(*o, v.clone())));
    }
    let above = |x: &Vec<(i64, Option<String>, Option<String>)>| {
        x.iter()
            .filter(|r| r.0 >= below)
            .cloned()
            .collect::<Vec<_>>()
    };
    assert_eq!(above(&after), above(&before));
    let wal = r.partition.reader().dir().to_path_buf();
    assert_eq!(
        helix_wal::read_cleaner_checkpoint(&wal).unwrap(),
        Some(below)
    );
}

#[test]
fn a_refused_swap_leaves_the_checkpoint_at_what_was_swapped() {
    let dir = tempfile::tempdir().unwrap();
    let mut r = replica(dir.path());
    let before = everything(&r);
    let mut prepared = prepare(&r);
    assert!(prepared.intents.len() >= 2, "{:?}", prepared.intents);
    // The second group no longer matches the log.
    prepared.intents[1].old_bases.push(i64::MAX);
    let result = r
        .state
        .swap_cleaned(prepared.outcome.cleaned_below, &prepared.intents);
    assert!(result.is_err(), "{result:?}");
    let wal = r.partition.reader().dir().to_path_buf();
    let first_end = r
        .partition
        .reader()
        .segments()
        .iter()
        .find(|s| s.base_offset == prepared.intents[0].new_base)
        .map(|s| s.next_offset);
    assert_eq!(helix_wal::read_cleaner_checkpoint(&wal).unwrap(), first_end);
    let leftovers = std::fs::read_dir(&wal)
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| n.ends_with(".cleaned"))
        .count();
    assert_eq!(leftovers, 0);
    // The first group is cleaned, the rest serves as it was.
    let after = everything(&r);
    let end = first_end.unwrap();
    assert!(once_per_key_below(&after, end));
    let from = |x: &Vec<(i64, Option<String>, Option<String>)>| {
        x.iter().filter(|r| r.0 >= end).cloned().collect::<Vec<_>>()
    };
    assert_eq!(from(&after), from(&before));
}
