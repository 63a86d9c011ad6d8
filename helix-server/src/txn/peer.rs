//! Transaction calls between nodes, over the peer transport (one call kind,
//! [`CALL_TXN`]):
//! - a coordinator writes a marker into a data partition led by another
//!   node (what Kafka's coordinator sends as WriteTxnMarkers);
//! - a partition leader asks the coordinator of a transactional id, on
//!   another node, whether a partition is in the producer's ongoing
//!   transaction before it appends a transactional batch (KIP-890 part 1,
//!   Kafka's verify-only AddPartitionsToTxn).
//!
//! This file holds the calls and the caller's side; `txn::peer_calls`
//! serves them.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use helix_raft::NodeId;
use serde::{Deserialize, Serialize};

use super::error::TxnError;
use super::types::TopicPartition;
use crate::cluster::peers::PeerLink;
use crate::error::HelixError;
use crate::replica::markers::Marker;

/// Kind byte of a transaction call.
pub const CALL_TXN: u8 = 3;

/// How long a marker write or a verification may take on the other node
/// (a Raft round for a marker; a lookup for a verification).
const CALL_TIMEOUT: Duration = Duration::from_secs(5);

#[derive(Debug, Serialize, Deserialize)]
pub(super) enum TxnCall {
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
pub(super) enum MarkerReply {
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
pub(super) struct VerifyReply {
    pub(super) result: Result<(), TxnError>,
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
