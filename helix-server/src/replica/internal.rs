//! Partitions that hold a state machine's entries instead of client data:
//! the controller (group 0) and the group and transaction coordinators'
//! partitions (`__consumer_offsets`, `__transaction_state`). Each
//! entry is one record (its value) in a v2 batch with no producer id, made
//! durable through the ordinary produce path (batcher, Raft, acks=all), and
//! read back in log order up to the high watermark. A service that serves
//! such partitions while it leads them follows their leadership with
//! [`follow_leadership`] and proposes through `internal_queue`.

use std::fmt::Display;
use std::sync::{Arc, Weak};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use helix_raft::Role;
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

/// A service that serves a state machine from the internal partitions it
/// leads (the group and transaction coordinators).
pub trait LeaderLoaded: Send + Sync + 'static {
    /// The service's name for one of its partitions.
    type Id: Copy + Display + Send + 'static;
    /// Rebuilds the partition's view from its acknowledged log and serves it.
    fn load(&self, id: Self::Id, partition: &Partition) -> Result<()>;
    /// Stops serving the partition (its leadership went).
    fn unload(&self, id: Self::Id);
}

/// Follows one internal partition's leadership: loads it when this node
/// leads and its log is acknowledged up to where it was at election (the
/// new term's no-op), unloads it when leadership goes. Ends with the
/// service or the partition.
pub async fn follow_leadership<S: LeaderLoaded>(
    service: Weak<S>,
    id: S::Id,
    partition: Arc<Partition>,
) {
    let mut leadership = partition.watch_leadership();
    let mut loaded_term = {
        let l = partition.leadership();
        (l.role == Role::Leader && partition.high_watermark() >= partition.log_end_offset())
            .then_some(l.term)
    };
    loop {
        let l = *leadership.borrow_and_update();
        let leads = l.role == Role::Leader;
        if leads && loaded_term != Some(l.term) {
            let end = partition.log_end_offset();
            let mut hw = partition.watch_high_watermark();
            let caught_up = tokio::select! {
                r = hw.wait_for(|h| *h >= end) => r.is_ok(),
                _ = leadership.changed() => false,
            };
            let still = partition.leadership();
            if caught_up && still.role == Role::Leader && still.term == l.term {
                let Some(s) = service.upgrade() else { return };
                match s.load(id, &partition) {
                    Ok(()) => loaded_term = Some(l.term),
                    Err(e) => {
                        tracing::error!(partition = %id, error = %e, "loading an internal partition failed; retrying");
                        drop(s);
                        tokio::time::sleep(Duration::from_secs(1)).await;
                    }
                }
            }
            continue;
        }
        if !leads && loaded_term.take().is_some() {
            let Some(s) = service.upgrade() else { return };
            s.unload(id);
        }
        if leadership.changed().await.is_err() {
            return;
        }
    }
}
