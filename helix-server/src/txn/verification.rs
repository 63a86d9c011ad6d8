//! Whether partitions are in a producer's ongoing transaction (KIP-890
//! part 1), and AddPartitionsToTxn v4+'s batches, which ask it. One
//! coordinator-side question (`Coordinator::verify_partitions`, Kafka's
//! `handleVerifyPartitionsInTransaction`), with three front doors: a
//! partition leader's transactional Produce and a TxnOffsetCommit
//! ([`TxnService::verify`], in-process or by a peer call to the
//! coordinator's node, served by [`TxnService::verify_local`]), and a
//! broker's AddPartitionsToTxn v4+ request on the wire
//! ([`TxnService::add_or_verify`], `txn::add_partitions`).

use std::collections::BTreeSet;

use super::error::TxnError;
use super::peer;
use super::request::{AddPartitions, TxnRequest};
use super::response::{Answer, PartitionVerdicts};
use super::service::{TxnService, unexpected};
use super::types::TopicPartition;

/// One transaction of an AddPartitionsToTxn v4+ batch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BatchedTxn {
    pub request: AddPartitions,
    /// Only ask whether the partitions are in the transaction (change
    /// nothing); otherwise add them, as v0-v3 do.
    pub verify_only: bool,
}

impl TxnService {
    /// Whether `partition` is in the ongoing transaction of this producer id
    /// and epoch (KIP-890 part 1, asked before a transactional batch or a
    /// TxnOffsetCommit is appended), asked of the transactional id's
    /// coordinator wherever it is; one that cannot be reached is
    /// NOT_COORDINATOR (each caller answers it retriably).
    pub async fn verify(
        &self,
        transactional_id: &str,
        producer_id: i64,
        epoch: i16,
        partition: TopicPartition,
    ) -> Result<(), TxnError> {
        match self.coordinating_node(transactional_id) {
            Some(node) if node == self.cluster.me => {
                self.verify_local(transactional_id, producer_id, epoch, partition)
                    .await
            }
            Some(node) => {
                let link = self.link.link().ok_or(TxnError::NotCoordinator)?;
                peer::verify(link, node, transactional_id, producer_id, epoch, &partition).await
            }
            None => Err(TxnError::NotCoordinator),
        }
    }

    /// [`Self::verify`] answered from this node's coordinator alone (a
    /// transactional id it does not coordinate is NOT_COORDINATOR): the
    /// one-partition, verify-only case of [`Self::add_or_verify`].
    pub(super) async fn verify_local(
        &self,
        transactional_id: &str,
        producer_id: i64,
        epoch: i16,
        partition: TopicPartition,
    ) -> Result<(), TxnError> {
        let request = AddPartitions {
            transactional_id: transactional_id.to_owned(),
            producer_id,
            epoch,
            partitions: BTreeSet::from([partition]),
        };
        let batch = vec![BatchedTxn {
            request,
            verify_only: true,
        }];
        let answer = self.add_or_verify(batch).await.pop();
        match answer {
            Some(Ok(verdicts)) => verdicts
                .into_iter()
                .map(|(_, verdict)| verdict)
                .find(|v| v.is_err())
                .unwrap_or(Ok(())),
            Some(Err(e)) => Err(e),
            None => unreachable!("one answer per transaction"),
        }
    }

    /// AddPartitionsToTxn v4+: every transaction of the batch handed to
    /// this node's coordinator at once, answered when all are (Kafka sends
    /// the response once every transaction has its result). A verify-only
    /// transaction reads the acknowledged state and changes nothing; an add
    /// is answered once its record is acknowledged, NONE for each of its
    /// partitions. One result per transaction, in order; an id this node
    /// does not coordinate is NOT_COORDINATOR.
    pub async fn add_or_verify(
        &self,
        batch: Vec<BatchedTxn>,
    ) -> Vec<Result<PartitionVerdicts, TxnError>> {
        let mut partitions = Vec::with_capacity(batch.len());
        let requests = batch
            .into_iter()
            .map(|txn| {
                partitions.push(txn.request.partitions.clone());
                if txn.verify_only {
                    TxnRequest::VerifyPartitions(txn.request)
                } else {
                    TxnRequest::AddPartitions(txn.request)
                }
            })
            .collect();
        let answers = self.call_all(requests).await;
        answers
            .into_iter()
            .zip(partitions)
            .map(|(answer, partitions)| match answer {
                Answer::VerifyPartitions(result) => result,
                Answer::AddPartitions(result) => {
                    result.map(|()| partitions.into_iter().map(|p| (p, Ok(()))).collect())
                }
                other => Err(unexpected(other)),
            })
            .collect()
    }
}
