//! Applying a committed produce entry: assign offsets, patch each batch's
//! baseOffset and partitionLeaderEpoch (= Raft term), record idempotent
//! producers, and append every batch of the entry to the partition log.
//!
//! Apply judges nothing: the leader decided which requests go into the
//! entry before proposing it (`producers::Proposed`, ADR 0022). It depends
//! only on the entry, the term and the log, so every replica writes
//! byte-identical batches at identical offsets, whatever producer state it
//! happens to remember.

use bytes::{Bytes, BytesMut};
use helix_wal::{AppendCheck, PartitionLog, RaftPosition, patch_batch_header};

use super::batch::parse_header;
use super::markers::{Marker, control_batch};
use super::producers::ProducerTable;
use super::scan::MaxTimestamp;
use crate::error::{HelixError, Result};
use crate::metrics::{Stage, metrics};

/// Applies one produce entry (Raft position `pos`) and returns the base
/// offset of each of its requests. A batch that does not parse fails the
/// whole entry (the leader validated every batch: such an entry is damage,
/// never something to skip on one replica). `max_ts` is raised to the
/// largest timestamp appended.
pub fn apply_produce(
    log: &mut PartitionLog,
    producers: &mut ProducerTable,
    pos: RaftPosition,
    lengths: &[u32],
    data: Bytes,
    max_ts: &mut MaxTimestamp,
    check: AppendCheck,
) -> Result<Vec<i64>> {
    let term =
        i32::try_from(pos.term).map_err(|_| HelixError::CorruptState("term above i32".into()))?;
    let mut buf: BytesMut = data
        .try_into_mut()
        .unwrap_or_else(|shared| BytesMut::from(&shared[..]));
    let mut next = log.next_offset();
    let mut base_offsets = Vec::with_capacity(lengths.len());
    let mut start = 0usize;
    for len in lengths {
        let end = start + *len as usize;
        base_offsets.push(next);
        let mut pos = start;
        while pos < end {
            let h = parse_header(&buf[pos..end])
                .map_err(|e| HelixError::CorruptState(format!("committed entry: {e}")))?;
            let batch = &mut buf[pos..pos + h.total_len()];
            patch_batch_header(batch, next, term)
                .map_err(|e| HelixError::CorruptState(format!("committed entry: {e}")))?;
            producers.record(&h, next);
            if max_ts.is_none_or(|(_, ts)| h.max_timestamp > ts) {
                *max_ts = Some((next, h.max_timestamp));
            }
            next += i64::from(h.record_count);
            pos += h.total_len();
        }
        start = end;
    }
    // `check`: the leader verified every batch's CRC-32C before proposing
    // (`replica::batch::validate`) and patching baseOffset and
    // partitionLeaderEpoch leaves the CRC-covered bytes alone, so it checks
    // only structure here; entries that came over the network are verified
    // in full. Recovery always verifies CRCs.
    let started = std::time::Instant::now();
    log.append_checked(pos, &buf, check)?;
    metrics().record(Stage::WalAppend, started.elapsed());
    Ok(base_offsets)
}

/// Applies one marker entry: appends its control batch at the log's next
/// offset (patched like any batch: offset, partition leader epoch = term)
/// and ends the producer's transaction in `producers`. Returns the marker's
/// offset and the first offset of the transaction it ended, if one was open.
/// Judges nothing: the leader decided the marker before proposing it.
pub fn apply_marker(
    log: &mut PartitionLog,
    producers: &mut ProducerTable,
    pos: RaftPosition,
    marker: &Marker,
    max_ts: &mut MaxTimestamp,
) -> Result<(i64, Option<i64>)> {
    let term =
        i32::try_from(pos.term).map_err(|_| HelixError::CorruptState("term above i32".into()))?;
    let offset = log.next_offset();
    let mut batch = control_batch(marker);
    patch_batch_header(&mut batch, offset, term)
        .map_err(|e| HelixError::CorruptState(format!("control batch: {e}")))?;
    // Built here from the entry: its CRC is right by construction.
    log.append_checked(pos, &batch, AppendCheck::CrcVerifiedByCaller)?;
    if max_ts.is_none_or(|(_, ts)| marker.timestamp > ts) {
        *max_ts = Some((offset, marker.timestamp));
    }
    Ok((offset, producers.end_txn(marker, offset)))
}

