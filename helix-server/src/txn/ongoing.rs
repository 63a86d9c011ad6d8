//! Growing an open transaction: AddPartitionsToTxn (v0-v3, and v4's
//! non-verify transactions), AddOffsetsToTxn (the group's
//! `__consumer_offsets` partition), and v4's verify-only question a
//! partition leader asks before it accepts a transaction's first batch
//! (KIP-890 part 1). An added set is answered only once its record is
//! acknowledged (Redpanda #6018: a set answered before it is durable is
//! lost with the coordinator).

use std::collections::BTreeSet;

use super::coordinator::Coordinator;
use super::error::TxnError;
use super::record::Record;
use super::request::{AddOffsets, AddPartitions};
use super::response::{Answer, Effects, PartitionVerdicts};
use super::state::TxnState;
use super::types::{RequestToken, StatePartition, TopicPartition, kafka_partition_for};

/// Kafka's limit on a topic name's length; longer names cannot exist.
const MAX_TOPIC_NAME_BYTES: usize = 249;
/// The most partitions one transaction may hold: a bound on one record's
/// size (far above what any client asks).
pub const MAX_PARTITIONS_PER_TRANSACTION: usize = 100_000;
/// The internal topic holding group offsets.
const OFFSETS_TOPIC: &str = "__consumer_offsets";

/// What an add decides.
enum AddDecision {
    /// Every partition is already in the ongoing transaction: NONE at once.
    AlreadyIn,
    /// The grown transaction, answered once durable.
    Grow(StatePartition, Record),
}

fn valid_partitions(partitions: &BTreeSet<TopicPartition>) -> bool {
    partitions
        .iter()
        .all(|p| !p.topic.is_empty() && p.topic.len() <= MAX_TOPIC_NAME_BYTES && p.partition >= 0)
}

impl Coordinator {
    pub(super) fn add_partitions(&mut self, token: RequestToken, request: AddPartitions, now: i64) {
        let decided = self.decide_add(&request, now);
        self.answer_add(token, decided, Answer::AddPartitions);
    }

    pub(super) fn add_offsets(&mut self, token: RequestToken, request: AddOffsets, now: i64) {
        let offsets = kafka_partition_for(&request.group_id, request.offsets_partitions);
        let Ok(offsets) = i32::try_from(offsets) else {
            return self.answer(token, Answer::AddOffsets(Err(TxnError::InvalidRequest)));
        };
        let partition = TopicPartition::new(OFFSETS_TOPIC, offsets);
        let add = AddPartitions {
            transactional_id: request.transactional_id,
            producer_id: request.producer_id,
            epoch: request.epoch,
            partitions: BTreeSet::from([partition]),
        };
        let decided = self.decide_add(&add, now);
        self.answer_add(token, decided, Answer::AddOffsets);
    }

    fn answer_add(
        &mut self,
        token: RequestToken,
        decided: Result<AddDecision, TxnError>,
        shape: fn(Result<(), TxnError>) -> Answer,
    ) {
        match decided {
            Err(error) => self.answer(token, shape(Err(error))),
            Ok(AddDecision::AlreadyIn) => self.answer(token, shape(Ok(()))),
            Ok(AddDecision::Grow(partition, record)) => {
                let mut out = Effects::default();
                out.reply_after(record, token, shape(Ok(())));
                self.flush(partition, out);
            }
        }
    }

    /// Kafka's `handleAddPartitionsToTransaction`, in its order of checks.
    fn decide_add(&mut self, request: &AddPartitions, now: i64) -> Result<AddDecision, TxnError> {
        if !valid_partitions(&request.partitions) {
            return Err(TxnError::InvalidRequest);
        }
        let (partition, shard) = self.active(&request.transactional_id)?;
        let current = shard
            .transactions
            .get(&request.transactional_id)
            .ok_or(TxnError::InvalidProducerIdMapping)?;
        if current.producer_id != request.producer_id {
            return Err(TxnError::InvalidProducerIdMapping);
        }
        if current.epoch != request.epoch {
            return Err(TxnError::ProducerFenced);
        }
        if shard.pending.contains_key(&request.transactional_id) || current.state.is_prepare() {
            return Err(TxnError::ConcurrentTransactions);
        }
        if current.state == TxnState::Ongoing && request.partitions.is_subset(&current.partitions) {
            return Ok(AddDecision::AlreadyIn);
        }
        let next = current.add_partitions(&request.partitions, now)?;
        if next.partitions.len() > MAX_PARTITIONS_PER_TRANSACTION {
            return Err(TxnError::InvalidRequest);
        }
        let record = Record::Metadata {
            transactional_id: request.transactional_id.clone(),
            metadata: next,
        };
        Ok(AddDecision::Grow(partition, record))
    }

    /// Kafka's `handleVerifyPartitionsInTransaction`: NONE for each
    /// partition in the ongoing transaction of this producer id and epoch,
    /// TRANSACTION_ABORTABLE for each that is not; one error for all when
    /// the producer is not the transaction's. Only acknowledged state is
    /// consulted, so a partition whose add is still in flight is not in.
    pub(super) fn verify_partitions(&mut self, token: RequestToken, request: AddPartitions) {
        let verified = self.decide_verify(&request);
        self.answer(token, Answer::VerifyPartitions(verified));
    }

    fn decide_verify(&mut self, request: &AddPartitions) -> Result<PartitionVerdicts, TxnError> {
        let (_, shard) = self.active(&request.transactional_id)?;
        let current = shard
            .transactions
            .get(&request.transactional_id)
            .ok_or(TxnError::InvalidProducerIdMapping)?;
        if current.producer_id != request.producer_id {
            return Err(TxnError::InvalidProducerIdMapping);
        }
        if current.epoch != request.epoch {
            return Err(TxnError::ProducerFenced);
        }
        if current.state.is_prepare() {
            return Err(TxnError::ConcurrentTransactions);
        }
        Ok(request
            .partitions
            .iter()
            .map(|p| {
                let verdict = if current.partitions.contains(p) {
                    Ok(())
                } else {
                    Err(TxnError::TransactionAbortable)
                };
                (p.clone(), verdict)
            })
            .collect())
    }
}
