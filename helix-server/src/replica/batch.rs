//! Kafka v2 record batches as bytes: header parsing, validation and the two
//! header patches the broker makes (baseOffset, partitionLeaderEpoch).
//!
//! Batches are stored exactly as the producer sent them. Neither patched field
//! is covered by the batch CRC (it starts at `attributes`), so patching never
//! needs re-encoding. Record contents are never decoded, except counting the
//! records of an uncompressed batch to check the declared count.

use bytes::Bytes;

use crate::error::{HelixError, Result};

pub use helix_wal::batch::{BatchHeader, HEADER_LEN};

/// A record's timestamp when it has none (Kafka's `RecordBatch.NO_TIMESTAMP`).
pub const NO_TIMESTAMP: i64 = -1;

/// Producer id of a batch sent without idempotence.
pub const NO_PRODUCER_ID: i64 = -1;

/// Base sequence of a batch without one (Kafka's `RecordBatch.NO_SEQUENCE`):
/// a marker, or a coordinator's transactional batch (TxnOffsetCommit).
pub const NO_SEQUENCE: i32 = -1;

/// Parses the header of the whole batch at the start of `b`, checking its
/// structure (length, magic 2, lastOffsetDelta, all of it present).
pub fn parse_header(b: &[u8]) -> Result<BatchHeader> {
    BatchHeader::parse_checked(b).map_err(|e| HelixError::CorruptBatch(e.to_string()))
}

/// One validated batch of a produce request.
#[derive(Debug, Clone)]
pub struct ValidBatch {
    pub bytes: Bytes,
}

/// Splits a produce request's `records` into batches and validates each:
/// framing, magic 2, CRC-32C, record count, size limit, and every record's
/// timestamp within `timestamps` (inclusive) when given. Any failure rejects
/// the whole partition's data (Kafka does the same), never a partial write.
///
/// A transactional batch is refused (TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
/// until the broker has a transaction coordinator (ADR 0026).
pub fn validate(
    records: &Bytes,
    max_message_bytes: i32,
    timestamps: Option<(i64, i64)>,
) -> Result<Vec<ValidBatch>> {
    validate_batches(records, max_message_bytes, timestamps, false)
}

/// [`validate`], taking transactional batches: the switch the produce path
/// turns on once transactional producers have a coordinator (ADR 0026).
// Called by the transaction coordinator's host (issue 32, next step).
#[cfg_attr(not(test), allow(dead_code))]
pub fn validate_transactional(
    records: &Bytes,
    max_message_bytes: i32,
    timestamps: Option<(i64, i64)>,
) -> Result<Vec<ValidBatch>> {
    validate_batches(records, max_message_bytes, timestamps, true)
}

fn validate_batches(
    records: &Bytes,
    max_message_bytes: i32,
    timestamps: Option<(i64, i64)>,
    transactional: bool,
) -> Result<Vec<ValidBatch>> {
    let mut out = Vec::new();
    let mut pos = 0usize;
    while pos < records.len() {
        let rest = &records[pos..];
        let header = parse_header(rest)?;
        let size = header.total_len();
        if size > max_message_bytes.max(0) as usize {
            return Err(HelixError::MessageTooLarge(size, max_message_bytes));
        }
        let batch = &rest[..size];
        helix_wal::batch::verify_crc(batch).map_err(|e| HelixError::CorruptBatch(e.to_string()))?;
        if header.record_count <= 0 || header.last_offset_delta != header.record_count - 1 {
            return Err(HelixError::InvalidRecord(format!(
                "record count {} does not match last offset delta {}",
                header.record_count, header.last_offset_delta
            )));
        }
        if header.is_control() {
            return Err(HelixError::InvalidRecord(
                "clients may not send control batches".into(),
            ));
        }
        if header.is_transactional() && !transactional {
            return Err(HelixError::TransactionsUnsupported);
        }
        // Decompresses only to count (a stream, nothing kept); the batch is
        // stored exactly as sent.
        let mut expected_delta = 0i32;
        let mut deltas_in_order = true;
        let mut out_of_bounds = None;
        let counted = super::records::walk(batch, |r| {
            deltas_in_order &= r.offset_delta == expected_delta;
            expected_delta = expected_delta.saturating_add(1);
            let ts = header.first_timestamp.saturating_add(r.timestamp_delta);
            // A record without a timestamp (-1, converted from magic 0) is
            // not checked, as Kafka's LogValidator skips it.
            if ts != NO_TIMESTAMP && timestamps.is_some_and(|(low, high)| ts < low || ts > high) {
                out_of_bounds.get_or_insert(ts);
            }
            true
        })?;
        if let Some(ts) = out_of_bounds {
            return Err(HelixError::InvalidTimestamp(ts));
        }
        if counted != header.record_count as usize {
            return Err(HelixError::InvalidRecord(format!(
                "batch declares {} records but holds {counted}",
                header.record_count
            )));
        }
        if !deltas_in_order {
            return Err(HelixError::InvalidRecord(
                "record offset deltas are not 0, 1, 2, ...".into(),
            ));
        }
        out.push(ValidBatch {
            bytes: records.slice(pos..pos + size),
        });
        pos += size;
    }
    if out.is_empty() {
        return Err(HelixError::CorruptBatch(
            "no record batch in the request".into(),
        ));
    }
    Ok(out)
}

