//! The aborted index stays bounded in memory (ADR 0026 "A bounded aborted
//! index"): a partition with unbounded retention and a steady stream of
//! aborted transactions over many segments holds at most
//! [`TAIL_ENTRIES`] entries in memory, answers read_committed fetches over
//! old ranges with exactly the overlapping entries, and after a restart
//! finds its chunk files again, or rebuilds one from the log when it is
//! missing or damaged.

use bytes::Bytes;
use helix_raft::LogIndex;
use helix_wal::LogConfig;

use super::Recovered;
use super::aborted_index::TAIL_ENTRIES;
use super::batch::tests::{make_batch, transactional};
use super::markers::AbortedTxn;
use super::txn_tests::{apply, marker, open_replica_with};
use super::{entry, scan, txn_index};
use crate::offset::Offset;

/// Transactions written: well over two chunks' worth of aborts.
const TXNS: i64 = 1_400;
const PRODUCERS: i64 = 7;

fn config() -> LogConfig {
    LogConfig {
        segment_bytes: 16 * 1024,
        ..LogConfig::default()
    }
}

/// Transaction `i` is one batch of producer `100 + i % 7` at offset `2i`
/// and its marker at `2i + 1`; every fifth commits, the others abort.
/// Returns the aborted index every replica must derive.
fn write_transactions(r: &mut Recovered) -> Vec<AbortedTxn> {
    let mut expected = Vec::new();
    for i in 0..TXNS {
        let pid = 100 + i % PRODUCERS;
        let seq = i32::try_from(i / PRODUCERS).expect("seq");
        let batch = transactional(&make_batch(&[b"v"], pid, seq, 1_000 + i), 0);
        let index = u64::try_from(2 * i).expect("index");
        apply(
            r,
            index + 1,
            entry::encode_produce([vec![batch]].iter().map(Vec::as_slice)),
        );
        let commit = i % 5 == 0;
        apply(
            r,
            index + 2,
            entry::encode_marker(&marker(pid, 0, commit, 1)),
        );
        if !commit {
            expected.push(AbortedTxn {
                producer_id: pid,
                first_offset: 2 * i,
                last_offset: 2 * i + 1,
            });
        }
    }
    r.state
        .acknowledged(LogIndex(u64::try_from(2 * TXNS).expect("index")));
    expected
}

fn overlapping(all: &[AbortedTxn], from: i64, upper: i64) -> Vec<AbortedTxn> {
    all.iter()
        .filter(|a| a.last_offset >= from && a.first_offset < upper)
        .copied()
        .collect()
}

/// What the replica answers, held in memory, and what it publishes.
fn check(r: &Recovered, expected: &[AbortedTxn], why: &str) {
    let p = &r.partition;
    assert!(
        r.state.aborted_held() <= TAIL_ENTRIES,
        "{why}: {} held",
        r.state.aborted_held()
    );
    let published = p.published.aborted.read().expect("view").index.tail.len();
    assert!(published <= TAIL_ENTRIES, "{why}: {published} published");
    assert_eq!(
        p.aborted_transactions(Offset(0), Offset(i64::MAX)),
        expected,
        "{why}: all"
    );
    for (from, upper) in [(600, 800), (0, 3), (1_025, 1_026), (2_700, i64::MAX)] {
        assert_eq!(
            p.aborted_transactions(Offset(from), Offset(upper)),
            overlapping(expected, from, upper),
            "{why}: [{from}, {upper})"
        );
    }
}

fn chunk_files(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut files: Vec<_> = std::fs::read_dir(txn_index::dir_of(dir))
        .expect("chunk dir")
        .flatten()
        .map(|f| f.path())
        .collect();
    files.sort();
    files
}

#[test]
fn the_aborted_index_held_in_memory_stays_bounded_across_many_segments() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut r = open_replica_with(dir.path(), config());
    let expected = write_transactions(&mut r);
    assert!(expected.len() > 2 * TAIL_ENTRIES);
    assert!(
        r.partition.reader().segments().len() > 5,
        "many segments: {}",
        r.partition.reader().segments().len()
    );
    check(&r, &expected, "running");
    assert_eq!(chunk_files(dir.path()).len(), expected.len() / TAIL_ENTRIES);
    // A read_committed fetch over an old range reads its chunk.
    let stored = r
        .partition
        .read_committed(Offset(600), 1 << 20)
        .expect("read");
    assert!(!stored.is_empty());
    r.state.close();
}

#[test]
fn a_restart_finds_the_chunks_or_rebuilds_a_damaged_one_from_the_log() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut r = open_replica_with(dir.path(), config());
    let expected = write_transactions(&mut r);
    r.state.close();
    drop(r);
    let reopen = |why: &str| {
        let mut again = open_replica_with(dir.path(), config());
        check(&again, &expected, why);
        again.state.close();
    };
    reopen("reopened");
    let files = chunk_files(dir.path());
    assert!(files.len() >= 2, "{files:?}");
    std::fs::remove_file(&files[0]).expect("remove a chunk");
    reopen("a chunk file deleted");
    let mut bytes = std::fs::read(&files[1]).expect("read a chunk");
    bytes[20] ^= 0xff;
    std::fs::write(&files[1], Bytes::from(bytes)).expect("damage a chunk");
    reopen("a chunk file damaged");
    // A chunk sealed after the snapshot the restart uses is sealed again.
    scan::Snapshot::remove(dir.path());
    reopen("without the snapshot");
}
