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
//! A stored entry is `kind u8 = 3 | first_offset i64 | next_offset i64 |
//! batches`: a WAL entry as the leader stores it, sent by catch-up when
//! its batches do not cover its offset range one after another (a
//! compacted segment, ADR 0027 §5), so the follower keeps every base
//! offset instead of assigning offsets again.
//! A restart entry is `kind u8 = 4 | first_offset i64 | next_offset i64 |
//! state length u32 | state | batches`: the first entry of a follower's
//! log started over at the leader's first held entry (`state/restart.rs`),
//! a stored entry carrying the leader's derived state (producers, open
//! and aborted transactions: `scan::Snapshot` as JSON) as of a later entry
//! the state names. Applied, it is a stored entry; the state is read only
//! by the replica whose log starts over at it.

use bytes::{Buf, BufMut, Bytes, BytesMut};

use super::markers::Marker;
use crate::error::{HelixError, Result};

const KIND_PRODUCE: u8 = 0;
const KIND_DELETE_RECORDS: u8 = 1;
const KIND_MARKER: u8 = 2;
const KIND_STORED: u8 = 3;
const KIND_RESTART: u8 = 4;
const MARKER_LEN: usize = 8 + 2 + 1 + 4 + 8;
const STORED_RANGE_LEN: usize = 8 + 8;

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
    /// Batches at their own base offsets, increasing inside
    /// `[first_offset, next_offset)`, with gaps or none at all.
    Stored {
        first_offset: i64,
        next_offset: i64,
        batches: Bytes,
    },
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

pub fn encode_stored(first_offset: i64, next_offset: i64, batches: &[u8]) -> Bytes {
    let mut b = BytesMut::with_capacity(1 + STORED_RANGE_LEN + batches.len());
    b.put_u8(KIND_STORED);
    b.put_i64(first_offset);
    b.put_i64(next_offset);
    b.put_slice(batches);
    b.freeze()
}

/// A stored entry that starts a follower's log over, with the leader's
/// derived `state` (see the module's description).
pub fn encode_restart(first_offset: i64, next_offset: i64, state: &[u8], batches: &[u8]) -> Bytes {
    let mut b = BytesMut::with_capacity(1 + STORED_RANGE_LEN + 4 + state.len() + batches.len());
    b.put_u8(KIND_RESTART);
    b.put_i64(first_offset);
    b.put_i64(next_offset);
    b.put_u32(state.len() as u32);
    b.put_slice(state);
    b.put_slice(batches);
    b.freeze()
}

/// The state a restart entry carries (`None` for any other kind, or one
/// too short to hold what it declares).
pub fn restart_state(data: &Bytes) -> Option<Bytes> {
    let at = 1 + STORED_RANGE_LEN;
    if data.first() != Some(&KIND_RESTART) {
        return None;
    }
    let len = data.get(at..at + 4)?;
    let len = u32::from_be_bytes(len.try_into().ok()?) as usize;
    let start = at + 4;
    (data.len() - start >= len).then(|| data.slice(start..start + len))
}

/// The offset range of a stored (or restart) entry, read from its first
/// bytes without decoding it (`None` for any other kind, or too short to
/// hold one).
pub fn stored_range(data: &[u8]) -> Option<(i64, i64)> {
    let (kind, rest) = data.split_first()?;
    if *kind != KIND_STORED && *kind != KIND_RESTART {
        return None;
    }
    let range = rest.get(..STORED_RANGE_LEN)?;
    let (first, next) = range.split_at(8);
    Some((
        i64::from_be_bytes(first.try_into().ok()?),
        i64::from_be_bytes(next.try_into().ok()?),
    ))
}

