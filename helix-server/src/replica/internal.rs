//! Partitions that hold a state machine's entries instead of client data:
//! the controller (group 0) and the group coordinator's partitions. Each
//! entry is one record (its value) in a v2 batch with no producer id, made
//! durable through the ordinary produce path (batcher, Raft, acks=all), and
//! read back in log order up to the high watermark.

use std::time::Duration;

use bytes::{Bytes, BytesMut};
use kafka_protocol::records::{
    Compression, Record, RecordBatchDecoder, RecordBatchEncoder, RecordEncodeOptions, TimestampType,
};
use tokio::sync::oneshot;

use super::{Partition, batch};
use crate::batcher::{PendingProduce, ProduceOutcome};
use crate::budget::Backpressure;
use crate::error::{HelixError, Result};
use crate::offset::Offset;

/// Bytes read per step while replaying.
const READ_BYTES: usize = 1 << 20;

/// `value` as a one-record v2 batch (offsets and epoch patched at apply).
pub fn value_batch(value: &Bytes) -> Result<Bytes> {
    let record = Record {
        transactional: false,
        control: false,
        delete_horizon: false,
        partition_leader_epoch: -1,
        producer_id: -1,
        producer_epoch: -1,
        timestamp_type: TimestampType::Creation,
        offset: 0,
        sequence: -1,
        timestamp: crate::clock::now_ms(),
        key: None,
        value: Some(value.clone()),
        headers: Default::default(),
    };
    let mut buf = BytesMut::new();
    let options = RecordEncodeOptions {
        version: 2,
        compression: Compression::None,
    };
    RecordBatchEncoder::encode(&mut buf, [&record], &options)
        .map_err(|e| HelixError::CorruptState(format!("encoding an internal batch: {e}")))?;
    Ok(buf.freeze())
}

/// Queues `value` to `partition` (acks=all), taking room in the node's
/// produce budget for up to `room_timeout`; the receiver answers once the
/// entry is acknowledged (or failed).
pub async fn append(
    partition: &Partition,
    backpressure: &Backpressure,
    value: &Bytes,
    room_timeout: Duration,
) -> Result<oneshot::Receiver<ProduceOutcome>> {
    partition.check_leader(-1)?;
    let batch = value_batch(value)?;
    let batches: Vec<Bytes> = batch::validate(&batch, i32::MAX, None)?
        .into_iter()
        .map(|b| b.bytes)
        .collect();
    let room = backpressure
        .acquire_within(batch.len(), room_timeout)
        .await?;
    let (reply, rx) = oneshot::channel();
    partition
        .produce(PendingProduce::new(
            batches,
            batch.len(),
            -1,
            Some(reply),
            room,
        ))
        .await?;
    Ok(rx)
}

/// Calls `visit(offset, value)` for every record from offset `from` up to
/// `end` (at most the high watermark), in order. Returns the offset after
/// the last record visited.
pub fn for_each_value(
    partition: &Partition,
    from: i64,
    end: i64,
    mut visit: impl FnMut(i64, Bytes) -> Result<()>,
) -> Result<i64> {
    let mut next = from.max(partition.log_start_offset().0);
    while next < end {
        let mut chunk = partition.read(Offset(next), READ_BYTES)?;
        if chunk.is_empty() {
            break;
        }
        let sets = RecordBatchDecoder::decode_all(&mut chunk)
            .map_err(|e| HelixError::CorruptState(format!("internal batch at {next}: {e}")))?;
        let before = next;
        for record in sets.into_iter().flat_map(|set| set.records) {
            if record.offset < next || record.offset >= end {
                continue;
            }
            next = record.offset + 1;
            visit(record.offset, record.value.unwrap_or_default())?;
        }
        if next == before {
            return Err(HelixError::CorruptState(format!(
                "no progress reading internal records at offset {next}"
            )));
        }
    }
    Ok(next)
}
