//! Transaction markers on a data partition (ADR 0026 §3): the marker a
//! transaction coordinator writes, the control batch that stores it (as
//! Kafka 3.9 writes it: `MemoryRecords.withEndTransactionMarker`), and the
//! aborted-transaction index that read_committed fetches are answered from.
//!
//! A control batch is built from the entry alone (producer, epoch, commit,
//! coordinator epoch and the leader's timestamp carried in it), so every
//! replica stores the same bytes at the same offset.

use std::collections::VecDeque;

use bytes::{Buf, BufMut};
use serde::{Deserialize, Serialize};

use helix_wal::batch::HEADER_LEN;

/// Batch attribute bits of a control batch: transactional (0x10) and
/// control (0x20); no compression, create time.
const CONTROL_ATTRIBUTES: i16 = 0x30;

/// `ControlRecordType`: ABORT is 0, COMMIT is 1.
const ABORT: i16 = 0;
const COMMIT: i16 = 1;

/// One WriteTxnMarkers marker for this partition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Marker {
    pub producer_id: i64,
    pub producer_epoch: i16,
    /// Commit (true) or abort (false) the producer's open transaction.
    pub commit: bool,
    /// The epoch of the coordinator (its partition leader) that wrote it.
    pub coordinator_epoch: i32,
    /// The control batch's timestamp: the proposing leader's clock, carried
    /// in the entry so that no replica reads its own.
    pub timestamp: i64,
}

/// The whole control batch of `m`, base offset 0 and partition leader epoch
/// 0 (apply patches both, as for any batch).
pub fn control_batch(m: &Marker) -> Vec<u8> {
    // The one record: attributes, timestamp delta 0, offset delta 0, key
    // (version 0, type), value (version 0, coordinator epoch), no headers.
    let mut record = Vec::with_capacity(16);
    record.put_u8(0);
    record.put_u8(0);
    record.put_u8(0);
    record.put_u8(zigzag1(4));
    record.put_i16(0);
    record.put_i16(if m.commit { COMMIT } else { ABORT });
    record.put_u8(zigzag1(6));
    record.put_i16(0);
    record.put_i32(m.coordinator_epoch);
    record.put_u8(0);
    let mut b = Vec::with_capacity(HEADER_LEN + 1 + record.len());
    b.put_i64(0); // base offset
    let batch_length = HEADER_LEN - helix_wal::batch::LOG_OVERHEAD + 1 + record.len();
    b.put_i32(batch_length as i32);
    b.put_i32(0); // partition leader epoch
    b.put_i8(helix_wal::batch::MAGIC_V2);
    b.put_u32(0); // crc, below
    b.put_i16(CONTROL_ATTRIBUTES);
    b.put_i32(0); // last offset delta
    b.put_i64(m.timestamp);
    b.put_i64(m.timestamp);
    b.put_i64(m.producer_id);
    b.put_i16(m.producer_epoch);
    b.put_i32(-1); // base sequence: markers carry none
    b.put_i32(1); // record count
    b.put_u8(zigzag1(record.len() as u8));
    b.extend_from_slice(&record);
    let crc = helix_wal::batch::compute_crc(&b);
    b[17..21].copy_from_slice(&crc.to_be_bytes());
    b
}

/// A one-byte zigzag varint (every length here is below 64).
fn zigzag1(n: u8) -> u8 {
    n << 1
}