/// Checks a stored entry's batches without copying them: each header
/// whole, its declared length inside the entry, base offsets increasing
/// inside the range. CRCs are the WAL's to check, on append.
fn check_stored(first_offset: i64, next_offset: i64, batches: &[u8]) -> Result<()> {
    let bad = |what: String| HelixError::CorruptState(format!("stored entry: {what}"));
    if first_offset < 0 || next_offset < first_offset {
        return Err(bad(format!("range {first_offset}..{next_offset}")));
    }
    let (mut at, mut expected) = (0usize, first_offset);
    while at < batches.len() {
        let h = super::batch::parse_header(&batches[at..])?;
        let len = h.total_len();
        if len == 0 || len > batches.len() - at {
            return Err(bad(format!("the batch at byte {at} runs past the entry")));
        }
        // Checked: garbage may hold any base offset.
        let end = h
            .base_offset
            .checked_add(i64::from(h.last_offset_delta) + 1)
            .filter(|end| h.base_offset >= expected && *end <= next_offset);
        let Some(end) = end else {
            return Err(bad(format!(
                "batch at {} outside {expected}..{next_offset}",
                h.base_offset
            )));
        };
        expected = end;
        at += len;
    }
    Ok(())
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
        KIND_STORED if b.remaining() >= STORED_RANGE_LEN => {
            let first_offset = b.get_i64();
            let next_offset = b.get_i64();
            check_stored(first_offset, next_offset, &b)?;
            Ok(PartitionEntry::Stored {
                first_offset,
                next_offset,
                batches: b,
            })
        }
        KIND_RESTART if b.remaining() >= STORED_RANGE_LEN + 4 => {
            let first_offset = b.get_i64();
            let next_offset = b.get_i64();
            let state_len = b.get_u32() as usize;
            if b.remaining() < state_len {
                return Err(bad("restart entry cut inside its state"));
            }
            b.advance(state_len);
            check_stored(first_offset, next_offset, &b)?;
            Ok(PartitionEntry::Stored {
                first_offset,
                next_offset,
                batches: b,
            })
        }
        KIND_STORED | KIND_RESTART => Err(bad("stored entry without its offset range")),
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

    /// A batch of `n` records patched to `base`.
    fn at(base: i64, n: usize) -> Bytes {
        let values: Vec<&[u8]> = (0..n).map(|_| b"v".as_slice()).collect();
        let mut b = super::super::batch::tests::make_batch(&values, -1, -1, 10).to_vec();
        helix_wal::patch_batch_header(&mut b, base, 1).expect("patch");
        Bytes::from(b)
    }

    #[test]
    fn a_stored_entry_round_trips_with_its_gaps() {
        let batches = [at(12, 2), at(17, 1)].concat();
        match decode(encode_stored(10, 20, &batches)).expect("decode") {
            PartitionEntry::Stored {
                first_offset,
                next_offset,
                batches: back,
            } => {
                assert_eq!((first_offset, next_offset), (10, 20));
                assert_eq!(back, batches);
            }
            other => panic!("wrong kind {other:?}"),
        }
        assert_eq!(
            stored_range(&encode_stored(10, 20, &batches)),
            Some((10, 20))
        );
        assert_eq!(stored_range(&encode_delete_records(3)), None);
        assert_eq!(stored_range(&[KIND_STORED, 0, 0]), None);
        assert!(matches!(
            decode(encode_stored(5, 9, &[])).expect("an emptied entry"),
            PartitionEntry::Stored { first_offset: 5, next_offset: 9, batches } if batches.is_empty()
        ));
    }

    #[test]
    fn a_restart_entry_is_a_stored_entry_carrying_a_state() {
        let batches = [at(12, 2), at(17, 1)].concat();
        let e = encode_restart(10, 20, b"{state}", &batches);
        assert_eq!(stored_range(&e), Some((10, 20)));
        assert_eq!(restart_state(&e).as_deref(), Some(&b"{state}"[..]));
        assert!(matches!(
            decode(e.clone()).expect("decode"),
            PartitionEntry::Stored { first_offset: 10, next_offset: 20, batches: back } if back == batches
        ));
        assert_eq!(restart_state(&encode_stored(10, 20, &batches)), None);
        // Cut inside the state it declares.
        let cut = e.slice(..1 + STORED_RANGE_LEN + 4 + 3);
        assert_eq!(restart_state(&cut), None);
        assert!(decode(cut).is_err());
    }

    #[test]
    fn a_garbage_stored_entry_is_refused() {
        let one = at(12, 2);
        let backwards = [at(15, 1), at(12, 1)].concat();
        let cases: Vec<(&str, Bytes)> = vec![
            ("no range", Bytes::from_static(&[KIND_STORED, 0, 0, 0])),
            ("range backwards", encode_stored(10, 9, &[])),
            ("negative start", encode_stored(-3, 9, &[])),
            ("batch before the range", encode_stored(13, 20, &one)),
            ("batch past the range", encode_stored(10, 13, &one)),
            ("batches backwards", encode_stored(10, 20, &backwards)),
            ("cut batch", encode_stored(10, 20, &one[..one.len() - 1])),
            ("header garbage", encode_stored(10, 20, &[0xff; 70])),
            ("near the end of offsets", {
                let mut b = one.to_vec();
                helix_wal::patch_batch_header(&mut b, i64::MAX - 1, 1).expect("patch");
                encode_stored(0, i64::MAX, &b)
            }),
        ];
        for (what, bytes) in cases {
            assert!(decode(bytes).is_err(), "{what}");
        }
    }
}
