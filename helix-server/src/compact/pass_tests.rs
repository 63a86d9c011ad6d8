use std::collections::HashMap;

use bytes::Bytes;
use helix_wal::batch::Batches;
use helix_wal::{LogConfig, PartitionLog, RaftPosition};

use super::*;
use crate::compact::clean::tests::{batch_of, contents};

const KEYS: usize = 7;

fn config() -> LogConfig {
    LogConfig {
        segment_bytes: 4096,
        index_interval_bytes: 256,
        ..LogConfig::default()
    }
}

fn settings() -> PassSettings {
    PassSettings {
        dedupe_buffer_bytes: 1 << 20,
        load_factor: 0.9,
        write_buffer_bytes: 300,
        delete_retention_ms: 86_400_000,
        now_ms: 1_000_000,
        horizon_passed: false,
    }
}

/// Everything the log serves from its start, batch by batch.
fn read_all(log: &PartitionLog) -> Vec<Bytes> {
    let reader = log.reader();
    let mut out = Vec::new();
    let mut at = reader.log_start_offset();
    while at < reader.next_offset() {
        let r = reader.read(at, 1 << 20).unwrap();
        for b in Batches::new(&r.bytes) {
            let (h, range) = b.unwrap();
            out.push(r.bytes.slice(range));
            at = h.next_offset();
        }
    }
    out
}

fn dir_bytes(dir: &std::path::Path) -> u64 {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().metadata().unwrap().len())
        .sum()
}

#[test]
fn a_pass_keeps_the_latest_value_per_key_at_its_offset_and_frees_disk() {
    let dir = tempfile::tempdir().unwrap();
    let (mut log, _) = PartitionLog::open(dir.path(), config()).unwrap();
    // 300 entries of one batch: key i % 7, value "v{i}"; every 10th an
    // empty entry (a Raft no-op) to check entries without batches.
    let mut index = 0;
    for i in 0..300i64 {
        index += 1;
        let pos = RaftPosition { term: 1, index };
        if i % 10 == 9 {
            log.append(pos, &[]).unwrap();
            continue;
        }
        let key = format!("k{}", i % KEYS as i64);
        let value = format!("v{i}");
        let b = batch_of(log.next_offset(), &[(Some(&key), Some(&value))], -1);
        log.append(pos, &b).unwrap();
    }
    let before = contents(&read_all(&log));
    let next = log.next_offset();
    let terms: Vec<_> = (1..=index).map(|i| log.term_of(i).unwrap()).collect();
    log.close().unwrap();
    let disk_before = dir_bytes(dir.path());

    let out = clean_closed_log(
        dir.path(),
        &config(),
        next,
        &settings(),
        &DerivedState::default(),
    )
    .unwrap()
    .expect("something to clean");
    assert!(out.segments_replaced > 1);
    assert!(out.bytes_after < out.bytes_before);

    let (log, _) = PartitionLog::open(dir.path(), config()).unwrap();
    let after = contents(&read_all(&log));
    let below = out.cleaned_below;
    // Below the cleaned point: exactly the latest record of each key
    // written below it, at its original offset.
    let mut latest: HashMap<String, (i64, Option<String>)> = HashMap::new();
    for (o, k, v) in before.iter().filter(|r| r.0 < below) {
        latest.insert(k.clone().unwrap(), (*o, v.clone()));
    }
    let mut expected: Vec<_> = latest
        .into_iter()
        .map(|(k, (o, v))| (o, Some(k), v))
        .collect();
    expected.sort();
    expected.extend(before.iter().filter(|r| r.0 >= below).cloned());
    assert_eq!(after, expected);
    assert_eq!(log.next_offset(), next);
    let after_terms: Vec<_> = (1..=index).map(|i| log.term_of(i).unwrap()).collect();
    assert_eq!(after_terms, terms);
    drop(log);
    assert!(dir_bytes(dir.path()) < disk_before);

    // A second pass finds nothing new to clean.
    let again = clean_closed_log(
        dir.path(),
        &config(),
        next,
        &settings(),
        &DerivedState::default(),
    )
    .unwrap();
    assert!(again.is_none(), "{again:?}");
}

/// Appends one single-record batch per (key, value) at the log's end.
fn write(log: &mut PartitionLog, index: &mut u64, kvs: &[(&str, Option<&str>)]) {
    for (k, v) in kvs {
        *index += 1;
        let b = batch_of(log.next_offset(), &[(Some(k), *v)], -1);
        log.append(
            RaftPosition {
                term: 1,
                index: *index,
            },
            &b,
        )
        .unwrap();
    }
}

