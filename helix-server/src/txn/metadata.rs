//! A transactional id's metadata (Kafka's `TransactionMetadata`) and its
//! transitions. Every transition is a pure function from the current
//! metadata to the next one: the coordinator proposes the next one as a
//! record and adopts it only once the record is acknowledged, so an illegal
//! transition is an error value, never a panic, and nothing changes before
//! it is durable.

use std::collections::BTreeSet;

use super::error::TxnError;
use super::state::TxnState;
use super::types::{NO_PRODUCER_EPOCH, NO_PRODUCER_ID, TopicPartition};

/// `to` may follow `from`, or the error saying it may not.
pub fn check_transition(from: TxnState, to: TxnState) -> Result<(), TxnError> {
    if to.valid_previous().contains(&from) {
        Ok(())
    } else {
        Err(TxnError::IllegalTransition { from, to })
    }
}

/// Kafka refuses to hand out an epoch this high so that it can always fence
/// the producer holding it with one more (`isEpochExhausted`).
pub fn epoch_exhausted(epoch: i16) -> bool {
    epoch >= i16::MAX - 1
}

/// What `__transaction_state` holds for one transactional id: the whole of
/// it is written by every transition, so the last record is the state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TxnMetadata {
    pub producer_id: i64,
    /// The producer id before the last InitProducerId (the one rotated away
    /// from when epochs ran out): a KIP-360 retry may still name it.
    pub last_producer_id: i64,
    pub epoch: i16,
    /// The epoch before the last KIP-360 bump; -1 after a fence, so the
    /// fenced producer cannot claim the new epoch.
    pub last_epoch: i16,
    pub timeout_ms: i32,
    pub state: TxnState,
    /// The partitions of the open transaction (empty unless Ongoing or
    /// Prepare*).
    pub partitions: BTreeSet<TopicPartition>,
    /// When the first partition of the open transaction was added (ms), -1
    /// when none was.
    pub start_ms: i64,
    pub last_update_ms: i64,
}

impl TxnMetadata {
    /// A transactional id seen for the first time: Empty, producer id from
    /// the host, no epoch yet. It is never stored as such: the epoch bump
    /// that follows is.
    pub fn fresh(producer_id: i64, timeout_ms: i32, now_ms: i64) -> Self {
        Self {
            producer_id,
            last_producer_id: NO_PRODUCER_ID,
            epoch: NO_PRODUCER_EPOCH,
            last_epoch: NO_PRODUCER_EPOCH,
            timeout_ms,
            state: TxnState::Empty,
            partitions: BTreeSet::new(),
            start_ms: -1,
            last_update_ms: now_ms,
        }
    }

    /// A transaction is open or being ended.
    pub fn has_open_transaction(&self) -> bool {
        matches!(
            self.state,
            TxnState::Ongoing | TxnState::PrepareCommit | TxnState::PrepareAbort
        )
    }

    fn moved_to(&self, to: TxnState, now_ms: i64) -> Result<Self, TxnError> {
        check_transition(self.state, to)?;
        Ok(Self {
            state: to,
            last_update_ms: now_ms,
            ..self.clone()
        })
    }

    /// InitProducerId on an idle transactional id: the next epoch
    /// (`prepareIncrementProducerEpoch`). `expected` is the epoch a KIP-360
    /// request names: it matches the current one (continue: bump, and
    /// remember it as the last), the last one (a retry of a bump that
    /// succeeded: same epoch again), or neither (PRODUCER_FENCED).
    pub fn bump_epoch(
        &self,
        timeout_ms: i32,
        expected: Option<i16>,
        now_ms: i64,
    ) -> Result<Self, TxnError> {
        if epoch_exhausted(self.epoch) {
            return Err(TxnError::EpochOverflow);
        }
        let bumped = self.epoch + 1;
        let (epoch, last_epoch) = match expected {
            None => (bumped, NO_PRODUCER_EPOCH),
            Some(e) if self.epoch == NO_PRODUCER_EPOCH || e == self.epoch => (bumped, self.epoch),
            Some(e) if e == self.last_epoch => (self.epoch, self.last_epoch),
            Some(_) => return Err(TxnError::ProducerFenced),
        };
        let next = self.moved_to(TxnState::Empty, now_ms)?;
        Ok(Self {
            last_producer_id: self.producer_id,
            epoch,
            last_epoch,
            timeout_ms,
            partitions: BTreeSet::new(),
            start_ms: -1,
            ..next
        })
    }

