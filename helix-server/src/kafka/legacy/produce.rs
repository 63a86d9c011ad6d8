//! Produce v0-v2: a magic 0/1 message set becomes one v2 record batch, as
//! Kafka 3.x's `LogValidator` converts it (`convertAndAssignOffsetsNonCompressed`
//! for plain messages, `buildRecordsAndAssignOffsets` for a wrapper).
//!
//! What Kafka keeps and what it sets:
//! - every message, in order, with key and value; offsets are assigned
//!   later, as for any batch (the producer's are ignored);
//! - magic 1 timestamps as sent; magic 0 has none: NO_TIMESTAMP (-1);
//! - CreateTime in the batch (a LogAppendTime topic stamps it afterwards,
//!   like any batch);
//! - the wrapper's codec (the topic's `compression.type` then applies as for
//!   any batch); a compressed set must be exactly one wrapper;
//! - no producer id, epoch or sequence: idempotence does not exist before v3.

use bytes::{Bytes, BytesMut};
use kafka_protocol::records::legacy::{self, LegacyEntry};
use kafka_protocol::records::{
    Compression, NO_PARTITION_LEADER_EPOCH, NO_PRODUCER_EPOCH, NO_PRODUCER_ID, Record,
    RecordBatchEncoder, RecordEncodeOptions, TimestampType,
};

use super::MAX_INFLATED_SET;
use crate::error::{HelixError, Result};
use crate::replica::recompress::{TopicCompression, recompress};

/// The magic of the v2 record batch format.
const MAGIC_V2: i8 = 2;

/// Whether `records` (a Produce v0-v2 partition's data) is a legacy message
/// set; v0-v2 requests may also carry v2 batches, which Kafka accepts.
pub fn is_legacy(records: &[u8]) -> bool {
    legacy::magic_of(records).is_some_and(|m| m < MAGIC_V2)
}

/// The v2 batch holding every message of `set`, compressed with the
/// wrapper's codec; `max_bytes` bounds the compressed result.
pub fn to_v2_batch(set: &Bytes, max_bytes: usize) -> Result<Bytes> {
    let decoded = legacy::decode_message_set(set, MAX_INFLATED_SET)?;
    let entries = decoded.entries;
    let Some(first) = entries.first() else {
        return Err(HelixError::InvalidRecord(
            "the message set holds no whole message".into(),
        ));
    };
    let codec = first.compression;
    if entries.len() > 1 && entries.iter().any(|e| e.compression != Compression::None) {
        return Err(HelixError::InvalidRecord(
            "a compressed message set must be exactly one wrapper".into(),
        ));
    }
    if entries.iter().any(|e| e.magic != first.magic) {
        return Err(HelixError::InvalidRecord(
            "a message set mixes magic 0 and magic 1".into(),
        ));
    }
    let records = records_of(&entries)?;
    let mut out = BytesMut::new();
    RecordBatchEncoder::encode(
        &mut out,
        &records,
        &RecordEncodeOptions {
            version: MAGIC_V2,
            compression: Compression::None,
        },
    )
    .map_err(|e| HelixError::InvalidRecord(format!("converting to a v2 batch: {e}")))?;
    let plain = out.freeze();
    let target = match codec {
        Compression::None => return Ok(plain),
        Compression::Gzip => TopicCompression::Gzip(-1),
        Compression::Snappy => TopicCompression::Snappy,
        // 9: Kafka's default LZ4 level.
        Compression::Lz4 => TopicCompression::Lz4(9),
        Compression::Zstd => {
            return Err(HelixError::InvalidRecord(
                "zstd in a legacy message set".into(),
            ));
        }
    };
    recompress(&plain, target, max_bytes)
}

/// The messages as v2 records with offsets 0, 1, ... (one batch).
fn records_of(entries: &[LegacyEntry]) -> Result<Vec<Record>> {
    let messages = entries.iter().flat_map(|e| &e.messages);
    let mut records = Vec::new();
    for (i, m) in messages.enumerate() {
        let offset = i32::try_from(i)
            .map_err(|_| HelixError::InvalidRecord("more than 2^31 messages".into()))?;
        records.push(Record {
            transactional: false,
            control: false,
            delete_horizon: false,
            partition_leader_epoch: NO_PARTITION_LEADER_EPOCH,
            producer_id: NO_PRODUCER_ID,
            producer_epoch: NO_PRODUCER_EPOCH,
            // The encoder starts a new batch wherever offset - sequence
            // changes; this keeps it constant so all records share one
            // batch whose base sequence is NO_SEQUENCE (-1).
            sequence: offset - 1,
            timestamp_type: TimestampType::Creation,
            offset: i64::from(offset),
            timestamp: m.timestamp,
            key: m.key.clone(),
            value: m.value.clone(),
            headers: Default::default(),
        });
    }
    Ok(records)
}
