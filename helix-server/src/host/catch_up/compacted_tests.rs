//! Catch-up from a compacted leader (ADR 0027 §5, step 3): a leader whose
//! log was cleaned by the offline pass, and a follower that gets every
//! entry from the leader's WAL through `wal_entry`, end with the same
//! log: same next offset, same kept records at the same offsets (the same
//! bytes), same terms and offset ranges per entry, same transaction state.

use std::collections::BTreeMap;

use bytes::Bytes;
use helix_raft::{Entry, EntryKind, LogIndex, Term};
use helix_wal::batch::Batches;
use helix_wal::{LogConfig, StoredEntry};

use super::wal_entry;
use crate::compact::clean::DerivedState;
use crate::compact::clean::tests::{batch_of, contents};
use crate::compact::pass::{PassSettings, clean_closed_log};
use crate::offset::Offset;
use crate::replica::Recovered;
use crate::replica::batch::tests::transactional;
use crate::replica::entry;
use crate::replica::markers::AbortedTxn;
use crate::replica::txn_tests::{A, B, marker, open_replica_with};

/// Small segments, so that most of the log is sealed and cleanable.
fn config() -> LogConfig {
    LogConfig {
        segment_bytes: 4096,
        index_interval_bytes: 256,
        ..LogConfig::default()
    }
}

fn keyed(key: &str, value: &str, producer_id: i64) -> Bytes {
    Bytes::from(batch_of(0, &[(Some(key), Some(value))], producer_id))
}

fn produce(requests: &[Bytes]) -> Bytes {
    let each: Vec<Vec<Bytes>> = requests.iter().map(|b| vec![b.clone()]).collect();
    entry::encode_produce(each.iter().map(Vec::as_slice))
}

/// The leader's entries, by index from 1: (term, data; `None` a no-op).
/// Keys k0..k4 overwritten again and again, entries of two requests, an
/// entry whose only key is overwritten at once (emptied by the pass),
/// producer A's committed and B's aborted transaction, then a tail that
/// stays in the active segment.
fn scenario() -> Vec<(u64, Option<Bytes>)> {
    let mut out = Vec::new();
    for i in 0..160u64 {
        let term = if i < 80 { 1 } else { 2 };
        let k = format!("k{}", i % 5);
        let v = format!("v{i}");
        let data = match i {
            _ if i % 10 == 9 => None,
            20 => Some(produce(&[transactional(&keyed("ta", "a0", A), 0)])),
            21 => Some(produce(&[transactional(&keyed("tb", "b0", B), 0)])),
            22 => Some(produce(&[transactional(&keyed("ta", "a1", A), 0)])),
            25 => Some(entry::encode_marker(&marker(A, 0, true, 1))),
            26 => Some(entry::encode_marker(&marker(B, 0, false, 1))),
            30 | 31 => Some(produce(&[keyed("once", &v, -1)])),
            _ if i % 7 == 0 => Some(produce(&[keyed(&k, &v, -1), keyed("k9", &v, -1)])),
            _ => Some(produce(&[keyed(&k, &v, -1)])),
        };
        out.push((term, data));
    }
    out
}

fn raft_entry(index: u64, term: u64, data: Option<Bytes>) -> Entry {
    Entry {
        term: Term(term),
        index: LogIndex(index),
        kind: if data.is_some() {
            EntryKind::Normal
        } else {
            EntryKind::Noop
        },
        data: data.unwrap_or_default(),
    }
}

/// Every batch the replica serves, from its log start.
fn read_all(r: &Recovered) -> Vec<Bytes> {
    let reader = r.partition.reader();
    let mut out = Vec::new();
    let mut at = reader.log_start_offset();
    while at < reader.next_offset() {
        let read = reader.read(at, 1 << 20).expect("read");
        if read.bytes.is_empty() {
            break;
        }
        for b in Batches::new(&read.bytes) {
            let (h, range) = b.expect("batch");
            out.push(read.bytes.slice(range));
            at = h.next_offset();
        }
    }
    out
}

/// Every entry of the replica's WAL.
fn stored(r: &Recovered) -> Vec<StoredEntry> {
    let mut s = r.state.entries_from(LogIndex(1)).expect("open log");
    std::iter::from_fn(|| s.next_stored())
        .map(|e| e.expect("entry"))
        .collect()
}

