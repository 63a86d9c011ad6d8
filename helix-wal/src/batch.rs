//! Kafka v2 record-batch headers: parsing, validation and in-place patching.
//!
//! The WAL stores batches exactly as clients sent them, so it only ever looks
//! at the 61-byte v2 header. The broker reuses these helpers to validate
//! Produce requests and to patch `baseOffset` / `partitionLeaderEpoch` at apply
//! time; neither field is covered by the batch CRC, so patching never
//! re-encodes. The CRC-32C covers everything from `attributes` to the end.

use thiserror::Error;

/// Size of the fixed v2 batch header (offsets 0..61).
pub const HEADER_LEN: usize = 61;
/// Bytes before the `batchLength` count starts (baseOffset + batchLength).
pub const LOG_OVERHEAD: usize = 12;
/// Smallest legal `batchLength`: the header after the length field, no records.
pub const MIN_BATCH_LENGTH: i32 = (HEADER_LEN - LOG_OVERHEAD) as i32;
/// The only magic the WAL stores.
pub const MAGIC_V2: i8 = 2;

const BASE_OFFSET: usize = 0;
const BATCH_LENGTH: usize = 8;
const LEADER_EPOCH: usize = 12;
const MAGIC: usize = 16;
const CRC: usize = 17;
const ATTRIBUTES: usize = 21;
const LAST_OFFSET_DELTA: usize = 23;
const FIRST_TIMESTAMP: usize = 27;
const MAX_TIMESTAMP: usize = 35;
const PRODUCER_ID: usize = 43;
const PRODUCER_EPOCH: usize = 51;
const BASE_SEQUENCE: usize = 53;
const RECORD_COUNT: usize = 57;

const ATTR_COMPRESSION_MASK: i16 = 0x07;
const ATTR_TRANSACTIONAL: i16 = 0x10;
const ATTR_CONTROL: i16 = 0x20;
const ATTR_LOG_APPEND_TIME: i16 = 0x08;
/// KIP-534: `firstTimestamp` holds the batch's delete horizon (set by a
/// compacting cleaner), after which its tombstones and markers may go.
const ATTR_DELETE_HORIZON: i16 = 0x40;

/// Why a byte range is not a well-formed v2 batch.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum BatchError {
    #[error("{available} bytes left, a batch header needs {HEADER_LEN}")]
    ShortHeader { available: usize },
    #[error("batchLength {length} is below the minimum {MIN_BATCH_LENGTH}")]
    LengthTooSmall { length: i32 },
    #[error("batch declares {declared} bytes but only {available} are present")]
    Truncated { declared: usize, available: usize },
    #[error("magic {magic}, only v2 (magic 2) batches are stored")]
    BadMagic { magic: i8 },
    #[error("lastOffsetDelta {delta} is negative")]
    BadLastOffsetDelta { delta: i32 },
    #[error("CRC-32C mismatch: header says {stored:#010x}, content has {computed:#010x}")]
    CrcMismatch { stored: u32, computed: u32 },
    #[error("a batch of {len} bytes is larger than a batch can declare")]
    TooLarge { len: usize },
}

/// The fixed fields of a v2 record batch header, as stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchHeader {
    pub base_offset: i64,
    /// Bytes after the `batchLength` field; the whole batch is `12 + batch_length`.
    pub batch_length: i32,
    pub partition_leader_epoch: i32,
    pub magic: i8,
    pub crc: u32,
    pub attributes: i16,
    pub last_offset_delta: i32,
    pub first_timestamp: i64,
    pub max_timestamp: i64,
    pub producer_id: i64,
    pub producer_epoch: i16,
    pub base_sequence: i32,
    pub record_count: i32,
}

fn be_i64(b: &[u8], at: usize) -> i64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[at..at + 8]);
    i64::from_be_bytes(a)
}
fn be_i32(b: &[u8], at: usize) -> i32 {
    let mut a = [0u8; 4];
    a.copy_from_slice(&b[at..at + 4]);
    i32::from_be_bytes(a)
}
fn be_i16(b: &[u8], at: usize) -> i16 {
    i16::from_be_bytes([b[at], b[at + 1]])
}

