//! The bytes of one partition Raft entry.
//!
//! A produce entry carries the record data of every request of one batch:
//! `kind u8 = 0 | request count u32 | each request's byte length u32 | data`,
//! where `data` is every request's batches back to back. Keeping the data
//! contiguous lets apply patch headers in place and append it in one write.
//! A delete-records entry is `kind u8 = 1 | offset i64`, so log-start moves
//! are ordered with the appends on every replica.
//! A marker entry is `kind u8 = 2 | producer_id i64 | producer_epoch i16 |
//! commit u8 | coordinator_epoch i32 | timestamp i64`: a transaction
//! coordinator's WriteTxnMarkers for this partition (ADR 0026), ordered
//! with the producer's batches like any append.

use bytes::{Buf, BufMut, Bytes, BytesMut};

use super::markers::Marker;
use crate::error::{HelixError, Result};

const KIND_PRODUCE: u8 = 0;
const KIND_DELETE_RECORDS: u8 = 1;
const KIND_MARKER: u8 = 2;
const MARKER_LEN: usize = 8 + 2 + 1 + 4 + 8;

/// A decoded entry.
#[derive(Debug)]
pub enum PartitionEntry {
    /// `lengths[i]` bytes of `data` belong to the i-th request, in order.
    Produce {
        lengths: Vec<u32>,
        data: Bytes,
    },
    DeleteRecords {
        before: i64,
    },
    Marker(Marker),
}

/// Encodes a produce entry from each request's batches. This is the one
/// copy of record data on the write path.
pub fn encode_produce<'a>(requests: impl Iterator<Item = &'a [Bytes]> + Clone) -> Bytes {
    let count = requests.clone().count();
    let data_len: usize = requests
        .clone()
        .map(|r| r.iter().map(Bytes::len).sum::<usize>())
        .sum();
    let mut b = BytesMut::with_capacity(1 + 4 + 4 * count + data_len);
    b.put_u8(KIND_PRODUCE);
    b.put_u32(count as u32);
    for r in requests.clone() {
        b.put_u32(r.iter().map(Bytes::len).sum::<usize>() as u32);
    }
    for r in requests {
        for batch in r {
            b.put_slice(batch);
        }
    }
    b.freeze()
}

pub fn encode_delete_records(before: i64) -> Bytes {
    let mut b = BytesMut::with_capacity(9);
    b.put_u8(KIND_DELETE_RECORDS);
    b.put_i64(before);
    b.freeze()
}

pub fn encode_marker(m: &Marker) -> Bytes {
    let mut b = BytesMut::with_capacity(1 + MARKER_LEN);
    b.put_u8(KIND_MARKER);
    b.put_i64(m.producer_id);
    b.put_i16(m.producer_epoch);
    b.put_u8(u8::from(m.commit));
    b.put_i32(m.coordinator_epoch);
    b.put_i64(m.timestamp);
    b.freeze()
}

pub fn decode(mut b: Bytes) -> Result<PartitionEntry> {
    let bad = |what: &str| HelixError::CorruptState(format!("partition entry: {what}"));
    if b.is_empty() {
        return Err(bad("empty"));
    }
    match b.get_u8() {
        KIND_PRODUCE => {
            if b.remaining() < 4 {
                return Err(bad("no request count"));
            }
            let count = b.get_u32() as usize;
            if b.remaining() < count.saturating_mul(4) {
                return Err(bad("request lengths cut short"));
            }
            let lengths: Vec<u32> = (0..count).map(|_| b.get_u32()).collect();
            let total: u64 = lengths.iter().map(|l| u64::from(*l)).sum();
            if total != b.remaining() as u64 {
                return Err(bad("lengths do not match the data"));
            }
            Ok(PartitionEntry::Produce { lengths, data: b })
        }
        KIND_DELETE_RECORDS if b.remaining() == 8 => Ok(PartitionEntry::DeleteRecords {
            before: b.get_i64(),
        }),
        KIND_MARKER if b.remaining() == MARKER_LEN => Ok(PartitionEntry::Marker(Marker {
            producer_id: b.get_i64(),
            producer_epoch: b.get_i16(),
            commit: match b.get_u8() {
                0 => false,
                1 => true,
                _ => return Err(bad("marker neither commit nor abort")),
            },
            coordinator_epoch: b.get_i32(),
            timestamp: b.get_i64(),
        })),
        other => Err(bad(&format!("unknown kind {other}"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn produce_entry_round_trips() {
        let r1 = vec![Bytes::from_static(b"abc"), Bytes::from_static(b"de")];
        let r2 = vec![Bytes::from_static(b"f")];
        let e = encode_produce([r1.as_slice(), r2.as_slice()].into_iter());
        match decode(e).expect("decode") {
            PartitionEntry::Produce { lengths, data } => {
                assert_eq!(lengths, vec![5, 1]);
                assert_eq!(&data[..], b"abcdef");
            }
            other => panic!("wrong kind {other:?}"),
        }
    }

    #[test]
    fn delete_records_round_trips_and_garbage_is_refused() {
        match decode(encode_delete_records(42)).expect("decode") {
            PartitionEntry::DeleteRecords { before } => assert_eq!(before, 42),
            other => panic!("wrong kind {other:?}"),
        }
        assert!(decode(Bytes::from_static(&[0, 0, 0, 0, 2, 0, 0, 0, 9])).is_err());
        assert!(decode(Bytes::from_static(&[7])).is_err());
    }

    #[test]
    fn a_marker_round_trips() {
        let m = Marker {
            producer_id: 5,
            producer_epoch: 2,
            commit: true,
            coordinator_epoch: 9,
            timestamp: 1_000,
        };
        match decode(encode_marker(&m)).expect("decode") {
            PartitionEntry::Marker(back) => assert_eq!(back, m),
            other => panic!("wrong kind {other:?}"),
        }
        let mut cut = encode_marker(&m).to_vec();
        cut.pop();
        assert!(decode(Bytes::from(cut)).is_err());
    }
}