/// The latest value per key among data records (control batches hold no
/// key a consumer sees).
fn latest(batches: &[Bytes]) -> BTreeMap<String, (i64, Option<String>)> {
    let data: Vec<Bytes> = batches
        .iter()
        .filter(|b| {
            !helix_wal::BatchHeader::parse(b)
                .expect("header")
                .is_control()
        })
        .cloned()
        .collect();
    contents(&data)
        .into_iter()
        .filter_map(|(o, k, v)| Some((k?, (o, v))))
        .collect()
}

struct Observed {
    next_offset: i64,
    batches: Vec<Bytes>,
    entries: Vec<(u64, u64, i64, i64, bool)>,
    high_watermark: Offset,
    last_stable: Offset,
    aborted: Vec<AbortedTxn>,
}

fn observe(r: &Recovered) -> Observed {
    Observed {
        next_offset: r.partition.reader().next_offset(),
        batches: read_all(r),
        entries: stored(r)
            .iter()
            .map(|e| {
                let emptied = e.batches.is_empty();
                (
                    e.pos.term,
                    e.pos.index,
                    e.first_offset,
                    e.next_offset,
                    emptied,
                )
            })
            .collect(),
        high_watermark: r.partition.high_watermark(),
        last_stable: r.partition.last_stable_offset(),
        aborted: r
            .partition
            .aborted_transactions(Offset(0), Offset(i64::MAX)),
    }
}

fn assert_same(leader: &Observed, follower: &Observed, when: &str) {
    assert_eq!(follower.next_offset, leader.next_offset, "{when}");
    assert_eq!(follower.entries, leader.entries, "{when}: terms and ranges");
    assert_eq!(
        contents(&follower.batches),
        contents(&leader.batches),
        "{when}: kept records at their offsets"
    );
    assert_eq!(follower.batches, leader.batches, "{when}: the same bytes");
    assert_eq!(
        latest(&follower.batches),
        latest(&leader.batches),
        "{when}: latest value per key"
    );
    assert_eq!(follower.high_watermark, leader.high_watermark, "{when}");
    assert_eq!(follower.last_stable, leader.last_stable, "{when}");
    // The aborted index is derived state: a replica that rebuilt it from
    // the cleaned log has no entry for an abort whose data the pass
    // removed (ADR 0027 §6), one that kept it from before the pass does.
    // Either tells a read_committed fetch the same about every batch.
    assert!(
        follower.aborted.iter().all(|a| leader.aborted.contains(a)),
        "{when}"
    );
    assert_eq!(
        with_data(&follower.aborted, &follower.batches),
        with_data(&leader.aborted, &leader.batches),
        "{when}: aborted transactions that still hold data"
    );
}

/// The aborted transactions some batch of which the log still holds.
fn with_data(aborted: &[AbortedTxn], batches: &[Bytes]) -> Vec<AbortedTxn> {
    let headers: Vec<_> = batches
        .iter()
        .map(|b| helix_wal::BatchHeader::parse(b).expect("header"))
        .filter(|h| !h.is_control())
        .collect();
    aborted
        .iter()
        .filter(|a| {
            headers.iter().any(|h| {
                h.producer_id == a.producer_id
                    && (a.first_offset..=a.last_offset).contains(&h.base_offset)
            })
        })
        .copied()
        .collect()
}

/// Builds the leader in `dir`, cleans it offline, and reopens it.
fn compacted_leader(dir: &std::path::Path) -> (Recovered, i64) {
    let mut leader = open_replica_with(dir, config());
    let entries = scenario();
    let last = entries.len() as u64;
    for (i, (term, data)) in entries.into_iter().enumerate() {
        let e = raft_entry(i as u64 + 1, term, data);
        leader.state.apply(vec![e]).expect("apply");
    }
    leader.state.acknowledged(LogIndex(last));
    let next = leader.partition.reader().next_offset();
    let aborted = leader
        .partition
        .aborted_transactions(Offset(0), Offset(i64::MAX));
    assert_eq!(aborted.len(), 1, "B's transaction aborted");
    leader.state.close();
    drop(leader);

    let settings = PassSettings {
        dedupe_buffer_bytes: 1 << 20,
        load_factor: 0.9,
        write_buffer_bytes: 64 << 10,
        delete_retention_ms: 86_400_000,
        now_ms: 1_000_000,
        horizon_passed: false,
    };
    let derived = DerivedState {
        aborted: &aborted,
        producers: None,
    };
    let out = clean_closed_log(&dir.join("wal"), &config(), next, &settings, &derived)
        .expect("clean")
        .expect("something cleaned");
    (open_replica_with(dir, config()), out.cleaned_below)
}