    /// InitProducerId when the epochs of the producer id are exhausted: a
    /// new producer id at epoch 0 (`prepareProducerIdRotation`).
    pub fn rotate_producer_id(
        &self,
        producer_id: i64,
        timeout_ms: i32,
        record_last_epoch: bool,
        now_ms: i64,
    ) -> Result<Self, TxnError> {
        if self.has_open_transaction() {
            return Err(TxnError::IllegalTransition {
                from: self.state,
                to: TxnState::Empty,
            });
        }
        let next = self.moved_to(TxnState::Empty, now_ms)?;
        Ok(Self {
            producer_id,
            last_producer_id: self.producer_id,
            epoch: 0,
            last_epoch: if record_last_epoch {
                self.epoch
            } else {
                NO_PRODUCER_EPOCH
            },
            timeout_ms,
            partitions: BTreeSet::new(),
            start_ms: -1,
            ..next
        })
    }

    /// Fencing the producer of an open transaction (a second
    /// InitProducerId, or the timeout): through PrepareEpochFence to
    /// PrepareAbort with the epoch bumped and the last epoch forgotten, so
    /// the old producer's EndTxn and AddPartitions are PRODUCER_FENCED and
    /// the abort markers carry the new epoch.
    pub fn fence_and_abort(&self, now_ms: i64) -> Result<Self, TxnError> {
        let fencing = self.moved_to(TxnState::PrepareEpochFence, now_ms)?;
        let epoch = self.epoch.checked_add(1).ok_or(TxnError::EpochOverflow)?;
        let aborting = fencing.moved_to(TxnState::PrepareAbort, now_ms)?;
        Ok(Self {
            epoch,
            last_epoch: NO_PRODUCER_EPOCH,
            ..aborting
        })
    }

    /// AddPartitionsToTxn / AddOffsetsToTxn: Ongoing with `added` joined; a
    /// transaction starting now takes `now_ms` as its start.
    pub fn add_partitions(
        &self,
        added: &BTreeSet<TopicPartition>,
        now_ms: i64,
    ) -> Result<Self, TxnError> {
        let mut next = self.moved_to(TxnState::Ongoing, now_ms)?;
        if self.state != TxnState::Ongoing {
            next.start_ms = now_ms;
        }
        next.partitions.extend(added.iter().cloned());
        Ok(next)
    }

    /// EndTxn: PrepareCommit or PrepareAbort, partitions kept for the
    /// markers.
    pub fn prepare_end(&self, commit: bool, now_ms: i64) -> Result<Self, TxnError> {
        let to = if commit {
            TxnState::PrepareCommit
        } else {
            TxnState::PrepareAbort
        };
        self.moved_to(to, now_ms)
    }

    /// Every marker is written: CompleteCommit or CompleteAbort, no
    /// partitions left.
    pub fn complete(&self, now_ms: i64) -> Result<Self, TxnError> {
        let to = match self.state {
            TxnState::PrepareCommit => TxnState::CompleteCommit,
            TxnState::PrepareAbort => TxnState::CompleteAbort,
            from => {
                return Err(TxnError::IllegalTransition {
                    from,
                    to: TxnState::CompleteCommit,
                });
            }
        };
        let mut next = self.moved_to(to, now_ms)?;
        next.partitions.clear();
        Ok(next)
    }

    /// The transactional id expired (`transactional.id.expiration.ms`).
    pub fn dead(&self) -> Result<Self, TxnError> {
        let mut next = self.moved_to(TxnState::Dead, self.last_update_ms)?;
        next.partitions.clear();
        Ok(next)
    }
}
