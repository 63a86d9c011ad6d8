//! Writing a transaction's markers (the coordinator's `MarkerWrite`
//! effects): to the local leader replica of each data partition
//! (`Partition::write_marker`), retried on NOT_LEADER with a backoff, then
//! reported to the coordinator so it completes the transaction. A data
//! partition led by another node cannot be reached yet (there is no peer
//! call for it): its markers are retried and logged, and the transaction
//! stays in its Prepare state until this node leads it (issue 32, the
//! cluster step).

use std::sync::{Arc, Weak};
use std::time::Duration;

use super::response::MarkerWrite;
use super::types::{StatePartition, TopicPartition};
use crate::clock::now_ms;
use crate::error::HelixError;
use crate::replica::Partition;
use crate::replica::markers::Marker;

/// First and longest wait between two attempts at a partition's marker.
const MARKER_BACKOFF_MIN: Duration = Duration::from_millis(20);
const MARKER_BACKOFF_MAX: Duration = Duration::from_secs(1);
/// Attempts at a marker between two warnings about it.
const MARKER_WARN_EVERY: u32 = 50;

/// What marker writing needs of its host (the transaction service).
pub(super) trait MarkerHost: Send + Sync + 'static {
    /// Whether this node still coordinates `partition` at `epoch`.
    fn still_coordinates(&self, partition: StatePartition, epoch: i32) -> bool;
    /// The data partition `tp` (a `__consumer_offsets` partition is the
    /// group service's, which reads its markers back): `None` when its
    /// topic or partition is gone, `Some(None)` when no replica of it is
    /// on this node.
    fn data_partition(&self, tp: &TopicPartition) -> Option<Option<Arc<Partition>>>;
    /// Every marker of `markers` is written.
    fn markers_written(&self, markers: &MarkerWrite);
}

/// What became of one partition's marker.
enum MarkerOutcome {
    /// In the log (or needs no writing: the topic or partition is gone, or a
    /// newer epoch of the producer already ended its transaction).
    Done,
    /// A newer coordinator wrote markers for this producer: this one stops.
    Fenced,
}

/// Writes one transaction's markers to every partition, in parallel, then
/// reports them written so the coordinator completes the transaction.
pub(super) async fn write_markers<H: MarkerHost>(service: Weak<H>, markers: MarkerWrite) {
    let marker = Marker {
        producer_id: markers.producer_id,
        producer_epoch: markers.epoch,
        commit: markers.commit,
        coordinator_epoch: markers.coordinator_epoch,
        timestamp: now_ms(),
    };
    let writes = markers.partitions.iter().map(|tp| {
        write_marker(
            service.clone(),
            markers.partition,
            markers.coordinator_epoch,
            tp.clone(),
            marker,
        )
    });
    let outcomes = futures_join_all(writes).await;
    let Some(outcomes) = outcomes else {
        return;
    };
    if outcomes.iter().any(|o| matches!(o, MarkerOutcome::Fenced)) {
        tracing::warn!(transactional_id = %markers.transactional_id,
            "a newer transaction coordinator wrote markers for this producer; stopping");
        return;
    }
    if let Some(s) = service.upgrade() {
        s.markers_written(&markers);
    }
}

/// Runs the writes concurrently; `None` when one gave up because this node
/// stopped coordinating (or the service is gone).
async fn futures_join_all<F>(writes: impl Iterator<Item = F>) -> Option<Vec<MarkerOutcome>>
where
    F: std::future::Future<Output = Option<MarkerOutcome>> + Send + 'static,
{
    let handles: Vec<_> = writes.map(tokio::spawn).collect();
    let mut outcomes = Vec::with_capacity(handles.len());
    for h in handles {
        outcomes.push(h.await.ok()??);
    }
    Some(outcomes)
}

/// Writes one marker to the local leader of `tp`, retrying while it is not
/// the leader; `None` when this node no longer coordinates the transaction.
async fn write_marker<H: MarkerHost>(
    service: Weak<H>,
    partition: StatePartition,
    coordinator_epoch: i32,
    tp: TopicPartition,
    marker: Marker,
) -> Option<MarkerOutcome> {
    let mut backoff = MARKER_BACKOFF_MIN;
    let mut attempts: u32 = 0;
    loop {
        let replica = {
            let s = service.upgrade()?;
            if !s.still_coordinates(partition, coordinator_epoch) {
                return None;
            }
            let Some(replica) = s.data_partition(&tp) else {
                // Deleted: nothing to end there (Kafka skips it too).
                return Some(MarkerOutcome::Done);
            };
            replica
        };
        let outcome = match &replica {
            Some(p) => p.write_marker(marker).await,
            None => Err(HelixError::NotLeader),
        };
        match outcome {
            Ok(_) => return Some(MarkerOutcome::Done),
            // A newer epoch of the producer ended the transaction already.
            Err(HelixError::InvalidProducerEpoch) => return Some(MarkerOutcome::Done),
            Err(HelixError::TransactionCoordinatorFenced) => return Some(MarkerOutcome::Fenced),
            Err(error) => {
                attempts += 1;
                if attempts % MARKER_WARN_EVERY == 1 {
                    let remote = replica.is_none();
                    tracing::warn!(topic = %tp.topic, partition = tp.partition, %error, attempts, remote,
                        "transaction marker not written yet; retrying (a partition led by another \
                         node cannot be reached yet: issue 32's cluster step)");
                }
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(MARKER_BACKOFF_MAX);
            }
        }
    }
}
