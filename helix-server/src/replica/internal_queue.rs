//! The ordered proposal queue of an internal partition, shared by the group
//! and transaction coordinators' hosts: entries are appended one after the
//! other (acks=all, the path of Produce) and a second task settles their
//! outcomes in the same order, so a coordinator applies them in log order.
//! An acknowledged entry that `compacts` (a snapshot of the whole view)
//! makes the log before it redundant: it is deleted
//! (`Partition::delete_records`) before the outcome is settled, so a later
//! replay starts from the snapshot. An entry may be appended for a
//! transactional producer (the group coordinator's TxnOffsetCommit); the
//! host hears of each acknowledged offset before it settles, so it can
//! apply what precedes the entry in the log first (markers).

use std::fmt::Display;
use std::sync::{Arc, Weak};
use std::time::Duration;

use bytes::Bytes;
use tokio::sync::{mpsc, oneshot};

use super::Partition;
use super::internal::{self, TxnProducer};
use crate::batcher::ProduceOutcome;
use crate::budget::Backpressure;
use crate::error::HelixError;

/// How long a proposal waits for produce backpressure room.
const PROPOSAL_ROOM_TIMEOUT: Duration = Duration::from_secs(30);

/// One entry to append, named by its coordinator's proposal id.
#[derive(Debug)]
pub struct Queued<I> {
    pub id: I,
    pub entry: Bytes,
    /// The entry holds the whole view: once acknowledged, the log before it
    /// is deleted.
    pub compacts: bool,
    /// Appended as a transactional batch of this producer.
    pub producer: Option<TxnProducer>,
}

/// A host told, in log order, whether each of its proposals is durable.
pub trait SettlesProposals: Send + Sync + 'static {
    /// The coordinator's name for one proposal.
    type ProposalId: Send + 'static;
    /// The host's name for one of its partitions.
    type Partition: Copy + Display + Send + 'static;
    /// An entry of `partition` was acknowledged at `offset` and is about to
    /// be settled.
    fn before_applying(&self, _partition: Self::Partition, _offset: i64) {}
    /// The proposal is acknowledged at an offset, or will never be (why).
    fn settle(&self, id: Self::ProposalId, outcome: Result<i64, HelixError>);
}

/// Proposes one partition's entries in order until the queue or the
/// service goes; `label` names the partition in logs.
pub async fn propose_in_order<S: SettlesProposals>(
    service: Weak<S>,
    label: S::Partition,
    partition: Arc<Partition>,
    mut proposals: mpsc::UnboundedReceiver<Queued<S::ProposalId>>,
    backpressure: Backpressure,
) {
    let (done_tx, done_rx) = mpsc::unbounded_channel::<Outcome<S::ProposalId>>();
    tokio::spawn(settle_in_order(service, label, partition.clone(), done_rx));
    while let Some(proposal) = proposals.recv().await {
        let waiting = internal::append_for(
            &partition,
            &backpressure,
            &proposal.entry,
            proposal.producer,
            PROPOSAL_ROOM_TIMEOUT,
        )
        .await;
        if let Err(error) = &waiting {
            tracing::warn!(partition = %label, %error, "internal proposal failed");
        }
        if done_tx
            .send((proposal.id, proposal.compacts, waiting))
            .is_err()
        {
            return;
        }
    }
}

/// A proposal's id, whether it compacts, and its acknowledgement to come
/// (or why it was not appended).
type Outcome<I> = (
    I,
    bool,
    Result<oneshot::Receiver<ProduceOutcome>, HelixError>,
);

/// Waits for each outcome in the order the entries were appended, compacts
/// after an acknowledged snapshot, and settles.
async fn settle_in_order<S: SettlesProposals>(
    service: Weak<S>,
    label: S::Partition,
    log: Arc<Partition>,
    mut outcomes: mpsc::UnboundedReceiver<Outcome<S::ProposalId>>,
) {
    while let Some((id, compacts, waiting)) = outcomes.recv().await {
        let outcome = match waiting {
            Ok(rx) => match rx.await {
                Ok(Ok(ack)) => Ok(ack.base_offset.0),
                Ok(Err(error)) => Err(error),
                Err(_) => Err(HelixError::ShuttingDown),
            },
            Err(error) => Err(error),
        };
        if let Ok(offset) = outcome {
            let Some(service) = service.upgrade() else {
                return;
            };
            service.before_applying(label, offset);
        }
        let acknowledged = outcome.as_ref().ok().map(|o| crate::offset::Offset(*o));
        if let (true, Some(snapshot_offset)) = (compacts, acknowledged) {
            // Everything before the snapshot entry is in it.
            if let Err(error) = log.delete_records(snapshot_offset).await {
                tracing::warn!(%error, "could not compact an internal partition");
            }
        }
        let Some(service) = service.upgrade() else {
            return;
        };
        service.settle(id, outcome);
    }
}