impl BatchHeader {
    /// Parses the 61-byte header at the start of `bytes`. Checks only that the
    /// header is present; see [`BatchHeader::validate`] for the rest.
    pub fn parse(bytes: &[u8]) -> Result<BatchHeader, BatchError> {
        if bytes.len() < HEADER_LEN {
            return Err(BatchError::ShortHeader {
                available: bytes.len(),
            });
        }
        Ok(BatchHeader {
            base_offset: be_i64(bytes, BASE_OFFSET),
            batch_length: be_i32(bytes, BATCH_LENGTH),
            partition_leader_epoch: be_i32(bytes, LEADER_EPOCH),
            magic: bytes[MAGIC] as i8,
            crc: be_i32(bytes, CRC) as u32,
            attributes: be_i16(bytes, ATTRIBUTES),
            last_offset_delta: be_i32(bytes, LAST_OFFSET_DELTA),
            first_timestamp: be_i64(bytes, FIRST_TIMESTAMP),
            max_timestamp: be_i64(bytes, MAX_TIMESTAMP),
            producer_id: be_i64(bytes, PRODUCER_ID),
            producer_epoch: be_i16(bytes, PRODUCER_EPOCH),
            base_sequence: be_i32(bytes, BASE_SEQUENCE),
            record_count: be_i32(bytes, RECORD_COUNT),
        })
    }

    /// Parses and checks the structural fields: length, magic, last offset
    /// delta, and that the whole batch fits in `bytes`. Does not check the CRC.
    pub fn parse_checked(bytes: &[u8]) -> Result<BatchHeader, BatchError> {
        let header = BatchHeader::parse(bytes)?;
        header.validate(bytes.len())?;
        Ok(header)
    }

    /// Parses a header and checks it against `available` bytes of batch,
    /// when only the header itself is at hand.
    pub fn parse_checked_len(header: &[u8], available: usize) -> Result<BatchHeader, BatchError> {
        let h = BatchHeader::parse(header)?;
        h.validate(available)?;
        Ok(h)
    }

    /// Structural checks against `available` bytes starting at this header.
    pub fn validate(&self, available: usize) -> Result<(), BatchError> {
        if self.batch_length < MIN_BATCH_LENGTH {
            return Err(BatchError::LengthTooSmall {
                length: self.batch_length,
            });
        }
        if self.total_len() > available {
            return Err(BatchError::Truncated {
                declared: self.total_len(),
                available,
            });
        }
        if self.magic != MAGIC_V2 {
            return Err(BatchError::BadMagic { magic: self.magic });
        }
        if self.last_offset_delta < 0 {
            return Err(BatchError::BadLastOffsetDelta {
                delta: self.last_offset_delta,
            });
        }
        Ok(())
    }

    /// The whole batch length in bytes, header included. Only meaningful
    /// after [`BatchHeader::validate`] (a negative length reads as 12).
    pub fn total_len(&self) -> usize {
        LOG_OVERHEAD + usize::try_from(self.batch_length).unwrap_or(0)
    }

    /// Offset of the last record (base + lastOffsetDelta).
    pub fn last_offset(&self) -> i64 {
        self.base_offset + i64::from(self.last_offset_delta)
    }

    /// The offset just after this batch.
    pub fn next_offset(&self) -> i64 {
        self.last_offset() + 1
    }

    /// Compression codec id (0 none, 1 gzip, 2 snappy, 3 lz4, 4 zstd).
    pub fn compression(&self) -> i16 {
        self.attributes & ATTR_COMPRESSION_MASK
    }

    pub fn is_transactional(&self) -> bool {
        self.attributes & ATTR_TRANSACTIONAL != 0
    }

    pub fn is_control(&self) -> bool {
        self.attributes & ATTR_CONTROL != 0
    }

    /// The records carry the broker's append time (every record's
    /// timestamp is `max_timestamp`), not the producer's.
    #[must_use]
    pub fn is_log_append_time(&self) -> bool {
        self.attributes & ATTR_LOG_APPEND_TIME != 0
    }

    /// The delete horizon a cleaner set on this batch (KIP-534): when the
    /// attribute bit is set, `firstTimestamp` holds it.
    #[must_use]
    pub fn delete_horizon_ms(&self) -> Option<i64> {
        (self.attributes & ATTR_DELETE_HORIZON != 0).then_some(self.first_timestamp)
    }

