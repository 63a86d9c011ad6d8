//! Transactions on replicas (ADR 0026 §5 item 2): replicas fed the same
//! entries (transactional batches of two producers, a commit and an abort
//! marker) store the same bytes and publish the same last stable offset
//! and aborted index; a stale marker is refused on every replica; a
//! restart without the snapshot rebuilds both from the log.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use helix_raft::{Entry, EntryKind, GroupId, LogIndex, NodeId, Term};
use helix_wal::LogConfig;

use super::batch::tests::{make_batch, transactional};
use super::markers::{AbortedTxn, Marker};
use super::producers::Proposed;
use super::raft::{GroupSpec, RaftSettings};
use super::{PartitionSettings, Recovered, entry, learner, links, recover, scan};
use crate::batcher::BatchLimits;
use crate::error::HelixError;
use crate::offset::Offset;

pub(crate) const A: i64 = 10;
pub(crate) const B: i64 = 20;

#[derive(Debug)]
struct NeverLearner;

impl learner::LearnerAtOpen for NeverLearner {
    fn learner_at_open(
        &self,
        _: &std::path::Path,
        _: bool,
        _: Option<&[u64]>,
        _: helix_wal::Durability,
        _: &[NodeId],
    ) -> Option<&'static str> {
        None
    }
}

/// A one-voter replica in `dir`, driven by hand (no shard).
pub(crate) fn open_replica(dir: &std::path::Path) -> Recovered {
    open_replica_with(dir, LogConfig::default())
}

/// [`open_replica`] with its log configured by `log`.
pub(crate) fn open_replica_with(dir: &std::path::Path, log: LogConfig) -> Recovered {
    let settings = PartitionSettings {
        spec: GroupSpec {
            node: NodeId(1),
            group: GroupId(1),
            voters: vec![NodeId(1)],
            raft: RaftSettings::default(),
        },
        batch: BatchLimits {
            linger: Duration::ZERO,
            max_bytes: 1 << 20,
            max_requests: 100,
        },
        log,
        producer_id_expiration_ms: crate::config::DEFAULT_PRODUCER_ID_EXPIRATION_MS,
        standing: Arc::new(NeverLearner),
        links: Arc::new(links::PeerLinks::new(NodeId(1))),
    };
    recover(dir, "t", 0, settings).expect("recover")
}

pub(crate) fn marker(producer_id: i64, epoch: i16, commit: bool, coordinator: i32) -> Marker {
    Marker {
        producer_id,
        producer_epoch: epoch,
        commit,
        coordinator_epoch: coordinator,
        timestamp: 1_250,
    }
}

fn txn(values: &[&[u8]], pid: i64, epoch: i16, seq: i32, ts: i64) -> Vec<Bytes> {
    vec![transactional(&make_batch(values, pid, seq, ts), epoch)]
}

fn produce(requests: &[Vec<Bytes>]) -> Bytes {
    entry::encode_produce(requests.iter().map(Vec::as_slice))
}

/// The entries at indexes 1..=7 and where they land:
/// 0-1 plain; 2-3 A's transaction, 4 B's; 5 A commits; 6 B again; 7 B
/// aborts; 8 A's next transaction (epoch 1), left open; 9 plain.
pub(crate) fn scenario() -> Vec<Bytes> {
    vec![
        produce(&[vec![make_batch(&[b"p0", b"p1"], -1, -1, 1_000)]]),
        produce(&[
            txn(&[b"a0", b"a1"], A, 0, 0, 1_100),
            txn(&[b"b0"], B, 0, 0, 1_200),
        ]),
        entry::encode_marker(&marker(A, 0, true, 1)),
        produce(&[txn(&[b"b1"], B, 0, 1, 1_300)]),
        entry::encode_marker(&marker(B, 0, false, 1)),
        produce(&[txn(&[b"a2"], A, 1, 0, 1_400)]),
        produce(&[vec![make_batch(&[b"p2"], -1, -1, 1_500)]]),
    ]
}

/// The last stable offset once entries 1..=i are acknowledged.
const LSO_AFTER: [i64; 7] = [2, 2, 4, 4, 8, 8, 8];