/// Refuses a batch holding a record without a key, for a topic whose
/// `cleanup.policy` includes `compact` (Kafka's `LogValidator`:
/// INVALID_RECORD, "Compacted topic cannot accept message without key"),
/// naming every such record by its index in the batch as Kafka does, so
/// a client fails those and retries the rest. Walks the records as a
/// stream; the indexes kept are bounded by the batch's own record count.
/// Control batches carry keys of their own and are not checked (clients
/// may not send them).
pub fn require_keys(batch: &[u8]) -> Result<()> {
    let mut keyless = Vec::new();
    let mut index = 0i32;
    super::records::walk(batch, |r| {
        if !r.has_key {
            keyless.push(index);
        }
        index = index.saturating_add(1);
        true
    })?;
    match keyless.first() {
        Some(first) => Err(HelixError::InvalidRecords {
            message: format!(
                "Compacted topic cannot accept message without key ({} of the batch's records, the first at index {first})",
                keyless.len()
            ),
            indexes: keyless,
        }),
        None => Ok(()),
    }
}

/// message.timestamp.type=LogAppendTime: a copy of `batch` carrying the
/// broker's time `now_ms` (only such topics pay the copy and the CRC).
pub fn stamp_log_append_time(batch: &[u8], now_ms: i64) -> Result<Bytes> {
    let mut b = batch.to_vec();
    helix_wal::batch::set_log_append_time(&mut b, now_ms)
        .map_err(|e| HelixError::CorruptBatch(e.to_string()))?;
    Ok(Bytes::from(b))
}