    /// Sequence number of the batch's last record (wrapping as Kafka does);
    /// a negative base sequence (no idempotence) is returned as is.
    pub fn last_sequence(&self) -> i32 {
        if self.base_sequence < 0 {
            return self.base_sequence;
        }
        let last = i64::from(self.base_sequence) + i64::from(self.last_offset_delta);
        (last % (i64::from(i32::MAX) + 1)) as i32
    }
}

/// CRC-32C of a batch's covered range (`attributes` to the end).
/// `batch` must hold exactly one whole batch of at least [`HEADER_LEN`] bytes.
pub fn compute_crc(batch: &[u8]) -> u32 {
    crc32c::crc32c(&batch[ATTRIBUTES.min(batch.len())..])
}

/// Verifies the CRC-32C of one whole batch (exactly `12 + batchLength` bytes).
pub fn verify_crc(batch: &[u8]) -> Result<(), BatchError> {
    let header = BatchHeader::parse(batch)?;
    let computed = compute_crc(batch);
    if computed != header.crc {
        return Err(BatchError::CrcMismatch {
            stored: header.crc,
            computed,
        });
    }
    Ok(())
}

/// Overwrites `baseOffset` and `partitionLeaderEpoch` in place. Neither is
/// covered by the CRC, so the batch stays valid.
pub fn patch_batch_header(
    batch: &mut [u8],
    base_offset: i64,
    partition_leader_epoch: i32,
) -> Result<(), BatchError> {
    if batch.len() < HEADER_LEN {
        return Err(BatchError::ShortHeader {
            available: batch.len(),
        });
    }
    batch[BASE_OFFSET..BASE_OFFSET + 8].copy_from_slice(&base_offset.to_be_bytes());
    batch[LEADER_EPOCH..LEADER_EPOCH + 4].copy_from_slice(&partition_leader_epoch.to_be_bytes());
    Ok(())
}

/// Marks the whole batch `batch` as carrying the broker's append time and
/// sets its `maxTimestamp` to `append_time_ms` (Kafka's LogAppendTime;
/// `firstTimestamp` and the records stay as sent). Both fields are under the
/// CRC, which is computed again.
pub fn set_log_append_time(batch: &mut [u8], append_time_ms: i64) -> Result<(), BatchError> {
    let h = BatchHeader::parse_checked(batch)?;
    let batch = &mut batch[..h.total_len()];
    let attributes = h.attributes | ATTR_LOG_APPEND_TIME;
    batch[ATTRIBUTES..ATTRIBUTES + 2].copy_from_slice(&attributes.to_be_bytes());
    batch[MAX_TIMESTAMP..MAX_TIMESTAMP + 8].copy_from_slice(&append_time_ms.to_be_bytes());
    let crc = compute_crc(batch);
    batch[CRC..CRC + 4].copy_from_slice(&crc.to_be_bytes());
    Ok(())
}

/// A batch with the header fields of `batch` (a whole batch) and `records`
/// as its records section, compressed with `codec` (0-4): the length, the
/// compression bits of the attributes and the CRC are set to match; offsets,
/// timestamps, producer fields and the record count stay (what a broker
/// that recompresses keeps, as Kafka does).
pub fn with_records(batch: &[u8], codec: i16, records: &[u8]) -> Result<Vec<u8>, BatchError> {
    let h = BatchHeader::parse_checked(batch)?;
    let length = i32::try_from(HEADER_LEN - LOG_OVERHEAD + records.len()).map_err(|_| {
        BatchError::TooLarge {
            len: HEADER_LEN + records.len(),
        }
    })?;
    let mut out = Vec::with_capacity(HEADER_LEN + records.len());
    out.extend_from_slice(&batch[..HEADER_LEN]);
    out.extend_from_slice(records);
    out[BATCH_LENGTH..BATCH_LENGTH + 4].copy_from_slice(&length.to_be_bytes());
    let attributes = (h.attributes & !ATTR_COMPRESSION_MASK) | (codec & ATTR_COMPRESSION_MASK);
    out[ATTRIBUTES..ATTRIBUTES + 2].copy_from_slice(&attributes.to_be_bytes());
    let crc = compute_crc(&out);
    out[CRC..CRC + 4].copy_from_slice(&crc.to_be_bytes());
    Ok(out)
}