pub(crate) fn apply(r: &mut Recovered, index: u64, data: Bytes) {
    let e = Entry {
        term: Term(1),
        index: LogIndex(index),
        kind: EntryKind::Normal,
        data,
    };
    r.state.apply(vec![e]).expect("apply");
}

/// A replica that applied and acknowledged the whole scenario.
pub(crate) fn replica_with_scenario(dir: &std::path::Path) -> Recovered {
    let mut r = open_replica(dir);
    for (i, data) in scenario().into_iter().enumerate() {
        apply(&mut r, i as u64 + 1, data);
    }
    r.state.acknowledged(LogIndex(7));
    r
}

fn everything(r: &Recovered) -> Bytes {
    r.partition.reader().read(0, 1 << 20).expect("read").bytes
}

fn all_aborted(r: &Recovered) -> Vec<AbortedTxn> {
    r.partition
        .aborted_transactions(Offset(0), Offset(i64::MAX))
}

#[test]
fn replicas_fed_the_same_entries_agree_on_bytes_lso_and_aborted_index() {
    let dir = tempfile::tempdir().expect("tempdir");
    // One applies everything, then learns the acknowledgements; the other
    // learns each as soon as it applied it. Kafka's rule: a transaction
    // ended by a marker not yet acknowledged still holds the LSO back.
    let mut ahead = open_replica(&dir.path().join("ahead"));
    let mut step = open_replica(&dir.path().join("step"));
    for (i, data) in scenario().into_iter().enumerate() {
        apply(&mut ahead, i as u64 + 1, data.clone());
        apply(&mut step, i as u64 + 1, data);
        step.state.acknowledged(LogIndex(i as u64 + 1));
        assert_eq!(step.partition.last_stable_offset(), Offset(LSO_AFTER[i]));
    }
    for (i, lso) in LSO_AFTER.iter().enumerate() {
        ahead.state.acknowledged(LogIndex(i as u64 + 1));
        assert_eq!(
            ahead.partition.last_stable_offset(),
            Offset(*lso),
            "after {i}"
        );
    }
    assert_eq!(everything(&ahead), everything(&step), "same bytes");
    assert_eq!(ahead.partition.high_watermark(), Offset(10));
    let aborted = vec![AbortedTxn {
        producer_id: B,
        first_offset: 4,
        last_offset: 7,
    }];
    assert_eq!(all_aborted(&ahead), aborted);
    assert_eq!(all_aborted(&step), aborted);
    // The markers are Kafka's control batches at 5 (commit) and 7 (abort).
    let read = ahead.partition.read(Offset(5), 1).expect("read");
    let stored = super::markers::read_marker(&read).expect("a marker");
    assert_eq!(stored, marker(A, 0, true, 1));
    let read = ahead.partition.read(Offset(7), 1).expect("read");
    let h = helix_wal::BatchHeader::parse(&read).expect("header");
    assert!(h.is_control() && h.is_transactional());
    assert_eq!((h.base_offset, h.partition_leader_epoch), (7, 1));
}

/// A delayed marker (A's epoch 0, after A moved to epoch 1) or one from
/// an older coordinator is refused the same way on every replica: the
/// decision is a function of the log, here each replica's log rebuilt.
#[test]
fn a_stale_marker_is_refused_on_every_replica() {
    let dir = tempfile::tempdir().expect("tempdir");
    for name in ["one", "two"] {
        let r = replica_with_scenario(&dir.path().join(name));
        let reader = r.partition.reader();
        let (table, _) = scan::rebuild(&reader, reader.next_offset(), None, None).expect("scan");
        let end = reader.next_offset();
        let decide = |m: &Marker| Proposed::default().decide_marker(1, &table, end, m);
        assert!(matches!(
            decide(&marker(A, 0, false, 1)),
            Err(HelixError::InvalidProducerEpoch)
        ));
        assert!(matches!(
            decide(&marker(A, 1, false, 0)),
            Err(HelixError::TransactionCoordinatorFenced)
        ));
        assert!(decide(&marker(A, 1, false, 1)).is_ok());
        assert_eq!(table.open_txn_of(A), Some(8));
        assert_eq!(table.open_txn_of(B), None);
        // Inside its open transaction, A may not write outside it.
        let plain = make_batch(&[b"x"], A, 1, 2_000);
        let h = helix_wal::BatchHeader::parse(&plain).expect("header");
        let h = helix_wal::BatchHeader {
            producer_epoch: 1,
            ..h
        };
        assert!(matches!(table.check(&h), Err(HelixError::InvalidTxnState)));
    }
}

