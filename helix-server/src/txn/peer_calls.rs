//! Serves peers' transaction calls (`txn::peer`): a marker for a data
//! partition this node leads, a verification for a transactional id it
//! coordinates. [`TxnCalls`] is registered with the peer handler before the
//! transaction service opens, and refuses calls until it has (the caller
//! retries, as for any unreachable node). A served call only ever acts
//! locally, so a call is never forwarded twice.

use std::sync::{Arc, OnceLock, Weak};

use bytes::Bytes;
use helix_raft::NodeId;

use super::peer::{MarkerReply, TxnCall, VerifyReply};
use super::service::TxnService;
use super::types::TopicPartition;
use crate::cluster::peers::{BoxFuture, CallService};
use crate::error::HelixError;
use crate::replica::markers::Marker;

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