/// An uncompressed batch with the header of `batch` (a whole batch) and
/// `records` (`record_count` whole, uncompressed records) as its records
/// section: what a compacting cleaner writes. Base offset, lastOffsetDelta,
/// maxTimestamp and the producer fields stay; the length, the record count,
/// the codec bits (none) and the CRC are set. With `delete_horizon_ms`, the
/// KIP-534 bit is set and `firstTimestamp` holds the horizon (the caller
/// rebased the records' timestamp deltas on it).
pub fn with_cleaned_records(
    batch: &[u8],
    records: &[u8],
    record_count: i32,
    delete_horizon_ms: Option<i64>,
) -> Result<Vec<u8>, BatchError> {
    let mut out = with_records(batch, 0, records)?;
    out[RECORD_COUNT..RECORD_COUNT + 4].copy_from_slice(&record_count.to_be_bytes());
    if let Some(horizon) = delete_horizon_ms {
        let h = BatchHeader::parse(&out)?;
        let attributes = h.attributes | ATTR_DELETE_HORIZON;
        out[ATTRIBUTES..ATTRIBUTES + 2].copy_from_slice(&attributes.to_be_bytes());
        out[FIRST_TIMESTAMP..FIRST_TIMESTAMP + 8].copy_from_slice(&horizon.to_be_bytes());
    }
    let crc = compute_crc(&out);
    out[CRC..CRC + 4].copy_from_slice(&crc.to_be_bytes());
    Ok(out)
}

/// Iterates the batches of a buffer holding whole, back-to-back v2 batches,
/// yielding `(header, byte range)`. Stops with an error at the first batch
/// that is not structurally valid.
pub struct Batches<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Batches<'a> {
    pub fn new(bytes: &'a [u8]) -> Self {
        Batches { bytes, at: 0 }
    }

    /// Byte position of the next batch to be yielded.
    pub fn position(&self) -> usize {
        self.at
    }
}

impl Iterator for Batches<'_> {
    type Item = Result<(BatchHeader, std::ops::Range<usize>), BatchError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.at >= self.bytes.len() {
            return None;
        }
        let rest = &self.bytes[self.at..];
        match BatchHeader::parse_checked(rest) {
            Ok(h) => {
                let range = self.at..self.at + h.total_len();
                self.at = range.end;
                Some(Ok((h, range)))
            }
            Err(e) => {
                self.at = self.bytes.len();
                Some(Err(e))
            }
        }
    }
}