#[test]
fn a_restart_without_the_snapshot_rebuilds_lso_and_aborted_index_from_the_log() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut r = replica_with_scenario(dir.path());
    let (lso, aborted) = (r.partition.last_stable_offset(), all_aborted(&r));
    r.state.close();
    drop(r);
    // With the snapshot, then without it.
    for remove in [false, true] {
        if remove {
            scan::Snapshot::remove(dir.path());
        }
        let mut again = open_replica(dir.path());
        assert_eq!(
            again.partition.last_stable_offset(),
            lso,
            "removed {remove}"
        );
        assert_eq!(all_aborted(&again), aborted, "removed {remove}");
        again.state.close();
    }
    // A's open transaction still holds the LSO after the restart, and B's
    // marker arriving now would be judged against the rebuilt state.
    assert_eq!(lso, Offset(8));
}

/// A read_committed read stops below the open transaction's first offset
/// (offset < LSO, never <=); the aborted list is what overlaps it.
#[test]
fn a_read_committed_read_stops_below_the_last_stable_offset() {
    let dir = tempfile::tempdir().expect("tempdir");
    let r = replica_with_scenario(dir.path());
    let p = &r.partition;
    let last_of = |bytes: &Bytes| {
        let mut pos = 0;
        let mut next = None;
        while pos < bytes.len() {
            let h = helix_wal::BatchHeader::parse(&bytes[pos..]).expect("header");
            next = Some(h.next_offset());
            pos += h.total_len();
        }
        next
    };
    assert_eq!(
        last_of(&p.read_committed(Offset(0), 1 << 20).expect("read")),
        Some(8)
    );
    assert!(
        p.read_committed(Offset(8), 1 << 20)
            .expect("read")
            .is_empty()
    );
    assert_eq!(
        last_of(&p.read(Offset(8), 1 << 20).expect("read")),
        Some(10)
    );
    assert_eq!(p.aborted_transactions(Offset(8), Offset(10)), vec![]);
    assert_eq!(p.aborted_transactions(Offset(7), Offset(8)).len(), 1);
    assert_eq!(p.aborted_transactions(Offset(0), Offset(4)), vec![]);
}

/// Runs the one-voter group until it has nothing ready: applies, reports
/// durable, acknowledges (the shard's loop, by hand).
fn drive(r: &mut Recovered) {
    while r.group.has_ready() {
        let rd = r.group.ready();
        if let Some(last) = r.state.apply(rd.to_apply).expect("apply") {
            r.group.durable_to(last).expect("durable");
        }
        if let Some(ack) = rd.acknowledged {
            r.state.acknowledged(ack);
        }
    }
}

/// The coordinator host's call: the leader decides the marker, proposes
/// it, and answers its offset once acknowledged; a stale one is refused
/// and stores nothing.
#[tokio::test]
async fn a_marker_written_through_the_partition_answers_its_offset() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut r = open_replica(dir.path());
    drive(&mut r);
    for (m, expected) in [
        (marker(A, 0, false, 1), Ok(Offset(0))),
        (
            marker(A, 0, true, 0),
            Err(HelixError::TransactionCoordinatorFenced),
        ),
    ] {
        let p = r.partition.clone();
        let answer = tokio::spawn(async move { p.write_marker(m).await });
        let work = r.batcher.next().await.expect("work");
        assert!(r.state.work(&mut r.group, work));
        drive(&mut r);
        let got = answer.await.expect("join");
        assert_eq!(format!("{got:?}"), format!("{expected:?}"));
    }
    assert_eq!(r.partition.high_watermark(), Offset(1));
    // An abort with no open transaction is stored but ends nothing, so it
    // is not indexed (Kafka 3.9).
    assert_eq!(all_aborted(&r), vec![]);
    assert_eq!(r.partition.last_stable_offset(), Offset(1));
}

