//! The durable records of `__transaction_state` and their binary encoding.
//!
//! As Kafka's `TransactionLog`, every record holds the whole metadata of
//! one transactional id (or its tombstone), so replaying a partition's log
//! in order and keeping the last record per id rebuilds its view. Unlike
//! Kafka's value v0, the last producer id and epoch are stored too: a
//! KIP-360 retry that spans a coordinator failover still finds them.
//!
//! A [`Record::Snapshot`] holds a partition's whole view (Kafka compacts
//! the topic instead): replay replaces the view with it, so the log before
//! it can be deleted (ADR 0026 "Snapshots of `__transaction_state` as
//! built").
//!
//! One Raft entry carries one [`encode_entry`] batch: `version u8 | count
//! u32 | crc32c u32 | records`, each record `kind u8 | length u32 | body`.
//! Integers are big-endian, strings `u16` length + UTF-8. Decoding checks
//! every declared length against what is left before it allocates, verifies
//! the checksum, refuses unknown versions, kinds and states, and never
//! panics: an entry is either decoded whole or refused.

use std::collections::{BTreeMap, BTreeSet};

use bytes::{Buf, BufMut, Bytes, BytesMut};

use super::error::TxnError;
use super::metadata::TxnMetadata;
use super::state::TxnState;
use super::types::TopicPartition;

/// Format version written by this code. Decoding refuses any other.
pub const ENTRY_FORMAT_VERSION: u8 = 1;
const ENTRY_HEADER_BYTES: usize = 1 + 4 + 4;
const RECORD_HEADER_BYTES: usize = 1 + 4;
/// The smallest encoding of one transaction partition: an empty topic name
/// (`u16` length) and the partition (`i32`).
const PARTITION_MIN_BYTES: usize = 2 + 4;
/// The smallest encoding of one transactional id in a snapshot: an empty
/// id (`u16` length) and metadata with no partition (ids, epochs, timeout,
/// state, timestamps, partition count).
const SNAPSHOT_ITEM_MIN_BYTES: usize = 2 + (8 + 8 + 2 + 2 + 4 + 1 + 8 + 8 + 4);
/// The longest string a record holds (Kafka's protocol strings are no
/// longer); requests are checked against it before anything is encoded.
pub const MAX_STRING_BYTES: usize = i16::MAX as usize;

const KIND_METADATA: u8 = 1;
const KIND_TOMBSTONE: u8 = 2;
const KIND_SNAPSHOT: u8 = 3;

/// A durable change to a `__transaction_state` partition's view.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Record {
    /// The whole metadata of a transactional id after a transition.
    Metadata {
        transactional_id: String,
        metadata: TxnMetadata,
    },
    /// The transactional id expired: it is forgotten.
    Tombstone { transactional_id: String },
    /// A partition's whole view: every live transactional id's metadata.
    /// Replaying it replaces the view, whatever came before.
    Snapshot {
        transactions: BTreeMap<String, TxnMetadata>,
    },
}

impl Record {
    /// The transactional id the record changes (none for a snapshot, which
    /// changes them all).
    pub fn transactional_id(&self) -> Option<&str> {
        match self {
            Record::Metadata {
                transactional_id, ..
            }
            | Record::Tombstone { transactional_id } => Some(transactional_id),
            Record::Snapshot { .. } => None,
        }
    }
}

/// Encodes records as one entry. Strings longer than [`MAX_STRING_BYTES`]
/// cannot reach here: request validation bounds every string first.
pub fn encode_entry(records: &[Record]) -> Bytes {
    let mut body = BytesMut::new();
    for record in records {
        let mut one = BytesMut::new();
        let kind = match record {
            Record::Metadata {
                transactional_id,
                metadata,
            } => {
                put_str(&mut one, transactional_id);
                encode_metadata(&mut one, metadata);
                KIND_METADATA
            }
            Record::Tombstone { transactional_id } => {
                put_str(&mut one, transactional_id);
                KIND_TOMBSTONE
            }
            Record::Snapshot { transactions } => {
                one.put_u32(transactions.len() as u32);
                for (transactional_id, metadata) in transactions {
                    put_str(&mut one, transactional_id);
                    encode_metadata(&mut one, metadata);
                }
                KIND_SNAPSHOT
            }
        };
        body.put_u8(kind);
        body.put_u32(one.len() as u32);
        body.put_slice(&one);
    }
    let mut entry = BytesMut::with_capacity(ENTRY_HEADER_BYTES + body.len());
    entry.put_u8(ENTRY_FORMAT_VERSION);
    entry.put_u32(records.len() as u32);
    entry.put_u32(crc32c::crc32c(&body));
    entry.put_slice(&body);
    entry.freeze()
}