/// Builds a valid v2 batch with `records` opaque records of `payload` bytes in
/// total. Used by tests and benchmarks; the records are not decodable Kafka
/// records, only the header is meaningful.
#[doc(hidden)]
pub fn build_test_batch(
    base_offset: i64,
    record_count: i32,
    first_timestamp: i64,
    max_timestamp: i64,
    payload: &[u8],
) -> Vec<u8> {
    let mut b = vec![0u8; HEADER_LEN];
    b.extend_from_slice(payload);
    let batch_length = (b.len() - LOG_OVERHEAD) as i32;
    b[BATCH_LENGTH..BATCH_LENGTH + 4].copy_from_slice(&batch_length.to_be_bytes());
    b[MAGIC] = MAGIC_V2 as u8;
    let delta = record_count.max(1) - 1;
    b[LAST_OFFSET_DELTA..LAST_OFFSET_DELTA + 4].copy_from_slice(&delta.to_be_bytes());
    b[FIRST_TIMESTAMP..FIRST_TIMESTAMP + 8].copy_from_slice(&first_timestamp.to_be_bytes());
    b[MAX_TIMESTAMP..MAX_TIMESTAMP + 8].copy_from_slice(&max_timestamp.to_be_bytes());
    b[PRODUCER_ID..PRODUCER_ID + 8].copy_from_slice(&(-1i64).to_be_bytes());
    b[PRODUCER_EPOCH..PRODUCER_EPOCH + 2].copy_from_slice(&(-1i16).to_be_bytes());
    b[BASE_SEQUENCE..BASE_SEQUENCE + 4].copy_from_slice(&(-1i32).to_be_bytes());
    b[RECORD_COUNT..RECORD_COUNT + 4].copy_from_slice(&record_count.max(1).to_be_bytes());
    let crc = compute_crc(&b);
    b[CRC..CRC + 4].copy_from_slice(&crc.to_be_bytes());
    b[BASE_OFFSET..BASE_OFFSET + 8].copy_from_slice(&base_offset.to_be_bytes());
    b
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_reads_every_field() {
        let b = build_test_batch(42, 3, 1000, 1005, b"abcdef");
        let h = BatchHeader::parse_checked(&b).unwrap();
        assert_eq!(h.base_offset, 42);
        assert_eq!(h.total_len(), b.len());
        assert_eq!(h.magic, 2);
        assert_eq!(h.last_offset_delta, 2);
        assert_eq!(h.last_offset(), 44);
        assert_eq!(h.first_timestamp, 1000);
        assert_eq!(h.max_timestamp, 1005);
        assert_eq!(h.producer_id, -1);
        assert_eq!(h.producer_epoch, -1);
        assert_eq!(h.base_sequence, -1);
        assert_eq!(h.record_count, 3);
        verify_crc(&b).unwrap();
    }

    #[test]
    fn patch_keeps_crc_valid() {
        let mut b = build_test_batch(0, 1, 1, 1, b"xyz");
        patch_batch_header(&mut b, 7_000_000_000, 12).unwrap();
        let h = BatchHeader::parse(&b).unwrap();
        assert_eq!(h.base_offset, 7_000_000_000);
        assert_eq!(h.partition_leader_epoch, 12);
        verify_crc(&b).unwrap();
    }

    #[test]
    fn crc_detects_a_flipped_payload_bit() {
        let mut b = build_test_batch(0, 1, 1, 1, b"payload");
        let last = b.len() - 1;
        b[last] ^= 0x10;
        assert!(matches!(
            verify_crc(&b),
            Err(BatchError::CrcMismatch { .. })
        ));
    }

    #[test]
    fn structural_errors_are_typed() {
        let b = build_test_batch(0, 1, 1, 1, b"p");
        assert_eq!(
            BatchHeader::parse(&b[..10]),
            Err(BatchError::ShortHeader { available: 10 })
        );
        let mut wrong_magic = b.clone();
        wrong_magic[MAGIC] = 1;
        assert_eq!(
            BatchHeader::parse_checked(&wrong_magic),
            Err(BatchError::BadMagic { magic: 1 })
        );
        let mut short = b.clone();
        short[BATCH_LENGTH..BATCH_LENGTH + 4].copy_from_slice(&10i32.to_be_bytes());
        assert_eq!(
            BatchHeader::parse_checked(&short),
            Err(BatchError::LengthTooSmall { length: 10 })
        );
        assert!(matches!(
            BatchHeader::parse_checked(&b[..b.len() - 1]),
            Err(BatchError::Truncated { .. })
        ));
        let mut neg = b.clone();
        neg[LAST_OFFSET_DELTA..LAST_OFFSET_DELTA + 4].copy_from_slice(&(-1i32).to_be_bytes());
        assert_eq!(
            BatchHeader::parse_checked(&neg),
            Err(BatchError::BadLastOffsetDelta { delta: -1 })
        );
    }

    #[test]
    fn a_cleaned_batch_keeps_its_offsets_and_gets_a_valid_crc() {
        let b = build_test_batch(40, 5, 1000, 1040, b"five records");
        let out = with_cleaned_records(&b, b"two", 2, None).unwrap();
        let h = BatchHeader::parse_checked(&out).unwrap();
        assert_eq!(
            (h.base_offset, h.last_offset(), h.record_count),
            (40, 44, 2)
        );
        assert_eq!((h.first_timestamp, h.max_timestamp), (1000, 1040));
        assert_eq!(h.delete_horizon_ms(), None);
        assert_eq!(&out[HEADER_LEN..], b"two");
        verify_crc(&out).unwrap();

        let out = with_cleaned_records(&b, b"one", 1, Some(99_000)).unwrap();
        let h = BatchHeader::parse_checked(&out).unwrap();
        assert_eq!(h.delete_horizon_ms(), Some(99_000));
        assert_eq!(h.first_timestamp, 99_000);
        verify_crc(&out).unwrap();
    }

    #[test]
    fn batches_iterates_back_to_back() {
        let mut buf = build_test_batch(0, 2, 1, 1, b"aa");
        buf.extend(build_test_batch(2, 1, 1, 1, b"b"));
        let got: Vec<_> = Batches::new(&buf)
            .map(|r| r.unwrap().0.base_offset)
            .collect();
        assert_eq!(got, vec![0, 2]);
    }
}