/// A new leader's log cuts B's abort marker (never acknowledged): B's
/// transaction is open again and the index forgets the abort, until the
/// marker is applied again.
#[test]
fn a_cut_marker_reopens_its_transaction() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut r = open_replica(dir.path());
    let entries = scenario();
    for (i, data) in entries.iter().enumerate() {
        apply(&mut r, i as u64 + 1, data.clone());
    }
    r.state.acknowledged(LogIndex(4));
    assert_eq!(r.partition.last_stable_offset(), Offset(4));
    assert_eq!(all_aborted(&r).len(), 1);
    r.state.truncate(LogIndex(4)).expect("truncate");
    assert_eq!(all_aborted(&r), vec![]);
    assert_eq!(r.partition.last_stable_offset(), Offset(4));
    apply(&mut r, 5, entries[4].clone());
    r.state.acknowledged(LogIndex(5));
    assert_eq!(all_aborted(&r).len(), 1);
    assert_eq!(r.partition.last_stable_offset(), Offset(8));
}

/// DeleteRecords past B's aborted transaction and into A's open one: the
/// index drops B (wholly below the log start) and the open transaction
/// holds the LSO at the log start.
#[test]
fn deleting_records_trims_the_index_and_clamps_the_lso_to_the_log_start() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut r = replica_with_scenario(dir.path());
    apply(&mut r, 8, entry::encode_delete_records(9));
    r.state.acknowledged(LogIndex(8));
    assert_eq!(r.partition.log_start_offset(), Offset(9));
    assert_eq!(all_aborted(&r), vec![]);
    assert_eq!(r.partition.last_stable_offset(), Offset(9));
    assert_eq!(r.partition.high_watermark(), Offset(10));
}

/// KIP-890's guard (`replica::verification`): a batch verified before its
/// producer's marker was decided does not open a transaction after it; one
/// verified afresh does.
#[tokio::test]
async fn a_batch_verified_before_its_producers_marker_is_refused_after_it() {
    use crate::batcher::PendingProduce;
    use crate::budget::Backpressure;
    let dir = tempfile::tempdir().expect("tempdir");
    let mut r = open_replica(dir.path());
    drive(&mut r);
    let room = Backpressure::new(100, 1 << 20);
    let stale = r.partition.begin_verification(A);
    // The coordinator ends A's (earlier) transaction meanwhile.
    let p = r.partition.clone();
    let written = tokio::spawn(async move { p.write_marker(marker(A, 0, false, 1)).await });
    let work = r.batcher.next().await.expect("work");
    assert!(r.state.work(&mut r.group, work));
    drive(&mut r);
    assert_eq!(written.await.expect("join").expect("written"), Offset(0));
    for (guard, expected) in [
        (Some(stale), Err(HelixError::InvalidTxnState)),
        (Some(r.partition.begin_verification(A)), Ok(Offset(1))),
    ] {
        let batches = txn(&[b"late"], A, 0, 0, 2_000);
        let size = batches[0].len();
        let (reply, answer) = tokio::sync::oneshot::channel();
        let pending = PendingProduce::new(
            batches,
            size,
            -1,
            Some(reply),
            room.acquire_within(size, Duration::from_secs(1))
                .await
                .expect("room"),
        )
        .verified(guard);
        r.partition.produce(pending).await.expect("queued");
        let work = r.batcher.next().await.expect("work");
        assert!(r.state.work(&mut r.group, work));
        drive(&mut r);
        let got = answer.await.expect("answered").map(|ack| ack.base_offset);
        assert_eq!(format!("{got:?}"), format!("{expected:?}"));
    }
    assert_eq!(
        r.partition.last_stable_offset(),
        Offset(1),
        "A's transaction is open at 1"
    );
}