/// The marker stored in the control batch `batch` (a whole batch whose
/// header says control), or None if its record is not an end-transaction
/// marker this broker reads. The record is parsed field by field, not at
/// fixed positions: a compacting cleaner that sets a delete horizon
/// rebases the record's timestamp delta, which then takes more bytes
/// (ADR 0027 §6).
pub fn read_marker(batch: &[u8]) -> Option<Marker> {
    let h = helix_wal::BatchHeader::parse(batch).ok()?;
    if !h.is_control() || h.compression() != 0 || h.record_count != 1 {
        return None;
    }
    let section = batch.get(HEADER_LEN..h.total_len())?;
    let records = super::records::split_records(section).ok()?;
    let [record] = records.as_slice() else {
        return None;
    };
    let (mut key, mut value) = (record.key?, record.value?);
    if key.len() < 4 || value.len() < 6 || key.get_i16() != 0 {
        return None;
    }
    let commit = match key.get_i16() {
        COMMIT => true,
        ABORT => false,
        _ => return None,
    };
    let _value_version = value.get_i16();
    Some(Marker {
        producer_id: h.producer_id,
        producer_epoch: h.producer_epoch,
        commit,
        coordinator_epoch: value.get_i32(),
        timestamp: h.max_timestamp,
    })
}

/// One aborted transaction (Kafka's `AbortedTxn`): the producer's records
/// from `first_offset` up to its abort marker at `last_offset` are aborted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct AbortedTxn {
    pub producer_id: i64,
    pub first_offset: i64,
    pub last_offset: i64,
}

/// The aborted transactions a fetch of `[from, upper)` must be told about
/// (Kafka's `collectAbortedTxns`): those ending at or after `from` and
/// starting before `upper`. `index` is in log order (by `last_offset`).
pub fn overlapping(index: &VecDeque<AbortedTxn>, from: i64, upper: i64) -> Vec<AbortedTxn> {
    let start = index.partition_point(|a| a.last_offset < from);
    index
        .range(start..)
        .filter(|a| a.first_offset < upper)
        .copied()
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn marker(commit: bool) -> Marker {
        Marker {
            producer_id: 9,
            producer_epoch: 3,
            commit,
            coordinator_epoch: 7,
            timestamp: 1_234,
        }
    }

    /// The bytes Kafka 3.9 writes for an abort by producer 9 epoch 3,
    /// coordinator epoch 7, at time 1234 (before offset and leader epoch
    /// are set): `MemoryRecords.withEndTransactionMarker`.
    #[test]
    fn a_control_batch_is_kafkas_and_reads_back() {
        let b = control_batch(&marker(false));
        let h = helix_wal::BatchHeader::parse_checked(&b).expect("header");
        assert!(h.is_control() && h.is_transactional());
        assert_eq!(
            (h.base_sequence, h.record_count, h.last_offset_delta),
            (-1, 1, 0)
        );
        assert_eq!((h.producer_id, h.producer_epoch), (9, 3));
        assert_eq!((h.first_timestamp, h.max_timestamp), (1_234, 1_234));
        helix_wal::batch::verify_crc(&b).expect("crc");
        let record = &b[HEADER_LEN..];
        assert_eq!(
            record,
            &[32, 0, 0, 0, 8, 0, 0, 0, 0, 12, 0, 0, 0, 0, 0, 7, 0][..],
            "length 16, attributes, deltas, key [0, 0 (abort)], value [0, epoch 7], no headers"
        );
        assert_eq!(b.len(), 61 + 17);
        assert_eq!(read_marker(&b), Some(marker(false)));
        assert_eq!(
            read_marker(&control_batch(&marker(true))),
            Some(marker(true))
        );
        let data = super::super::batch::tests::make_batch(&[b"x"], 9, 0, 0);
        assert_eq!(read_marker(&data), None);
    }

    #[test]
    fn a_fetch_is_told_the_aborted_transactions_it_overlaps() {
        let a = |p, f, l| AbortedTxn {
            producer_id: p,
            first_offset: f,
            last_offset: l,
        };
        let index = VecDeque::from([a(1, 0, 5), a(2, 3, 10), a(3, 12, 20)]);
        assert_eq!(overlapping(&index, 6, 12), vec![a(2, 3, 10)]);
        assert_eq!(overlapping(&index, 5, 13), Vec::from(index.clone()));
        assert_eq!(overlapping(&index, 21, 30), vec![]);
        assert_eq!(overlapping(&index, 0, 3), vec![a(1, 0, 5)]);
    }
}