fn encode_metadata(out: &mut BytesMut, metadata: &TxnMetadata) {
    out.put_i64(metadata.producer_id);
    out.put_i64(metadata.last_producer_id);
    out.put_i16(metadata.epoch);
    out.put_i16(metadata.last_epoch);
    out.put_i32(metadata.timeout_ms);
    out.put_u8(metadata.state.id());
    out.put_i64(metadata.start_ms);
    out.put_i64(metadata.last_update_ms);
    out.put_u32(metadata.partitions.len() as u32);
    for partition in &metadata.partitions {
        put_str(out, &partition.topic);
        out.put_i32(partition.partition);
    }
}

fn put_str(out: &mut BytesMut, text: &str) {
    debug_assert!(text.len() <= MAX_STRING_BYTES, "validated before encoding");
    out.put_u16(text.len() as u16);
    out.put_slice(text.as_bytes());
}

/// Decodes one entry written by [`encode_entry`], or says why it cannot.
pub fn decode_entry(entry: &[u8]) -> Result<Vec<Record>, TxnError> {
    let mut input = Input(entry);
    let version = input.u8()?;
    if version != ENTRY_FORMAT_VERSION {
        return Err(TxnError::RecordVersion(version));
    }
    let count = input.u32()? as usize;
    let checksum = input.u32()?;
    if crc32c::crc32c(input.0) != checksum {
        return Err(TxnError::RecordChecksum);
    }
    // Every record takes at least its header: bound the allocation by input.
    input.need(count.saturating_mul(RECORD_HEADER_BYTES))?;
    let mut records = Vec::with_capacity(count);
    for _ in 0..count {
        let kind = input.u8()?;
        let length = input.u32()? as usize;
        let mut body = Input(input.take(length)?);
        let record = match kind {
            KIND_METADATA => Record::Metadata {
                transactional_id: body.string()?,
                metadata: decode_metadata(&mut body)?,
            },
            KIND_TOMBSTONE => Record::Tombstone {
                transactional_id: body.string()?,
            },
            KIND_SNAPSHOT => Record::Snapshot {
                transactions: decode_snapshot(&mut body)?,
            },
            other => return Err(TxnError::RecordKind(other)),
        };
        body.finish()?;
        records.push(record);
    }
    input.finish()?;
    Ok(records)
}

/// A snapshot's transactional ids, in the strictly ascending order
/// [`encode_entry`] writes them (a repeated id would hide a corruption).
fn decode_snapshot(body: &mut Input<'_>) -> Result<BTreeMap<String, TxnMetadata>, TxnError> {
    let count = body.u32()? as usize;
    body.need(count.saturating_mul(SNAPSHOT_ITEM_MIN_BYTES))?;
    let mut transactions = BTreeMap::new();
    for _ in 0..count {
        let transactional_id = body.string()?;
        let metadata = decode_metadata(body)?;
        if transactions
            .last_key_value()
            .is_some_and(|(last, _)| *last >= transactional_id)
        {
            return Err(TxnError::RecordUnordered);
        }
        transactions.insert(transactional_id, metadata);
    }
    Ok(transactions)
}

fn decode_metadata(body: &mut Input<'_>) -> Result<TxnMetadata, TxnError> {
    let producer_id = body.i64()?;
    let last_producer_id = body.i64()?;
    let epoch = body.i16()?;
    let last_epoch = body.i16()?;
    let timeout_ms = body.i32()?;
    let state_id = body.u8()?;
    let state = TxnState::from_id(state_id).ok_or(TxnError::RecordState(state_id))?;
    let start_ms = body.i64()?;
    let last_update_ms = body.i64()?;
    let count = body.u32()? as usize;
    body.need(count.saturating_mul(PARTITION_MIN_BYTES))?;
    let mut partitions = BTreeSet::new();
    for _ in 0..count {
        let topic = body.string()?;
        let partition = body.i32()?;
        partitions.insert(TopicPartition { topic, partition });
    }
    Ok(TxnMetadata {
        producer_id,
        last_producer_id,
        epoch,
        last_epoch,
        timeout_ms,
        state,
        partitions,
        start_ms,
        last_update_ms,
    })
}

