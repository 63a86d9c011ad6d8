//! Writing a transaction's markers (the coordinator's `MarkerWrite`
//! effects): to each data partition's leader, through the local replica
//! (`Partition::write_marker`) or the leader's node (`txn::peer`), retried
//! with a backoff while no leader takes it, then reported to the
//! coordinator so it completes the transaction. The attempts stop when
//! this node stops coordinating the transaction: the next coordinator asks
//! for the same markers again when it loads the partition.

use std::sync::{Arc, Weak};
use std::time::Duration;

use helix_raft::NodeId;

use super::response::MarkerWrite;
use super::types::{StatePartition, TopicPartition};
use crate::clock::now_ms;
use crate::cluster::peers::PeerLink;
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
    /// Where `tp`'s marker goes now; `None` when its topic or partition is
    /// gone.
    fn route(&self, tp: &TopicPartition) -> Option<Route>;
    /// Every marker of `markers` is written.
    fn markers_written(&self, markers: &MarkerWrite);
}

/// Where a data partition's marker is written.
pub(super) enum Route {
    /// Through this node's replica, which leads.
    Local(Arc<Partition>),
    /// Through the leader's node.
    Remote(NodeId, Arc<dyn PeerLink>),
    /// No leader is known yet.
    Unknown,
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
        let route = {
            let s = service.upgrade()?;
            if !s.still_coordinates(partition, coordinator_epoch) {
                return None;
            }
            let Some(route) = s.route(&tp) else {
                // Deleted: nothing to end there (Kafka skips it too).
                return Some(MarkerOutcome::Done);
            };
            route
        };
        let (outcome, to) = match route {
            Route::Local(p) => (p.write_marker(marker).await.map(|_| ()), None),
            Route::Remote(node, link) => (
                super::peer::write_marker(link, node, &tp, marker).await,
                Some(node),
            ),
            Route::Unknown => (Err(HelixError::NotLeader), None),
        };
        match outcome {
            Ok(_) => return Some(MarkerOutcome::Done),
            // A newer epoch of the producer ended the transaction already.
            Err(HelixError::InvalidProducerEpoch) => return Some(MarkerOutcome::Done),
            Err(HelixError::TransactionCoordinatorFenced) => return Some(MarkerOutcome::Fenced),
            Err(error) => {
                attempts += 1;
                if attempts % MARKER_WARN_EVERY == 1 {
                    tracing::warn!(topic = %tp.topic, partition = tp.partition, %error, attempts,
                        leader = ?to.map(|n| n.0), "transaction marker not written yet; retrying");
                }
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(MARKER_BACKOFF_MAX);
            }
        }
    }
}
