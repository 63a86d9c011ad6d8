//! Transaction calls between nodes, over the peer transport (one call kind,
//! [`CALL_TXN`]):
//! - a coordinator writes a marker into a data partition led by another
//!   node (what Kafka's coordinator sends as WriteTxnMarkers);
//! - a partition leader asks the coordinator of a transactional id, on
//!   another node, whether a partition is in the producer's ongoing
//!   transaction before it appends a transactional batch (KIP-890 part 1,
//!   Kafka's verify-only AddPartitionsToTxn).
//!
//! [`TxnCalls`] serves them; it is registered with the peer handler before
//! the transaction service opens, and refuses calls until it has (the
//! caller retries, as for any unreachable node). A served call only ever
//! acts locally, so a call is never forwarded twice.

use std::sync::{Arc, OnceLock, Weak};
use std::time::Duration;

use bytes::Bytes;
use helix_raft::NodeId;
use serde::{Deserialize, Serialize};

use super::error::TxnError;
use super::service::TxnService;
use super::types::TopicPartition;
use crate::cluster::peers::{BoxFuture, CallService, PeerLink};
use crate::error::HelixError;
use crate::replica::markers::Marker;

/// Kind byte of a transaction call.
pub const CALL_TXN: u8 = 3;

/// How long a marker write or a verification may take on the other node
/// (a Raft round for a marker; a lookup for a verification).
const CALL_TIMEOUT: Duration = Duration::from_secs(5);

#[derive(Debug, Serialize, Deserialize)]
enum TxnCall {
    /// Write `marker` into the local leader of `topic`-`partition`.
    Marker {
        topic: String,
        partition: i32,
        producer_id: i64,
        producer_epoch: i16,
        commit: bool,
        coordinator_epoch: i32,
        timestamp: i64,
    },
    /// Is `topic`-`partition` in this producer's ongoing transaction?
    Verify {
        transactional_id: String,
        producer_id: i64,
        epoch: i16,
        topic: String,
        partition: i32,
    },
}

/// What became of a marker on the partition's node.
#[derive(Debug, Serialize, Deserialize)]
enum MarkerReply {
    Written,
    /// A newer epoch of the producer ended its transaction already.
    StaleProducer,
    /// A newer coordinator wrote markers for this producer.
    CoordinatorFenced,
    /// Not written (not the leader, not known there yet, not durable): the
    /// coordinator tries again.
    Retry(String),
}

/// A verification's answer.
#[derive(Debug, Serialize, Deserialize)]
struct VerifyReply {
    result: Result<(), TxnError>,
}

/// Writes `marker` into `tp` on node `to` (its leader, as the caller last
/// knew). `Err` as the local `Partition::write_marker` would fail:
/// INVALID_PRODUCER_EPOCH and TRANSACTION_COORDINATOR_FENCED are final,
/// anything else is tried again.
pub(super) async fn write_marker(
    link: Arc<dyn PeerLink>,
    to: NodeId,
    tp: &TopicPartition,
    marker: Marker,
) -> Result<(), HelixError> {
    let call = TxnCall::Marker {
        topic: tp.topic.clone(),
        partition: tp.partition,
        producer_id: marker.producer_id,
        producer_epoch: marker.producer_epoch,
        commit: marker.commit,
        coordinator_epoch: marker.coordinator_epoch,
        timestamp: marker.timestamp,
    };
    let reply: MarkerReply = call_peer(&*link, to, &call).await?;
    match reply {
        MarkerReply::Written => Ok(()),
        MarkerReply::StaleProducer => Err(HelixError::InvalidProducerEpoch),
        MarkerReply::CoordinatorFenced => Err(HelixError::TransactionCoordinatorFenced),
        MarkerReply::Retry(why) => Err(HelixError::Io(std::io::Error::other(format!(
            "node {to}: {why}"
        )))),
    }
}

