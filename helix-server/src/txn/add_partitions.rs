//! AddPartitionsToTxn on the wire, as Kafka 3.9's
//! `handleAddPartitionsToTxnRequest` answers it.
//!
//! v0-v3 are the clients' versions: one transaction, one code for all its
//! partitions (`results_by_topic_v3_and_below`). v4-v5 are the brokers'
//! (KIP-890 part 1): a batch of transactions, each added like v3 or, with
//! `verify_only`, only asked whether its partitions are in the producer's
//! ongoing transaction (NONE, or TRANSACTION_ABORTABLE for one that is not,
//! nothing changed), answered per transaction (`results_by_transaction`)
//! once every transaction has its result. They need ClusterAction on the
//! cluster (`kafka::authorize`, before this runs: the top-level
//! CLUSTER_AUTHORIZATION_FAILED and no results). v5 is v4's schema; it only
//! tells the coordinator that the sender knows TRANSACTION_ABORTABLE, which
//! Kafka 3.9's coordinator answers at v4 as well, and so does this one.
//!
//! Every version first checks the topic table: a transaction naming a
//! partition of an unknown topic gets UNKNOWN_TOPIC_OR_PARTITION for it and
//! OPERATION_NOT_ATTEMPTED for its others, without asking the coordinator.

use std::collections::{BTreeMap, BTreeSet};

use kafka_protocol::ResponseError;
use kafka_protocol::messages::add_partitions_to_txn_request::AddPartitionsToTxnTopic;
use kafka_protocol::messages::add_partitions_to_txn_response::{
    AddPartitionsToTxnPartitionResult, AddPartitionsToTxnResult, AddPartitionsToTxnTopicResult,
};
use kafka_protocol::messages::{
    AddPartitionsToTxnRequest, AddPartitionsToTxnResponse, ApiKey, TransactionalId,
};

use super::error::TxnError;
use super::request::AddPartitions;
use super::service::TxnService;
use super::types::TopicPartition;
use super::verification::BatchedTxn;
use crate::topics::TopicTable;

/// AddPartitionsToTxn versions served: v0-v3 (clients, one transaction)
/// and v4-v5 (brokers, batched, verify-only), Kafka 3.9.1's range.
pub const ADD_PARTITIONS_VERSIONS: (i16, i16) = (0, 5);
/// The first version that batches transactions (and needs ClusterAction).
pub const FIRST_BROKER_VERSION: i16 = 4;

/// What became of one transaction of the request.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Outcome {
    /// These partitions' topics are unknown: the coordinator was not asked.
    Unknown(BTreeSet<TopicPartition>),
    /// The coordinator's answer, per partition (looked up for each one the
    /// request lists) or one for all.
    Answered(Result<BTreeMap<TopicPartition, Result<(), TxnError>>, TxnError>),
}

impl Outcome {
    /// The code answered for `tp` at `version`.
    fn code(&self, tp: &TopicPartition, version: i16) -> i16 {
        let code_of = |e: TxnError| e.code_at(ApiKey::AddPartitionsToTxn, version);
        match self {
            Outcome::Unknown(unknown) if unknown.contains(tp) => {
                ResponseError::UnknownTopicOrPartition.code()
            }
            Outcome::Unknown(_) => ResponseError::OperationNotAttempted.code(),
            Outcome::Answered(Err(e)) => code_of(*e),
            Outcome::Answered(Ok(verdicts)) => verdicts
                .get(tp)
                .map_or(0, |verdict| verdict.map_or_else(code_of, |()| 0)),
        }
    }
}

/// One transaction as the coordinator is asked it, or why it is not.
fn check(
    topics: &TopicTable,
    txn: AddPartitions,
    verify_only: bool,
) -> Result<BatchedTxn, Outcome> {
    let unknown: BTreeSet<TopicPartition> = txn
        .partitions
        .iter()
        .filter(|tp| {
            !topics.get(&tp.topic).is_some_and(|topic| {
                usize::try_from(tp.partition).is_ok_and(|i| i < topic.partitions.len())
            })
        })
        .cloned()
        .collect();
    if unknown.is_empty() {
        Ok(BatchedTxn {
            request: txn,
            verify_only,
        })
    } else {
        Err(Outcome::Unknown(unknown))
    }
}

/// The partitions a request's topics list.
fn partitions_of(topics: &[AddPartitionsToTxnTopic]) -> BTreeSet<TopicPartition> {
    topics
        .iter()
        .flat_map(|t| {
            t.partitions
                .iter()
                .map(|&index| TopicPartition::new(&t.name.0, index))
        })
        .collect()
}

/// Each transaction checked against the topic table, the rest asked of the
/// coordinator together: one outcome per transaction, in order.
async fn decide(
    service: &TxnService,
    topics: &TopicTable,
    transactions: Vec<(AddPartitions, bool)>,
) -> Vec<Outcome> {
    let mut asked = Vec::new();
    let refused: Vec<Option<Outcome>> = transactions
        .into_iter()
        .map(|(txn, verify_only)| match check(topics, txn, verify_only) {
            Ok(txn) => {
                asked.push(txn);
                None
            }
            Err(outcome) => Some(outcome),
        })
        .collect();
    let mut answers = service.add_or_verify(asked).await.into_iter();
    refused
        .into_iter()
        .map(|refused| {
            refused.unwrap_or_else(|| {
                let answer = answers.next().unwrap_or(Err(TxnError::NotCoordinator));
                Outcome::Answered(answer.map(|verdicts| verdicts.into_iter().collect()))
            })
        })
        .collect()
}

