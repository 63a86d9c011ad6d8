//! The ordered proposal queue of an internal partition, shared by the group
//! and transaction coordinators' hosts: entries are appended one after the
//! other (acks=all, the path of Produce) and a second task settles their
//! outcomes in the same order, so a coordinator applies them in log order.
//! An acknowledged entry that `compacts` (a snapshot of the whole view)
//! makes the log before it redundant: it is deleted
//! (`Partition::delete_records`) before the outcome is settled, so a later
//! replay starts from the snapshot.

use std::fmt::Display;
use std::sync::{Arc, Weak};
use std::time::Duration;

use bytes::Bytes;
use tokio::sync::{mpsc, oneshot};

use super::Partition;
use super::internal;
use crate::batcher::ProduceOutcome;
use crate::budget::Backpressure;

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
}

/// A host told, in log order, whether each of its proposals is durable.
pub trait SettlesProposals: Send + Sync + 'static {
    /// The coordinator's name for one proposal.
    type ProposalId: Send + 'static;
    /// The proposal is acknowledged (`true`) or will never be.
    fn settle(&self, id: Self::ProposalId, acknowledged: bool);
}

/// Proposes one partition's entries in order until the queue or the
/// service goes; `label` names the partition in logs.
pub async fn propose_in_order<S: SettlesProposals>(
    service: Weak<S>,
    label: impl Display + Send + 'static,
    partition: Arc<Partition>,
    mut proposals: mpsc::UnboundedReceiver<Queued<S::ProposalId>>,
    backpressure: Backpressure,
) {
    type Outcome<I> = (I, bool, Option<oneshot::Receiver<ProduceOutcome>>);
    let (done_tx, done_rx) = mpsc::unbounded_channel::<Outcome<S::ProposalId>>();
    tokio::spawn(settle_in_order(service, partition.clone(), done_rx));
    while let Some(proposal) = proposals.recv().await {
        let waiting = internal::append(
            &partition,
            &backpressure,
            &proposal.entry,
            PROPOSAL_ROOM_TIMEOUT,
        )
        .await;
        if let Err(error) = &waiting {
            tracing::warn!(partition = %label, %error, "internal proposal failed");
        }
        if done_tx
            .send((proposal.id, proposal.compacts, waiting.ok()))
            .is_err()
        {
            return;
        }
    }
}

/// Waits for each outcome in the order the entries were appended, compacts
/// after an acknowledged snapshot, and settles.
async fn settle_in_order<S: SettlesProposals>(
    service: Weak<S>,
    log: Arc<Partition>,
    mut outcomes: mpsc::UnboundedReceiver<(
        S::ProposalId,
        bool,
        Option<oneshot::Receiver<ProduceOutcome>>,
    )>,
) {
    while let Some((id, compacts, waiting)) = outcomes.recv().await {
        let acknowledged = match waiting {
            Some(rx) => match rx.await {
                Ok(Ok(ack)) => Some(ack.base_offset),
                _ => None,
            },
            None => None,
        };
        if let (true, Some(snapshot_offset)) = (compacts, acknowledged) {
            // Everything before the snapshot entry is in it.
            if let Err(error) = log.delete_records(snapshot_offset).await {
                tracing::warn!(%error, "could not compact an internal partition");
            }
        }
        let Some(service) = service.upgrade() else {
            return;
        };
        service.settle(id, acknowledged.is_some());
    }
}
