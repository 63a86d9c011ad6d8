//! Applying a committed produce entry: assign offsets, patch each batch's
//! baseOffset and partitionLeaderEpoch (= Raft term), check idempotent
//! producer sequences, and append what was accepted to the partition log.
//!
//! Apply is deterministic (it depends only on the entry, the term and the
//! log), so every replica writes byte-identical batches at identical offsets.

use bytes::{Bytes, BytesMut};
use helix_wal::{AppendCheck, PartitionLog, RaftPosition, patch_batch_header};

use super::batch::parse_header;
use super::producers::{ProducerTable, SequenceCheck};
use super::scan::MaxTimestamp;
use crate::error::{HelixError, Result};
use crate::metrics::{Stage, metrics};

/// The outcome of one request of an entry.
#[derive(Debug)]
pub enum Applied {
    /// Appended at this base offset.
    Appended {
        base_offset: i64,
    },
    /// Already in the log (an idempotent retry): answered with the original
    /// base offset and DUPLICATE_SEQUENCE_NUMBER, nothing appended.
    Duplicate {
        base_offset: i64,
    },
    Rejected(HelixError),
}

/// Applies one produce entry (Raft position `pos`) and returns one outcome
/// per request. The entry is appended even when every request was
/// rejected, so the WAL's entry index has no holes. `max_ts` is raised to
/// the largest timestamp appended.
pub fn apply_produce(
    log: &mut PartitionLog,
    producers: &mut ProducerTable,
    pos: RaftPosition,
    lengths: &[u32],
    data: Bytes,
    max_ts: &mut MaxTimestamp,
    check: AppendCheck,
) -> Result<Vec<Applied>> {
    let term =
        i32::try_from(pos.term).map_err(|_| HelixError::CorruptState("term above i32".into()))?;
    let mut buf: BytesMut = data
        .try_into_mut()
        .unwrap_or_else(|shared| BytesMut::from(&shared[..]));
    let mut next = log.next_offset();
    let mut outcomes = Vec::with_capacity(lengths.len());
    let mut accepted: Vec<(usize, usize)> = Vec::with_capacity(lengths.len());
    let mut start = 0usize;
    for len in lengths {
        let end = start + *len as usize;
        let outcome = apply_request(&mut buf[start..end], producers, term, &mut next, max_ts);
        if matches!(outcome, Applied::Appended { .. }) {
            accepted.push((start, end));
        }
        outcomes.push(outcome);
        start = end;
    }
    // `check`: the leader verified every batch's CRC-32C before proposing
    // (`partition::batch::validate`) and patching baseOffset and
    // partitionLeaderEpoch leaves the CRC-covered bytes alone, so it checks
    // only structure here; entries that came over the network are verified
    // in full. Recovery always verifies CRCs.
    let started = std::time::Instant::now();
    if accepted.len() == lengths.len() {
        log.append_checked(pos, &buf, check)?;
    } else {
        let mut out = Vec::with_capacity(accepted.iter().map(|(s, e)| e - s).sum());
        for (s, e) in accepted {
            out.extend_from_slice(&buf[s..e]);
        }
        log.append_checked(pos, &out, check)?;
    }
    metrics().record(Stage::WalAppend, started.elapsed());
    Ok(outcomes)
}

fn apply_request(
    batches: &mut [u8],
    producers: &mut ProducerTable,
    term: i32,
    next: &mut i64,
    max_ts: &mut MaxTimestamp,
) -> Applied {
    let mut headers = Vec::new();
    let mut pos = 0usize;
    while pos < batches.len() {
        match parse_header(&batches[pos..]) {
            Ok(h) => {
                pos += h.total_len();
                headers.push(h);
            }
            Err(e) => return Applied::Rejected(e),
        }
    }
    for (i, h) in headers.iter().enumerate() {
        match producers.check(h) {
            Ok(SequenceCheck::Accept) => {}
            Ok(SequenceCheck::Duplicate { base_offset }) if i == 0 => {
                return Applied::Duplicate { base_offset };
            }
            Ok(SequenceCheck::Duplicate { .. }) => {
                return Applied::Rejected(HelixError::DuplicateSequence);
            }
            Err(e) => return Applied::Rejected(e),
        }
    }
    let base_offset = *next;
    let mut pos = 0usize;
    for h in &headers {
        if let Err(e) = patch_batch_header(&mut batches[pos..pos + h.total_len()], *next, term) {
            // Unreachable for a parsed header; refuse rather than write.
            return Applied::Rejected(HelixError::CorruptBatch(e.to_string()));
        }
        producers.record(h, *next);
        if max_ts.is_none_or(|(_, ts)| h.max_timestamp > ts) {
            *max_ts = Some((*next, h.max_timestamp));
        }
        *next += i64::from(h.record_count);
        pos += h.total_len();
    }
    Applied::Appended { base_offset }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::partition::batch::tests::make_batch;
    use crate::partition::entry::{PartitionEntry, decode, encode_produce};
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
    fn offsets_are_assigned_per_request_and_a_retry_is_a_duplicate() {
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
        assert!(matches!(out[0], Applied::Appended { base_offset: 0 }));
        assert!(matches!(out[1], Applied::Appended { base_offset: 2 }));
        assert_eq!(log.next_offset(), 3);
        assert_eq!(
            max_ts,
            Some((2, 500)),
            "base offset of the batch holding it"
        );
        let (lengths, data) = entry(&[vec![a]]);
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
        assert!(matches!(out[0], Applied::Duplicate { base_offset: 0 }));
        assert_eq!(log.next_offset(), 3, "a duplicate is not appended");
        assert_eq!(
            log.last_position(),
            Some(at(2)),
            "but its entry is recorded"
        );
        let read = log.reader().read(0, 1 << 20).expect("read");
        let first = helix_wal::BatchHeader::parse(&read.bytes).expect("header");
        assert_eq!(first.partition_leader_epoch, 4);
        assert_eq!(first.base_offset, 0);
    }

    #[test]
    fn an_out_of_order_request_is_rejected_alone() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (mut log, _) = PartitionLog::open(dir.path(), LogConfig::default()).expect("open");
        let mut producers = ProducerTable::default();
        let gap = make_batch(&[b"x"], 8, 5, 0);
        let ok = make_batch(&[b"y"], -1, -1, 0);
        let (lengths, data) = entry(&[vec![gap], vec![ok]]);
        let out = apply_produce(
            &mut log,
            &mut producers,
            at(1),
            &lengths,
            data,
            &mut None,
            AppendCheck::Full,
        )
        .expect("apply");
        assert!(matches!(
            out[0],
            Applied::Rejected(HelixError::OutOfOrderSequence { .. })
        ));
        assert!(matches!(out[1], Applied::Appended { base_offset: 0 }));
        assert_eq!(log.next_offset(), 1);
    }
}
