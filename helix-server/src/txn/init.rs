//! InitProducerId with a transactional id (Kafka's `handleInitProducerId`):
//! a new producer id for a new transactional id, an epoch bump for a known
//! one, fencing (and aborting the open transaction of) the producer that
//! held it, KIP-360's continuation of a producer that names its current
//! id and epoch, and a new producer id once the epochs run out.
//!
//! Producer ids come from the controller's blocks, which the pure state
//! machine cannot fetch: the host asks [`Coordinator::needs_producer_id`]
//! and supplies one with the request when it says so.

use super::coordinator::Coordinator;
use super::error::TxnError;
use super::metadata::{TxnMetadata, epoch_exhausted};
use super::record::Record;
use super::request::InitProducerId;
use super::response::{Answer, Effects};
use super::state::TxnState;
use super::types::{ProducerIdAndEpoch, RequestToken};

/// What an InitProducerId proposes.
enum InitDecision {
    /// A new epoch (or producer id), answered once durable.
    Bump(TxnMetadata),
    /// The open transaction is aborted under a bumped epoch first; once
    /// that is durable the client is told CONCURRENT_TRANSACTIONS and
    /// retries, which bumps the epoch a second time.
    FenceAndAbort(TxnMetadata),
}

/// Whether a request naming `expected` may go on with `current`
/// (Kafka's `isValidProducerId`): `current` has no epoch yet, or the
/// request names its producer id, or the previous one with an exhausted
/// epoch (a retry of the rotation whose answer was lost).
fn names_current_producer(current: &TxnMetadata, expected: ProducerIdAndEpoch) -> bool {
    current.epoch == super::types::NO_PRODUCER_EPOCH
        || expected.producer_id == current.producer_id
        || (expected.producer_id == current.last_producer_id && epoch_exhausted(expected.epoch))
}

/// An idle transactional id needs a new producer id when its epochs are
/// exhausted, unless the request names another epoch.
fn rotates(current: &TxnMetadata, expected: Option<ProducerIdAndEpoch>) -> bool {
    epoch_exhausted(current.epoch) && expected.is_none_or(|e| e.epoch == current.epoch)
}

impl Coordinator {
    /// Whether an InitProducerId for `transactional_id` (naming `expected`)
    /// would take a new producer id: the transactional id is unknown, or
    /// its producer id's epochs are exhausted. A pure query, so the host
    /// asks the controller's block only for requests that need an id.
    pub fn needs_producer_id(
        &self,
        transactional_id: &str,
        expected: Option<ProducerIdAndEpoch>,
    ) -> bool {
        let partition = self.partition_for(transactional_id);
        let Some(shard) = self.partitions.get(&partition) else {
            return false;
        };
        match shard.transactions.get(transactional_id) {
            None => true,
            Some(current) => {
                matches!(
                    current.state,
                    TxnState::Empty | TxnState::CompleteCommit | TxnState::CompleteAbort
                ) && rotates(current, expected)
            }
        }
    }

    pub(super) fn init_producer_id(
        &mut self,
        token: RequestToken,
        request: InitProducerId,
        now: i64,
    ) {
        let decided = self.decide_init(&request, now);
        let (partition, decision) = match decided {
            Ok(decided) => decided,
            Err(error) => return self.answer(token, Answer::InitProducerId(Err(error))),
        };
        let (metadata, answer) = match decision {
            InitDecision::Bump(metadata) => {
                let given = ProducerIdAndEpoch {
                    producer_id: metadata.producer_id,
                    epoch: metadata.epoch,
                };
                (metadata, Answer::InitProducerId(Ok(given)))
            }
            InitDecision::FenceAndAbort(metadata) => (
                metadata,
                Answer::InitProducerId(Err(TxnError::ConcurrentTransactions)),
            ),
        };
        let record = Record::Metadata {
            transactional_id: request.transactional_id,
            metadata,
        };
        let mut out = Effects::default();
        out.reply_after(record, token, answer);
        self.flush(partition, out);
    }

    fn decide_init(
        &mut self,
        request: &InitProducerId,
        now: i64,
    ) -> Result<(super::types::StatePartition, InitDecision), TxnError> {
        if request.transactional_id.is_empty() {
            return Err(TxnError::InvalidRequest);
        }
        // Kafka refuses a negative producer id (`prepareTransitionTo`); one
        // from the host's block never is.
        if request.new_producer_id.is_some_and(|id| id < 0) {
            return Err(TxnError::InvalidRequest);
        }
        if !(1..=self.config.max_timeout_ms).contains(&request.timeout_ms) {
            return Err(TxnError::InvalidTransactionTimeout);
        }
        let (partition, shard) = self.active(&request.transactional_id)?;
        if shard.pending.contains_key(&request.transactional_id) {
            return Err(TxnError::ConcurrentTransactions);
        }
        // A transactional id's first producer id is needed before anything
        // else; without one the client retries (the host supplies one then).
        let current = match shard.transactions.get(&request.transactional_id) {
            Some(current) => current.clone(),
            None => {
                let producer_id = request
                    .new_producer_id
                    .ok_or(TxnError::ConcurrentTransactions)?;
                TxnMetadata::fresh(producer_id, request.timeout_ms, now)
            }
        };
        if let Some(expected) = request.expected
            && !names_current_producer(&current, expected)
        {
            return Err(TxnError::ProducerFenced);
        }
        let decision = match current.state {
            TxnState::PrepareCommit | TxnState::PrepareAbort => {
                return Err(TxnError::ConcurrentTransactions);
            }
            TxnState::Empty | TxnState::CompleteCommit | TxnState::CompleteAbort => {
                if rotates(&current, request.expected) {
                    let producer_id = request
                        .new_producer_id
                        .ok_or(TxnError::ConcurrentTransactions)?;
                    InitDecision::Bump(current.rotate_producer_id(
                        producer_id,
                        request.timeout_ms,
                        request.expected.is_some(),
                        now,
                    )?)
                } else {
                    let expected = request.expected.map(|e| e.epoch);
                    InitDecision::Bump(current.bump_epoch(request.timeout_ms, expected, now)?)
                }
            }
            TxnState::Ongoing => InitDecision::FenceAndAbort(current.fence_and_abort(now)?),
            // Never stored by a coordinator: Kafka fails the request.
            TxnState::Dead | TxnState::PrepareEpochFence => {
                return Err(TxnError::IllegalTransition {
                    from: current.state,
                    to: TxnState::Empty,
                });
            }
        };
        Ok((partition, decision))
    }
}
