//! Fetch v0-v3: stored v2 batches down-converted to the reader's message
//! format, as Kafka 3.9 does (`FetchResponse` version rules,
//! `RecordsUtil.downConvert`, `LazyDownConversionRecords`):
//!
//! - Fetch v0-v1 get magic 0, v2-v3 magic 1;
//! - control batches are left out; zstd batches cannot be converted
//!   (UNSUPPORTED_COMPRESSION_TYPE for the partition);
//! - each batch becomes one wrapper in the batch's own codec (compressed
//!   batches: all their records, a wrapper must be whole) or one message per
//!   record (uncompressed: only records at or past the fetch offset);
//! - headers are dropped (magic 0/1 cannot hold them); magic 0 drops
//!   timestamps; magic 1 keeps each record's, and a LogAppendTime batch's
//!   time (its max timestamp) goes to every message;
//! - the answer is at most as large as the bytes read, or the first
//!   converted message set if that is larger (Kafka sizes the lazily
//!   converted records the same way); the cut leaves a partial last message,
//!   which old consumers skip and fetch again.

use bytes::{Bytes, BytesMut};
use kafka_protocol::records::legacy::{LegacyEncodeOptions, LegacyMessage, encode_message_set};
use kafka_protocol::records::{Compression, RecordBatchDecoder, TimestampType};

use crate::error::{HelixError, Result};
use crate::replica::batch::parse_header;

/// The highest Fetch version whose readers need a down-conversion.
pub const LAST_CONVERTING_FETCH: i16 = 3;

/// Codec id of zstd in a batch's attributes.
const ZSTD: i16 = 4;

/// The message format a Fetch `version` reader reads; None from v4 (v2).
pub fn reader_magic(version: i16) -> Option<i8> {
    match version {
        ..=1 => Some(0),
        2..=LAST_CONVERTING_FETCH => Some(1),
        _ => None,
    }
}

/// `stored` (whole v2 batches read from `fetch_offset`) as a magic `magic`
/// message set, cut as described in the module comment.
pub fn down_convert(stored: &Bytes, magic: i8, fetch_offset: i64) -> Result<Bytes> {
    let mut out = BytesMut::new();
    let mut first_set_end = 0usize;
    let mut pos = 0usize;
    while pos < stored.len() {
        let header = parse_header(&stored[pos..])?;
        let end = pos + header.total_len();
        let batch = stored.slice(pos..end);
        pos = end;
        if header.is_control() {
            continue;
        }
        if header.compression() == ZSTD {
            return Err(HelixError::UnsupportedCompressionType(
                "zstd batches cannot be down-converted for Fetch v0-v3 readers".into(),
            ));
        }
        convert_batch(&batch, magic, fetch_offset, &mut out)?;
        if first_set_end == 0 {
            first_set_end = out.len();
        }
    }
    out.truncate(stored.len().max(first_set_end));
    Ok(out.freeze())
}

/// Appends one v2 batch's records to `out` as legacy messages.
fn convert_batch(batch: &Bytes, magic: i8, fetch_offset: i64, out: &mut BytesMut) -> Result<()> {
    let header = parse_header(batch)?;
    let mut buf = batch.clone();
    let set = RecordBatchDecoder::decode(&mut buf)
        .map_err(|e| HelixError::CorruptBatch(format!("down-converting: {e}")))?;
    let compressed = set.compression != Compression::None;
    let messages: Vec<LegacyMessage> = set
        .records
        .into_iter()
        .filter(|r| compressed || r.offset >= fetch_offset)
        .map(|r| LegacyMessage {
            offset: r.offset,
            timestamp: r.timestamp,
            timestamp_type: r.timestamp_type,
            key: r.key,
            value: r.value,
        })
        .collect();
    let timestamp_type = if header.is_log_append_time() {
        TimestampType::LogAppend
    } else {
        TimestampType::Creation
    };
    let options = LegacyEncodeOptions {
        magic,
        compression: set.compression,
        timestamp_type,
        log_append_time: header.max_timestamp,
    };
    encode_message_set(out, &messages, &options)?;
    Ok(())
}