/// In the batch at the start of `b` (any compression): the offset and
/// timestamp of the first record whose timestamp is >= `ts`. None when no
/// record matches or the batch cannot be read.
pub fn first_offset_at_or_after(b: &[u8], ts: i64) -> Option<(i64, i64)> {
    let h = parse_header(b).ok()?;
    if h.is_log_append_time() {
        // Every record's timestamp is the batch's append time.
        return (h.max_timestamp >= ts).then_some((h.base_offset, h.max_timestamp));
    }
    let mut found = None;
    super::records::walk(b, |r| {
        let record_ts = h.first_timestamp + r.timestamp_delta;
        if record_ts >= ts {
            found = Some((h.base_offset + i64::from(r.offset_delta), record_ts));
            return false;
        }
        true
    })
    .ok()?;
    found
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    fn varint(v: i64, out: &mut Vec<u8>) {
        let mut z = ((v << 1) ^ (v >> 63)) as u64;
        while z >= 0x80 {
            out.push((z as u8 & 0x7f) | 0x80);
            z >>= 7;
        }
        out.push(z as u8);
    }

    /// Builds an uncompressed v2 batch of `values` (test helper shared with
    /// the partition tests).
    pub(crate) fn make_batch(
        values: &[&[u8]],
        producer_id: i64,
        base_sequence: i32,
        ts: i64,
    ) -> Bytes {
        let mut records = Vec::new();
        for (i, v) in values.iter().enumerate() {
            let mut body = vec![0u8]; // attributes
            varint(i as i64 * 10, &mut body); // timestamp delta
            varint(i as i64, &mut body); // offset delta
            varint(-1, &mut body); // null key
            varint(v.len() as i64, &mut body);
            body.extend_from_slice(v);
            varint(0, &mut body); // no headers
            varint(body.len() as i64, &mut records);
            records.extend_from_slice(&body);
        }
        let mut b = Vec::new();
        b.extend_from_slice(&0i64.to_be_bytes());
        let len = (HEADER_LEN - helix_wal::batch::LOG_OVERHEAD + records.len()) as i32;
        b.extend_from_slice(&len.to_be_bytes());
        b.extend_from_slice(&(-1i32).to_be_bytes());
        b.push(2);
        b.extend_from_slice(&[0; 4]);
        b.extend_from_slice(&0i16.to_be_bytes());
        b.extend_from_slice(&(values.len() as i32 - 1).to_be_bytes());
        b.extend_from_slice(&ts.to_be_bytes());
        b.extend_from_slice(&(ts + (values.len() as i64 - 1) * 10).to_be_bytes());
        b.extend_from_slice(&producer_id.to_be_bytes());
        b.extend_from_slice(&0i16.to_be_bytes());
        b.extend_from_slice(&base_sequence.to_be_bytes());
        b.extend_from_slice(&(values.len() as i32).to_be_bytes());
        b.extend_from_slice(&records);
        let crc = helix_wal::batch::compute_crc(&b);
        b[17..21].copy_from_slice(&crc.to_be_bytes());
        Bytes::from(b)
    }

    fn hdr(v: &ValidBatch) -> BatchHeader {
        BatchHeader::parse(&v.bytes).expect("header")
    }

    #[test]
    fn valid_batch_passes_and_reports_its_header() {
        let b = make_batch(&[b"a", b"bb", b"ccc"], 7, 10, 1000);
        let v = validate(&b, 1 << 20, None).expect("valid");
        assert_eq!(v.len(), 1);
        assert_eq!(hdr(&v[0]).record_count, 3);
        assert_eq!(hdr(&v[0]).producer_id, 7);
        assert_eq!(hdr(&v[0]).last_sequence(), 12);
        assert_eq!(hdr(&v[0]).total_len(), b.len());
    }

    #[test]
    fn flipped_bit_is_a_crc_error() {
        let mut raw = make_batch(&[b"hello"], -1, -1, 0).to_vec();
        let last = raw.len() - 2;
        raw[last] ^= 0x01;
        let err = validate(&Bytes::from(raw), 1 << 20, None).expect_err("corrupt");
        assert!(matches!(err, HelixError::CorruptBatch(_)), "{err}");
    }

    #[test]
    fn wrong_record_count_is_invalid_record() {
        let mut raw = make_batch(&[b"x", b"y"], -1, -1, 0).to_vec();
        raw[57..61].copy_from_slice(&3i32.to_be_bytes());
        raw[23..27].copy_from_slice(&2i32.to_be_bytes());
        let crc = helix_wal::batch::compute_crc(&raw);
        raw[17..21].copy_from_slice(&crc.to_be_bytes());
        let err = validate(&Bytes::from(raw), 1 << 20, None).expect_err("bad count");
        assert!(matches!(err, HelixError::InvalidRecord(_)), "{err}");
    }

    #[test]
    fn oversized_batch_is_message_too_large() {
        let b = make_batch(&[&[0u8; 500]], -1, -1, 0);
        let err = validate(&b, 200, None).expect_err("too large");
        assert!(matches!(err, HelixError::MessageTooLarge(..)), "{err}");
    }

    #[test]
    fn truncated_batch_and_old_magic_are_corrupt() {
        let b = make_batch(&[b"abc"], -1, -1, 0);
        let cut = b.slice(..b.len() - 1);
        assert!(matches!(
            validate(&cut, 1 << 20, None),
            Err(HelixError::CorruptBatch(_))
        ));
        let mut raw = b.to_vec();
        raw[16] = 1;
        assert!(matches!(
            validate(&Bytes::from(raw), 1 << 20, None),
            Err(HelixError::CorruptBatch(_))
        ));
        assert!(matches!(
            validate(&Bytes::from_static(&[0u8; 10]), 1 << 20, None),
            Err(HelixError::CorruptBatch(_))
        ));
    }

    #[test]
    fn a_timestamp_lookup_finds_the_record_inside_the_batch() {
        let mut raw = make_batch(&[b"a", b"b", b"c"], -1, -1, 1000).to_vec();
        helix_wal::patch_batch_header(&mut raw, 50, 1).expect("patch");
        assert_eq!(first_offset_at_or_after(&raw, 1005), Some((51, 1010)));
        assert_eq!(first_offset_at_or_after(&raw, 0), Some((50, 1000)));
        assert_eq!(first_offset_at_or_after(&raw, 1021), None);
    }

    #[test]
    fn a_record_outside_the_timestamp_bounds_refuses_the_batch() {
        // Records at 1000, 1010, 1020.
        let b = make_batch(&[b"a", b"b", b"c"], -1, -1, 1000);
        assert!(validate(&b, 1 << 20, Some((1000, 1020))).is_ok());
        let err = validate(&b, 1 << 20, Some((1005, i64::MAX))).expect_err("too old");
        assert!(matches!(err, HelixError::InvalidTimestamp(1000)), "{err}");
        let err = validate(&b, 1 << 20, Some((0, 1015))).expect_err("too new");
        assert!(matches!(err, HelixError::InvalidTimestamp(1020)), "{err}");
    }

    #[test]
    fn log_append_time_is_stamped_under_a_valid_crc_and_found_by_time() {
        let b = make_batch(&[b"a", b"b", b"c"], -1, -1, 1000);
        let mut stamped = stamp_log_append_time(&b, 5_000).expect("stamped").to_vec();
        let v = validate(&Bytes::from(stamped.clone()), 1 << 20, None).expect("crc valid");
        let h = hdr(&v[0]);
        assert!(h.is_log_append_time());
        assert_eq!((h.first_timestamp, h.max_timestamp), (1000, 5_000));
        assert_eq!(h.compression(), 0);
        helix_wal::patch_batch_header(&mut stamped, 40, 1).expect("patch");
        // Every record has the append time: the batch's first record matches.
        assert_eq!(first_offset_at_or_after(&stamped, 1_500), Some((40, 5_000)));
        assert_eq!(first_offset_at_or_after(&stamped, 5_000), Some((40, 5_000)));
        assert_eq!(first_offset_at_or_after(&stamped, 5_001), None);
    }

    /// `b` with the transactional attribute set (CRC recomputed).
    pub(crate) fn transactional(b: &Bytes, epoch: i16) -> Bytes {
        let mut raw = b.to_vec();
        raw[21..23].copy_from_slice(&0x10i16.to_be_bytes());
        raw[51..53].copy_from_slice(&epoch.to_be_bytes());
        let crc = helix_wal::batch::compute_crc(&raw);
        raw[17..21].copy_from_slice(&crc.to_be_bytes());
        Bytes::from(raw)
    }

    #[test]
    fn a_transactional_batch_is_taken_only_behind_the_switch() {
        let b = transactional(&make_batch(&[b"t"], 4, 0, 0), 0);
        let err = validate(&b, 1 << 20, None).expect_err("refused");
        assert!(matches!(err, HelixError::TransactionsUnsupported), "{err}");
        let v = validate_transactional(&b, 1 << 20, None).expect("taken");
        assert!(hdr(&v[0]).is_transactional());
    }

    #[test]
    fn patching_keeps_the_crc_valid() {
        let mut raw = make_batch(&[b"abc"], -1, -1, 0).to_vec();
        helix_wal::patch_batch_header(&mut raw, 12345, 9).expect("patch");
        let v = validate(&Bytes::from(raw), 1 << 20, None).expect("still valid");
        assert_eq!(hdr(&v[0]).base_offset, 12345);
        assert_eq!(hdr(&v[0]).partition_leader_epoch, 9);
    }

    #[test]
    fn a_compacted_topic_refuses_a_record_without_a_key() {
        use kafka_protocol::records::{
            Compression, Record, RecordBatchEncoder, RecordEncodeOptions, TimestampType,
        };
        let record = |i: i64, key: Option<&'static [u8]>| Record {
            transactional: false,
            control: false,
            delete_horizon: false,
            partition_leader_epoch: 0,
            producer_id: -1,
            producer_epoch: -1,
            timestamp_type: TimestampType::Creation,
            offset: i,
            sequence: i as i32 - 1,
            timestamp: 1000,
            key: key.map(Bytes::from_static),
            value: Some(Bytes::from_static(b"v")),
            headers: Default::default(),
        };
        let encode = |records: &[Record], compression| {
            let mut buf = bytes::BytesMut::new();
            let options = RecordEncodeOptions {
                version: 2,
                compression,
            };
            RecordBatchEncoder::encode(&mut buf, records.iter(), &options).expect("encode");
            buf.freeze()
        };
        for compression in [Compression::None, Compression::Gzip] {
            let keyed = encode(&[record(0, Some(b"a")), record(1, Some(b""))], compression);
            require_keys(&keyed).expect("every record has a key (an empty one counts)");
            let mixed = encode(
                &[
                    record(0, None),
                    record(1, Some(b"a")),
                    record(2, None),
                    record(3, Some(b"b")),
                ],
                compression,
            );
            match require_keys(&mixed) {
                Err(HelixError::InvalidRecords { message, indexes }) => {
                    assert!(message.contains("without key"), "{message}");
                    assert_eq!(indexes, [0, 2], "every keyless record, by its index");
                }
                other => panic!("expected the keyless records named, got {other:?}"),
            }
        }
        assert!(require_keys(&make_batch(&[b"x"], -1, -1, 0)).is_err());
    }
}