/// One pass over the closed log in `dir` at `now_ms`, every offset cleanable.
fn pass_at(dir: &std::path::Path, now_ms: i64, horizon_passed: bool) -> Option<PassOutcome> {
    let s = PassSettings {
        now_ms,
        horizon_passed,
        ..settings()
    };
    clean_closed_log(dir, &config(), i64::MAX, &s, &DerivedState::default()).unwrap()
}

#[test]
fn a_tombstone_outlives_the_pass_that_kept_it_and_goes_after_its_horizon() {
    let dir = tempfile::tempdir().unwrap();
    let (mut log, _) = PartitionLog::open(dir.path(), config()).unwrap();
    let mut index = 0;
    let filler: Vec<String> = (0..120).map(|i| format!("f{i}")).collect();
    write(
        &mut log,
        &mut index,
        &[("gone", Some("g0")), ("gone", None)],
    );
    for f in &filler {
        write(&mut log, &mut index, &[(f, Some("x"))]);
    }
    let next = log.next_offset();
    log.close().unwrap();
    let run = |now_ms: i64| pass_at(dir.path(), now_ms, false);
    let tombstone_at = |dir: &std::path::Path| {
        let (log, _) = PartitionLog::open(dir, config()).unwrap();
        contents(&read_all(&log))
            .into_iter()
            .find(|r| r.1.as_deref() == Some("gone"))
    };
    assert!(run(1_000_000).is_some());
    // The value went, the tombstone stays at its offset (horizon set).
    assert_eq!(
        tombstone_at(dir.path()),
        Some((1, Some("gone".into()), None))
    );

    // More writes make the log dirty again; a pass before the horizon
    // keeps the tombstone, one after it removes it.
    let (mut log, _) = PartitionLog::open(dir.path(), config()).unwrap();
    for f in &filler {
        write(&mut log, &mut index, &[(f, Some("y"))]);
    }
    assert!(log.next_offset() > next);
    log.close().unwrap();
    let horizon = 1_000_000 + settings().delete_retention_ms;
    assert!(run(horizon - 1).is_some());
    assert!(tombstone_at(dir.path()).is_some());
    let (mut log, _) = PartitionLog::open(dir.path(), config()).unwrap();
    for f in &filler {
        write(&mut log, &mut index, &[(f, Some("z"))]);
    }
    log.close().unwrap();
    assert!(run(horizon).is_some());
    assert_eq!(tombstone_at(dir.path()), None);
}

/// Kafka's `latestDeleteHorizon` (KIP-534): the pass that keeps a
/// tombstone reports its horizon; once it has passed, a pass with nothing
/// dirty (no new writes) still rewrites the cleaned segments when asked
/// (`horizon_passed`), and the tombstone goes. Without it such a
/// tombstone stayed until the next write made the log dirty.
#[test]
fn a_passed_horizon_cleans_a_log_with_nothing_dirty() {
    let dir = tempfile::tempdir().unwrap();
    let (mut log, _) = PartitionLog::open(dir.path(), config()).unwrap();
    let mut index = 0;
    write(
        &mut log,
        &mut index,
        &[("gone", Some("g0")), ("gone", None)],
    );
    for i in 0..120 {
        write(&mut log, &mut index, &[(&format!("f{i}"), Some("x"))]);
    }
    log.close().unwrap();
    let run = |now_ms: i64, horizon_passed: bool| pass_at(dir.path(), now_ms, horizon_passed);
    let first = run(1_000_000, false).expect("the first pass cleans");
    let horizon = 1_000_000 + settings().delete_retention_ms;
    assert_eq!(first.stats.latest_delete_horizon_ms, Some(horizon));
    // Nothing written since: an ordinary pass finds nothing to do.
    assert!(run(horizon, false).is_none());
    let again = run(horizon, true).expect("the horizon pass rewrites");
    assert_eq!(again.stats.latest_delete_horizon_ms, None);
    let (log, _) = PartitionLog::open(dir.path(), config()).unwrap();
    assert!(
        contents(&read_all(&log))
            .iter()
            .all(|r| r.1.as_deref() != Some("gone")),
        "the tombstone outlived its horizon"
    );
}