#[test]
fn a_follower_caught_up_from_a_compacted_leader_holds_the_same_log() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (mut leader, cleaned_below) = compacted_leader(&dir.path().join("leader"));
    let last = LogIndex(scenario().len() as u64);
    leader.state.acknowledged(last);
    let on_leader = observe(&leader);

    // What the pass left to catch up from: gaps, an emptied entry, both
    // markers below the cleaned point, and entries kept whole above it.
    let held = stored(&leader);
    let gapped = held.iter().filter(|e| {
        let covered: i64 = Batches::new(&e.batches)
            .map(|b| i64::from(b.expect("batch").0.record_count))
            .sum();
        covered < e.next_offset - e.first_offset
    });
    assert!(gapped.count() > 10, "the pass removed records");
    assert!(
        held.iter()
            .any(|e| e.batches.is_empty() && e.next_offset > e.first_offset),
        "an entry emptied by the pass"
    );
    let marker_offsets: Vec<i64> = on_leader
        .batches
        .iter()
        .map(|b| helix_wal::BatchHeader::parse(b).expect("header"))
        .filter(|h| h.is_control())
        .map(|h| h.base_offset)
        .collect();
    assert_eq!(marker_offsets.len(), 2, "both markers kept");
    assert!(marker_offsets.iter().all(|o| *o < cleaned_below));
    assert!(cleaned_below < on_leader.next_offset, "a tail left as is");

    // The follower, empty, is sent every entry from the leader's WAL.
    let mut follower = open_replica_with(&dir.path().join("follower"), config());
    let mut kinds = BTreeMap::new();
    let mut chunk = Vec::new();
    for e in held {
        let entry = wal_entry(e, None).expect("entry");
        let kind = match entry.kind {
            EntryKind::Noop => "no-op",
            EntryKind::Normal => match entry::decode(entry.data.clone()).expect("decode") {
                entry::PartitionEntry::Stored { .. } => "stored",
                entry::PartitionEntry::Marker(_) => "marker",
                _ => "other",
            },
        };
        *kinds.entry(kind).or_insert(0) += 1;
        // Applied in runs, as Raft hands committed entries over.
        chunk.push(entry);
        if chunk.len() == 7 {
            follower
                .state
                .apply(std::mem::take(&mut chunk))
                .expect("apply");
        }
    }
    follower.state.apply(chunk).expect("apply");
    assert!(kinds.get("stored").is_some_and(|n| *n > 10), "{kinds:?}");
    assert!(kinds.get("other").is_some_and(|n| *n > 10), "{kinds:?}");
    follower.state.acknowledged(last);
    assert_same(&on_leader, &observe(&follower), "caught up");

    // Both restart: each rebuilds its state from its own log (the
    // follower's gaps lie below its cleaner checkpoint too).
    for r in [&mut leader, &mut follower] {
        r.state.close();
    }
    drop((leader, follower));
    let mut leader = open_replica_with(&dir.path().join("leader"), config());
    let mut follower = open_replica_with(&dir.path().join("follower"), config());
    leader.state.acknowledged(last);
    follower.state.acknowledged(last);
    assert_same(&observe(&leader), &observe(&follower), "after a restart");
    assert_eq!(observe(&follower).batches, on_leader.batches);
}

#[test]
fn a_stored_entry_that_does_not_continue_the_log_is_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut r = open_replica_with(dir.path(), config());
    let first = produce(&[keyed("k", "v", -1)]);
    r.state
        .apply(vec![raft_entry(1, 1, Some(first))])
        .expect("apply");
    let mut b = batch_of(0, &[(Some("k"), Some("w"))], -1);
    helix_wal::patch_batch_header(&mut b, 5, 1).expect("patch");
    let before = observe(&r);
    for (what, data) in [
        ("starts past the log's end", entry::encode_stored(3, 9, &b)),
        ("batch outside its range", entry::encode_stored(1, 4, &b)),
        ("cut batch", entry::encode_stored(1, 9, &b[..b.len() - 3])),
    ] {
        let e = raft_entry(2, 1, Some(data));
        assert!(r.state.apply(vec![e]).is_err(), "{what}");
        let after = observe(&r);
        assert_eq!(after.next_offset, before.next_offset, "{what}");
        assert_eq!(after.entries, before.entries, "{what}");
    }
    let good = entry::encode_stored(1, 9, &b);
    r.state
        .apply(vec![raft_entry(2, 1, Some(good))])
        .expect("apply");
    assert_eq!(r.partition.reader().next_offset(), 9);
}