/// A transaction a stored entry's marker ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EndedTxn {
    pub marker: Marker,
    /// The marker's offset.
    pub offset: i64,
    /// The transaction's first offset.
    pub first_offset: i64,
}

/// Applies one stored entry (catch-up from a compacted leader, ADR 0027
/// §5): its batches go to the log at their own base offsets, the log's
/// next offset becomes `next_offset`, and the producer state follows the
/// batch headers as at open (no sequence check: the batches were judged
/// when first applied). Returns the transactions its markers ended.
pub fn apply_stored(
    log: &mut PartitionLog,
    producers: &mut ProducerTable,
    pos: RaftPosition,
    (first_offset, next_offset): (i64, i64),
    batches: &Bytes,
    max_ts: &mut MaxTimestamp,
) -> Result<Vec<EndedTxn>> {
    let started = std::time::Instant::now();
    log.append_stored(pos, first_offset, next_offset, batches)?;
    metrics().record(Stage::WalAppend, started.elapsed());
    let mut ended = Vec::new();
    let mut at = 0usize;
    while at < batches.len() {
        // The WAL just checked every batch whole; a failure here is damage.
        let h = parse_header(&batches[at..])
            .map_err(|e| HelixError::CorruptState(format!("stored entry: {e}")))?;
        let batch = &batches[at..at + h.total_len()];
        if max_ts.is_none_or(|(_, ts)| h.max_timestamp > ts) {
            *max_ts = Some((h.base_offset, h.max_timestamp));
        }
        if let Some((marker, Some(first_offset))) =
            super::scan::derive_from_stored(producers, &h, batch)
        {
            ended.push(EndedTxn {
                marker,
                offset: h.base_offset,
                first_offset,
            });
        }
        at += h.total_len();
    }
    Ok(ended)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::replica::batch::tests::make_batch;
    use crate::replica::entry::{PartitionEntry, decode, encode_produce};
    use crate::replica::producers::SequenceCheck;
    use helix_wal::LogConfig;

    fn entry(reqs: &[Vec<Bytes>]) -> (Vec<u32>, Bytes) {
        match decode(encode_produce(reqs.iter().map(Vec::as_slice))).expect("decode") {
            PartitionEntry::Produce { lengths, data } => (lengths, data),
            other => panic!("wrong kind {other:?}"),
        }
    }

    fn at(index: u64) -> RaftPosition {
        RaftPosition { term: 4, index }
    }

    #[test]
    fn offsets_are_assigned_per_request_and_producers_recorded() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (mut log, _) = PartitionLog::open(dir.path(), LogConfig::default()).expect("open");
        let mut producers = ProducerTable::default();
        let mut max_ts = None;
        let a = make_batch(&[b"1", b"2"], 3, 0, 0);
        let b = make_batch(&[b"3"], -1, -1, 500);
        let (lengths, data) = entry(&[vec![a.clone()], vec![b]]);
        let out = apply_produce(
            &mut log,
            &mut producers,
            at(1),
            &lengths,
            data,
            &mut max_ts,
            AppendCheck::Full,
        )
        .expect("apply");
        assert_eq!(out, vec![0, 2]);
        assert_eq!(log.next_offset(), 3);
        assert_eq!(
            max_ts,
            Some((2, 500)),
            "base offset of the batch holding it"
        );
        let header = helix_wal::BatchHeader::parse(&a).expect("header");
        assert_eq!(
            producers.check(&header).expect("replay"),
            SequenceCheck::Duplicate { base_offset: 0 }
        );
        let read = log.reader().read(0, 1 << 20).expect("read");
        let first = helix_wal::BatchHeader::parse(&read.bytes).expect("header");
        assert_eq!(first.partition_leader_epoch, 4);
        assert_eq!(first.base_offset, 0);
        // An empty entry (a leader's duplicate-only proposal) holds its
        // place in the WAL and appends nothing.
        let (lengths, data) = entry(&[]);
        let out = apply_produce(
            &mut log,
            &mut producers,
            at(2),
            &lengths,
            data,
            &mut max_ts,
            AppendCheck::Full,
        )
        .expect("apply");
        assert!(out.is_empty());
        assert_eq!(log.next_offset(), 3);
        assert_eq!(log.last_position(), Some(at(2)));
    }

    /// Issue 29 item 1: one replica lost producer P's state (its first
    /// batches were removed by DeleteRecords and it restarted without its
    /// snapshot, rebuilding from the new log start), the other kept it.
    /// Whatever each remembers, the same entries give the same bytes at
    /// the same offsets: apply judges nothing. (Before ADR 0022 every
    /// replica re-checked sequences here; the forgetful one refused P's
    /// next batch as out of order and the replicas diverged.)
    #[test]
    fn replicas_that_remember_different_producer_state_store_the_same_bytes() {
        let dir = tempfile::tempdir().expect("tempdir");
        let open = |name: &str| {
            PartitionLog::open(&dir.path().join(name), LogConfig::default())
                .expect("open")
                .0
        };
        let (mut kept, mut lost) = (open("kept"), open("lost"));
        let (mut kept_state, mut lost_state) = (ProducerTable::default(), ProducerTable::default());
        let p = 77;
        let apply = |log: &mut PartitionLog, t: &mut ProducerTable, index, reqs: &[Vec<Bytes>]| {
            let (lengths, data) = entry(reqs);
            apply_produce(
                log,
                t,
                at(index),
                &lengths,
                data,
                &mut None,
                AppendCheck::Full,
            )
            .expect("apply")
        };
        for (index, seq) in [(1, 0), (2, 10), (3, 20)] {
            let values: Vec<Vec<u8>> = (0..10)
                .map(|i| format!("v{}", seq + i).into_bytes())
                .collect();
            let refs: Vec<&[u8]> = values.iter().map(Vec::as_slice).collect();
            let reqs = vec![vec![make_batch(&refs, p, seq, 1_000 + index as i64)]];
            apply(&mut kept, &mut kept_state, index, &reqs);
            apply(&mut lost, &mut lost_state, index, &reqs);
        }
        // DeleteRecords past P's batches on both (a Raft entry), then the
        // `lost` replica restarts without its snapshot: its table is what
        // the log from the new start shows.
        for log in [&mut kept, &mut lost] {
            log.append(at(4), &[]).expect("delete entry");
            log.delete_records_before(30).expect("delete");
        }
        let (rebuilt, _) =
            crate::replica::scan::rebuild(&lost.reader(), lost.next_offset(), None, None)
                .expect("scan");
        lost_state = rebuilt;
        let next = make_batch(&[b"v30", b"v31"], p, 30, 2_000);
        let h = helix_wal::BatchHeader::parse(&next).expect("header");
        assert_ne!(
            kept_state.check(&h).ok(),
            None,
            "the replica that kept P accepts its next batch"
        );
        assert!(lost_state.live(p).is_none());
        // P's next batch, and a plain batch after it.
        let reqs = vec![vec![next], vec![make_batch(&[b"plain"], -1, -1, 2_001)]];
        let a = apply(&mut kept, &mut kept_state, 5, &reqs);
        let b = apply(&mut lost, &mut lost_state, 5, &reqs);
        assert_eq!(a, b, "same offsets");
        let read = |log: &PartitionLog| log.reader().read(30, 1 << 20).expect("read").bytes;
        assert_eq!(read(&kept), read(&lost), "same bytes");
        assert_eq!(kept.next_offset(), 33);
    }
}
