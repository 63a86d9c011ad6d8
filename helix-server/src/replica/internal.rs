//! Partitions that hold a state machine's entries instead of client data:
//! the controller (group 0) and the group and transaction coordinators'
//! partitions (`__consumer_offsets`, `__transaction_state`). Each
//! entry is one record (its value) in a v2 batch with no producer id, made
//! durable through the ordinary produce path (batcher, Raft, acks=all), and
//! read back in log order up to the high watermark. A service that serves
//! such partitions while it leads them follows their leadership with
//! [`serve`] and proposes through `internal_queue`.
//!
//! The group coordinator also appends entries on behalf of a transactional
//! producer (TxnOffsetCommit: a transactional batch with the producer's id
//! and epoch and no sequence, as Kafka's coordinator appends them), and the
//! transaction coordinator writes its markers (control batches) there:
//! [`for_each_entry`] reads both back; [`for_each_value`] skips markers.

use std::fmt::Display;
use std::sync::{Arc, Weak};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use helix_raft::Role;
use kafka_protocol::records::{
    Compression, Record, RecordBatchDecoder, RecordBatchEncoder, RecordEncodeOptions, TimestampType,
};
use tokio::sync::oneshot;

use super::markers::Marker;
use super::{Partition, batch};
use crate::batcher::{PendingProduce, ProduceOutcome};
use crate::budget::Backpressure;
use crate::error::{HelixError, Result};
use crate::offset::Offset;

/// Bytes read per step while replaying.
const READ_BYTES: usize = 1 << 20;

/// The transactional producer an entry is appended for (TxnOffsetCommit).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TxnProducer {
    pub producer_id: i64,
    pub epoch: i16,
}

/// One entry of an internal partition as read back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum InternalEntry {
    /// A record's value; `producer` is set when its batch is transactional.
    Value {
        value: Bytes,
        producer: Option<TxnProducer>,
    },
    /// A transaction marker (a control batch's record).
    Marker(Marker),
}

/// `value` as a one-record v2 batch (offsets and epoch patched at apply),
/// transactional for `producer` when given. Such a
/// batch carries no sequence (Kafka's coordinator-origin appends): the
/// leader checks only its epoch (`producers::check`).
fn batch_of(value: &Bytes, producer: Option<TxnProducer>) -> Result<Bytes> {
    let (producer_id, producer_epoch) =
        producer.map_or((batch::NO_PRODUCER_ID, -1), |p| (p.producer_id, p.epoch));
    let record = Record {
        transactional: producer.is_some(),
        control: false,
        delete_horizon: false,
        partition_leader_epoch: -1,
        producer_id,
        producer_epoch,
        timestamp_type: TimestampType::Creation,
        offset: 0,
        sequence: batch::NO_SEQUENCE,
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
    append_for(partition, backpressure, value, None, room_timeout).await
}

/// [`append`], as a transactional batch of `producer` when given.
pub async fn append_for(
    partition: &Partition,
    backpressure: &Backpressure,
    value: &Bytes,
    producer: Option<TxnProducer>,
    room_timeout: Duration,
) -> Result<oneshot::Receiver<ProduceOutcome>> {
    partition.check_leader(-1)?;
    let batch = batch_of(value, producer)?;
    let batches: Vec<Bytes> = batch::validate_transactional(&batch, i32::MAX, None)?
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
/// `end` (at most the high watermark), in order, skipping markers. Returns
/// the offset after the last record read.
pub fn for_each_value(
    partition: &Partition,
    from: i64,
    end: i64,
    mut visit: impl FnMut(i64, Bytes) -> Result<()>,
) -> Result<i64> {
    for_each_entry(partition, from, end, |offset, entry| match entry {
        InternalEntry::Value { value, .. } => visit(offset, value),
        InternalEntry::Marker(_) => Ok(()),
    })
}

/// Calls `visit(offset, entry)` for every record from offset `from` up to
/// `end` (at most the high watermark), in order: values with their
/// transactional producer, and markers. Returns the offset after the last
/// record read.
pub fn for_each_entry(
    partition: &Partition,
    from: i64,
    end: i64,
    mut visit: impl FnMut(i64, InternalEntry) -> Result<()>,
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
            let offset = record.offset;
            if record.control {
                // A control record this broker does not write (not an
                // end-transaction marker) changes nothing.
                if let Some(marker) = marker_of(&record) {
                    visit(offset, InternalEntry::Marker(marker))?;
                }
                continue;
            }
            let producer = record.transactional.then_some(TxnProducer {
                producer_id: record.producer_id,
                epoch: record.producer_epoch,
            });
            let value = record.value.unwrap_or_default();
            visit(offset, InternalEntry::Value { value, producer })?;
        }
        if next == before {
            return Err(HelixError::CorruptState(format!(
                "no progress reading internal records at offset {next}"
            )));
        }
    }
    Ok(next)
}