/// A cursor over untrusted bytes: every read checks what is left first.
struct Input<'a>(&'a [u8]);

impl<'a> Input<'a> {
    fn need(&self, needed: usize) -> Result<(), TxnError> {
        if self.0.len() < needed {
            return Err(TxnError::RecordTruncated {
                needed,
                left: self.0.len(),
            });
        }
        Ok(())
    }

    fn take(&mut self, length: usize) -> Result<&'a [u8], TxnError> {
        self.need(length)?;
        let (head, tail) = self.0.split_at(length);
        self.0 = tail;
        Ok(head)
    }

    fn u8(&mut self) -> Result<u8, TxnError> {
        self.need(1)?;
        Ok(self.0.get_u8())
    }

    fn i16(&mut self) -> Result<i16, TxnError> {
        self.need(2)?;
        Ok(self.0.get_i16())
    }

    fn u16(&mut self) -> Result<u16, TxnError> {
        self.need(2)?;
        Ok(self.0.get_u16())
    }

    fn u32(&mut self) -> Result<u32, TxnError> {
        self.need(4)?;
        Ok(self.0.get_u32())
    }

    fn i32(&mut self) -> Result<i32, TxnError> {
        self.need(4)?;
        Ok(self.0.get_i32())
    }

    fn i64(&mut self) -> Result<i64, TxnError> {
        self.need(8)?;
        Ok(self.0.get_i64())
    }

    fn string(&mut self) -> Result<String, TxnError> {
        let length = usize::from(self.u16()?);
        let raw = self.take(length)?;
        let text = std::str::from_utf8(raw).map_err(|_| TxnError::RecordUtf8)?;
        Ok(text.to_owned())
    }

    fn finish(&self) -> Result<(), TxnError> {
        match self.0.len() {
            0 => Ok(()),
            left => Err(TxnError::RecordTrailing(left)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Vec<Record> {
        let partitions = [
            TopicPartition::new("orders", 3),
            TopicPartition::new("λ", 0),
        ];
        vec![
            Record::Metadata {
                transactional_id: "app-1".into(),
                metadata: TxnMetadata {
                    producer_id: 4_000,
                    last_producer_id: 3_999,
                    epoch: 7,
                    last_epoch: 6,
                    timeout_ms: 60_000,
                    state: TxnState::PrepareCommit,
                    partitions: partitions.into_iter().collect(),
                    start_ms: 1_000,
                    last_update_ms: 2_000,
                },
            },
            Record::Metadata {
                transactional_id: "fresh".into(),
                metadata: TxnMetadata::fresh(5, 1_000, 9),
            },
            Record::Tombstone {
                transactional_id: "old".into(),
            },
            Record::Snapshot {
                transactions: BTreeMap::from([
                    ("a".to_owned(), TxnMetadata::fresh(6, 1_000, 2)),
                    ("b".to_owned(), TxnMetadata::fresh(7, 500, 3)),
                ]),
            },
            Record::Snapshot {
                transactions: BTreeMap::new(),
            },
        ]
    }

    #[test]
    fn entry_round_trips_every_kind_and_state() {
        let records = sample();
        assert_eq!(decode_entry(&encode_entry(&records)).unwrap(), records);
        assert_eq!(decode_entry(&encode_entry(&[])).unwrap(), vec![]);
        for state in TxnState::ALL {
            let mut metadata = TxnMetadata::fresh(1, 100, 0);
            metadata.state = state;
            let record = vec![Record::Metadata {
                transactional_id: "t".into(),
                metadata,
            }];
            assert_eq!(decode_entry(&encode_entry(&record)).unwrap(), record);
        }
    }

    #[test]
    fn every_truncation_is_refused() {
        let entry = encode_entry(&sample());
        for cut in 0..entry.len() {
            assert!(decode_entry(&entry[..cut]).is_err(), "cut at {cut} decoded");
        }
    }

    #[test]
    fn every_bit_flip_is_refused() {
        let entry = encode_entry(&sample());
        for bit in 0..entry.len() * 8 {
            let mut bad = entry.to_vec();
            bad[bit / 8] ^= 1 << (bit % 8);
            assert!(decode_entry(&bad).is_err(), "flip of bit {bit} decoded");
        }
    }

    /// A body with a valid header and checksum around it.
    fn entry_around(count: u32, body: &[u8]) -> Vec<u8> {
        let mut entry = BytesMut::new();
        entry.put_u8(ENTRY_FORMAT_VERSION);
        entry.put_u32(count);
        entry.put_u32(crc32c::crc32c(body));
        entry.put_slice(body);
        entry.to_vec()
    }

    #[test]
    fn huge_declared_counts_fail_without_allocating() {
        assert!(matches!(
            decode_entry(&entry_around(u32::MAX, &[])),
            Err(TxnError::RecordTruncated { .. })
        ));
        // A metadata record declaring u32::MAX partitions.
        let mut one = BytesMut::new();
        put_str(&mut one, "t");
        let mut metadata = BytesMut::new();
        encode_metadata(&mut metadata, &TxnMetadata::fresh(1, 100, 0));
        let cut = metadata.len() - 4;
        one.put_slice(&metadata[..cut]);
        one.put_u32(u32::MAX);
        let mut body = BytesMut::new();
        body.put_u8(KIND_METADATA);
        body.put_u32(one.len() as u32);
        body.put_slice(&one);
        assert!(matches!(
            decode_entry(&entry_around(1, &body)),
            Err(TxnError::RecordTruncated { .. })
        ));
    }

    #[test]
    fn a_snapshot_declaring_more_ids_than_it_holds_fails_without_allocating() {
        let mut one = BytesMut::new();
        one.put_u32(u32::MAX);
        let mut body = BytesMut::new();
        body.put_u8(KIND_SNAPSHOT);
        body.put_u32(one.len() as u32);
        body.put_slice(&one);
        assert!(matches!(
            decode_entry(&entry_around(1, &body)),
            Err(TxnError::RecordTruncated { .. })
        ));
    }

    #[test]
    fn a_snapshot_with_a_repeated_id_is_refused() {
        let mut one = BytesMut::new();
        one.put_u32(2);
        for _ in 0..2 {
            put_str(&mut one, "same");
            encode_metadata(&mut one, &TxnMetadata::fresh(1, 100, 0));
        }
        let mut body = BytesMut::new();
        body.put_u8(KIND_SNAPSHOT);
        body.put_u32(one.len() as u32);
        body.put_slice(&one);
        assert_eq!(
            decode_entry(&entry_around(1, &body)),
            Err(TxnError::RecordUnordered)
        );
    }

    #[test]
    fn unknown_version_kind_and_state_are_refused() {
        let mut entry = encode_entry(&sample()).to_vec();
        entry[0] = 9;
        assert_eq!(decode_entry(&entry), Err(TxnError::RecordVersion(9)));

        let mut body = BytesMut::new();
        body.put_u8(200);
        body.put_u32(0);
        assert_eq!(
            decode_entry(&entry_around(1, &body)),
            Err(TxnError::RecordKind(200))
        );

        let mut one = BytesMut::new();
        put_str(&mut one, "t");
        let mut metadata = TxnMetadata::fresh(1, 100, 0);
        metadata.state = TxnState::Dead;
        encode_metadata(&mut one, &metadata);
        // The state byte follows id (2+1), ids (16), epochs (4), timeout (4).
        one[2 + 1 + 16 + 4 + 4] = 8;
        let mut body = BytesMut::new();
        body.put_u8(KIND_METADATA);
        body.put_u32(one.len() as u32);
        body.put_slice(&one);
        assert_eq!(
            decode_entry(&entry_around(1, &body)),
            Err(TxnError::RecordState(8))
        );
    }

    #[test]
    fn pseudo_random_garbage_is_refused() {
        let mut state: u64 = 0x9E37_79B9_7F4A_7C15;
        let mut next = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        for round in 0..5_000 {
            let length = round % 131;
            let garbage: Vec<u8> = (0..length).map(|_| next() as u8).collect();
            assert!(decode_entry(&garbage).is_err(), "round {round} decoded");
            // With a valid header and checksum the body itself is judged.
            let count = (next() % 4) as u32;
            let _ = decode_entry(&entry_around(count, &garbage));
        }
    }
}