/// Asks node `to`, the coordinator of `transactional_id`, whether `tp` is in
/// the producer's ongoing transaction at `epoch`; a node that cannot be
/// asked is NOT_COORDINATOR (the caller answers it retriably).
pub(super) async fn verify(
    link: Arc<dyn PeerLink>,
    to: NodeId,
    transactional_id: &str,
    producer_id: i64,
    epoch: i16,
    tp: &TopicPartition,
) -> Result<(), TxnError> {
    let call = TxnCall::Verify {
        transactional_id: transactional_id.to_owned(),
        producer_id,
        epoch,
        topic: tp.topic.clone(),
        partition: tp.partition,
    };
    match call_peer::<VerifyReply>(&*link, to, &call).await {
        Ok(VerifyReply { result }) => result,
        Err(error) => {
            tracing::debug!(to = to.0, %error, "verifying a transactional batch failed");
            Err(TxnError::NotCoordinator)
        }
    }
}

async fn call_peer<R: for<'de> Deserialize<'de>>(
    link: &dyn PeerLink,
    to: NodeId,
    call: &TxnCall,
) -> Result<R, HelixError> {
    let mut request = vec![CALL_TXN];
    serde_json::to_writer(&mut request, call)
        .map_err(|e| HelixError::CorruptState(format!("cannot encode a transaction call: {e}")))?;
    let answer = link.call(to, Bytes::from(request), CALL_TIMEOUT).await?;
    serde_json::from_slice(&answer).map_err(|e| {
        HelixError::CorruptState(format!("transaction call reply from node {to}: {e}"))
    })
}

/// Serves peers' transaction calls once the transaction service is open.
#[derive(Default)]
pub struct TxnCalls {
    service: OnceLock<Weak<TxnService>>,
}

impl std::fmt::Debug for TxnCalls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TxnCalls")
            .field("open", &self.service.get().is_some())
            .finish()
    }
}

impl TxnCalls {
    /// Calls are served from here on.
    pub fn set(&self, service: &Arc<TxnService>) {
        let _ = self.service.set(Arc::downgrade(service));
    }
}

impl CallService for TxnCalls {
    fn serve(&self, from: NodeId, body: Bytes) -> BoxFuture<Result<Bytes, String>> {
        let service = self.service.get().and_then(Weak::upgrade);
        Box::pin(async move {
            let call: TxnCall =
                serde_json::from_slice(&body).map_err(|e| format!("bad transaction call: {e}"))?;
            let service =
                service.ok_or_else(|| "the transaction service is not open".to_owned())?;
            let reply = match call {
                TxnCall::Marker {
                    topic,
                    partition,
                    producer_id,
                    producer_epoch,
                    commit,
                    coordinator_epoch,
                    timestamp,
                } => {
                    let marker = Marker {
                        producer_id,
                        producer_epoch,
                        commit,
                        coordinator_epoch,
                        timestamp,
                    };
                    let tp = TopicPartition::new(&topic, partition);
                    let reply = match service.write_local_marker(&tp, marker).await {
                        Ok(()) => MarkerReply::Written,
                        Err(HelixError::InvalidProducerEpoch) => MarkerReply::StaleProducer,
                        Err(HelixError::TransactionCoordinatorFenced) => {
                            MarkerReply::CoordinatorFenced
                        }
                        Err(e) => MarkerReply::Retry(e.to_string()),
                    };
                    tracing::debug!(from = from.0, %topic, partition, ?reply, "marker from a peer");
                    serde_json::to_vec(&reply)
                }
                TxnCall::Verify {
                    transactional_id,
                    producer_id,
                    epoch,
                    topic,
                    partition,
                } => {
                    let tp = TopicPartition::new(&topic, partition);
                    let result = service
                        .verify_local(&transactional_id, producer_id, epoch, tp)
                        .await;
                    serde_json::to_vec(&VerifyReply { result })
                }
            };
            reply
                .map(Bytes::from)
                .map_err(|e| format!("cannot encode the reply: {e}"))
        })
    }
}