/// The end-transaction marker a control record holds: key (version i16,
/// type i16: ABORT 0, COMMIT 1), value (version i16, coordinator epoch i32).
fn marker_of(record: &Record) -> Option<Marker> {
    let key = record.key.as_ref()?;
    let value = record.value.as_ref()?;
    if key.len() < 4 || value.len() < 6 {
        return None;
    }
    let commit = match i16::from_be_bytes([key[2], key[3]]) {
        0 => false,
        1 => true,
        _ => return None,
    };
    Some(Marker {
        producer_id: record.producer_id,
        producer_epoch: record.producer_epoch,
        commit,
        coordinator_epoch: i32::from_be_bytes([value[2], value[3], value[4], value[5]]),
        timestamp: record.timestamp,
    })
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

/// Serves one internal partition of `service` from now on: loads it at
/// once if this node already leads it and serves (a single node, so the
/// broker answers for it from its first request), then follows its
/// leadership in a task of its own.
pub fn serve<S: LeaderLoaded>(
    service: &Arc<S>,
    id: S::Id,
    partition: Arc<Partition>,
) -> Result<()> {
    let l = partition.leadership();
    let loaded_term = if l.serving && partition.high_watermark() >= partition.log_end_offset() {
        service.load(id, &partition)?;
        Some(l.term)
    } else {
        None
    };
    tokio::spawn(follow_leadership(
        Arc::downgrade(service),
        id,
        partition,
        loaded_term,
    ));
    Ok(())
}

/// Follows one internal partition's leadership: loads it when this node
/// leads and its log is acknowledged up to where it was at election (the
/// new term's no-op), unloads it when leadership goes. `loaded_term` is
/// the term the caller loaded it at, if it did: only what was really
/// loaded counts (the partition may have become serving since the caller
/// looked, and then it still has to be loaded here). Ends with the service
/// or the partition.
async fn follow_leadership<S: LeaderLoaded>(
    service: Weak<S>,
    id: S::Id,
    partition: Arc<Partition>,
    mut loaded_term: Option<helix_raft::Term>,
) {
    let mut leadership = partition.watch_leadership();
    loop {
        let l = *leadership.borrow_and_update();
        let leads = l.role == Role::Leader;
        if leads && loaded_term != Some(l.term) && !l.serving {
            // Not yet: entries of earlier terms may still be in the Raft
            // log only, neither acknowledged nor in the WAL (a follower
            // stores an entry once it hears it committed), so the WAL's
            // end says nothing yet. Loading now would miss an entry an
            // earlier leader acknowledged (a transaction's PrepareCommit:
            // measured, the next coordinator merged the committed
            // transaction into the next one and aborted both). `serving`
            // comes with the first acknowledged entry of this term.
            if leadership.changed().await.is_err() {
                return;
            }
            continue;
        }
        if leads && loaded_term != Some(l.term) {
            // Serving: every entry before this term is acknowledged and
            // applied, so the WAL's end covers them.
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::replica::markers::control_batch;
    use crate::replica::producers::{Known, SequenceCheck, check};

    fn decoded(batch: &[u8]) -> Vec<Record> {
        let mut bytes = Bytes::copy_from_slice(batch);
        RecordBatchDecoder::decode_all(&mut bytes)
            .expect("decode")
            .into_iter()
            .flat_map(|set| set.records)
            .collect()
    }

    #[test]
    fn a_marker_reads_back_from_its_control_record() {
        for commit in [false, true] {
            let m = Marker {
                producer_id: 7,
                producer_epoch: 2,
                commit,
                coordinator_epoch: 5,
                timestamp: 99,
            };
            let records = decoded(&control_batch(&m));
            assert_eq!(records.len(), 1);
            assert!(records[0].control);
            assert_eq!(marker_of(&records[0]), Some(m));
        }
    }

    #[test]
    fn a_coordinator_transactional_batch_is_checked_on_its_epoch_only() {
        let producer = TxnProducer {
            producer_id: 7,
            epoch: 3,
        };
        let b = batch_of(&Bytes::from_static(b"v"), Some(producer)).expect("batch");
        let h = batch::parse_header(&b).expect("header");
        assert!(h.is_transactional());
        assert_eq!(
            (h.producer_id, h.producer_epoch, h.base_sequence),
            (7, 3, -1)
        );
        let records = decoded(&b);
        assert!(records[0].transactional && !records[0].control);
        // Never seen: accepted without a sequence (a client's needs 0).
        assert!(matches!(check(Known::Never, &h), Ok(SequenceCheck::Accept)));
        assert!(matches!(
            check(Known::Forgotten, &h),
            Ok(SequenceCheck::Accept)
        ));
        let plain = batch_of(&Bytes::from_static(b"v"), None).expect("batch");
        assert!(
            !batch::parse_header(&plain)
                .expect("header")
                .is_transactional()
        );
    }

    /// A service that counts its loads and says when one happened.
    struct Loads(tokio::sync::mpsc::UnboundedSender<u32>);

    impl LeaderLoaded for Loads {
        type Id = u32;
        fn load(&self, id: u32, _: &Partition) -> Result<()> {
            let _ = self.0.send(id);
            Ok(())
        }
        fn unload(&self, _: u32) {}
    }

    /// The race that left an internal partition unserved for good (a
    /// transactional id or a group on it answered NOT_COORDINATOR until
    /// the next election): the partition became serving after its service
    /// looked at open and before its follower started. The follower then
    /// took "serving" for "loaded" and never loaded it; it loads it now.
    #[tokio::test]
    async fn a_partition_serving_before_its_follower_starts_is_loaded() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut r = crate::replica::txn_tests::open_replica(dir.path());
        while r.group.has_ready() {
            let rd = r.group.ready();
            if let Some(last) = r.state.apply(rd.to_apply).expect("apply") {
                r.group.durable_to(last).expect("durable");
            }
            if let Some(ack) = rd.acknowledged {
                r.state.acknowledged(ack);
            }
        }
        r.state.leadership(&r.group);
        assert!(r.partition.leadership().serving, "the one voter serves");
        let (tx, mut loads) = tokio::sync::mpsc::unbounded_channel();
        let service = Arc::new(Loads(tx));
        let follower = tokio::spawn(follow_leadership(
            Arc::downgrade(&service),
            7,
            r.partition.clone(),
            None,
        ));
        let loaded = tokio::time::timeout(Duration::from_secs(10), loads.recv()).await;
        follower.abort();
        assert_eq!(loaded.ok().flatten(), Some(7), "never loaded");
    }
}