/// The per-topic results of `listed`, in the request's order.
fn topic_results(
    listed: &[AddPartitionsToTxnTopic],
    outcome: &Outcome,
    version: i16,
) -> Vec<AddPartitionsToTxnTopicResult> {
    listed
        .iter()
        .map(|t| {
            AddPartitionsToTxnTopicResult::default()
                .with_name(t.name.clone())
                .with_results_by_partition(
                    t.partitions
                        .iter()
                        .map(|&index| {
                            let tp = TopicPartition::new(&t.name.0, index);
                            AddPartitionsToTxnPartitionResult::default()
                                .with_partition_index(index)
                                .with_partition_error_code(outcome.code(&tp, version))
                        })
                        .collect(),
                )
        })
        .collect()
}

/// AddPartitionsToTxn at any served version (the authorizer has passed
/// it).
pub async fn add_partitions_to_txn(
    service: &TxnService,
    topics: &TopicTable,
    req: AddPartitionsToTxnRequest,
    version: i16,
) -> AddPartitionsToTxnResponse {
    if version >= FIRST_BROKER_VERSION {
        return batched(service, topics, req, version).await;
    }
    let txn = AddPartitions {
        transactional_id: req.v3_and_below_transactional_id.0.to_string(),
        producer_id: req.v3_and_below_producer_id.0,
        epoch: req.v3_and_below_producer_epoch,
        partitions: partitions_of(&req.v3_and_below_topics),
    };
    let outcome = decide(service, topics, vec![(txn, false)])
        .await
        .pop()
        .unwrap_or(Outcome::Answered(Err(TxnError::NotCoordinator)));
    AddPartitionsToTxnResponse::default().with_results_by_topic_v3_and_below(topic_results(
        &req.v3_and_below_topics,
        &outcome,
        version,
    ))
}

/// v4+: one result per transaction, once all are decided.
async fn batched(
    service: &TxnService,
    topics: &TopicTable,
    req: AddPartitionsToTxnRequest,
    version: i16,
) -> AddPartitionsToTxnResponse {
    let transactions = req
        .transactions
        .iter()
        .map(|t| {
            let txn = AddPartitions {
                transactional_id: t.transactional_id.0.to_string(),
                producer_id: t.producer_id.0,
                epoch: t.producer_epoch,
                partitions: partitions_of(&t.topics),
            };
            (txn, t.verify_only)
        })
        .collect();
    let outcomes = decide(service, topics, transactions).await;
    let results = req
        .transactions
        .iter()
        .zip(&outcomes)
        .map(|(t, outcome)| transaction_result(&t.transactional_id, &t.topics, outcome, version))
        .collect();
    AddPartitionsToTxnResponse::default().with_results_by_transaction(results)
}

fn transaction_result(
    id: &TransactionalId,
    listed: &[AddPartitionsToTxnTopic],
    outcome: &Outcome,
    version: i16,
) -> AddPartitionsToTxnResult {
    AddPartitionsToTxnResult::default()
        .with_transactional_id(id.clone())
        .with_topic_results(topic_results(listed, outcome, version))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn verdicts(
        pairs: &[(&str, i32, Result<(), TxnError>)],
    ) -> BTreeMap<TopicPartition, Result<(), TxnError>> {
        pairs
            .iter()
            .map(|(t, p, v)| (TopicPartition::new(t, *p), *v))
            .collect()
    }

    fn tp(topic: &str, partition: i32) -> TopicPartition {
        TopicPartition::new(topic, partition)
    }

    #[test]
    fn verify_only_answers_each_partition_its_own_code() {
        let outcome = Outcome::Answered(Ok(verdicts(&[
            ("t", 0, Ok(())),
            ("t", 1, Err(TxnError::TransactionAbortable)),
        ])));
        for version in [4, 5] {
            assert_eq!(outcome.code(&tp("t", 0), version), 0);
            // Kafka 3.9's coordinator answers TRANSACTION_ABORTABLE at v4 too.
            assert_eq!(outcome.code(&tp("t", 1), version), 120);
        }
    }

    #[test]
    fn one_error_for_a_transaction_is_every_partitions_code() {
        let fenced = Outcome::Answered(Err(TxnError::ProducerFenced));
        assert_eq!(fenced.code(&tp("t", 0), 4), 90);
        // Clients before v2 know only INVALID_PRODUCER_EPOCH.
        assert_eq!(fenced.code(&tp("t", 0), 1), 47);
        let elsewhere = Outcome::Answered(Err(TxnError::NotCoordinator));
        assert_eq!(elsewhere.code(&tp("u", 3), 4), 16);
        let unknown_id = Outcome::Answered(Err(TxnError::InvalidProducerIdMapping));
        assert_eq!(unknown_id.code(&tp("t", 0), 5), 49);
    }

    #[test]
    fn an_unknown_topic_fails_its_transaction_without_the_coordinator() {
        let outcome = Outcome::Unknown(BTreeSet::from([tp("gone", 0)]));
        assert_eq!(outcome.code(&tp("gone", 0), 4), 3);
        assert_eq!(outcome.code(&tp("t", 0), 4), 55);
    }
}
