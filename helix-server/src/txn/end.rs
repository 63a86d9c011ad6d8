//! EndTxn (Kafka's `endTransaction` as a client calls it): an Ongoing
//! transaction moves to PrepareCommit or PrepareAbort, answered once that
//! record is acknowledged; the coordinator then asks for its markers and
//! completes it when the host reports them written. Retries get Kafka's
//! answers: the same decision after it completed is NONE, the opposite one
//! INVALID_TXN_STATE, either while markers are being written
//! CONCURRENT_TRANSACTIONS (same decision) or INVALID_TXN_STATE.

use super::coordinator::Coordinator;
use super::error::TxnError;
use super::record::Record;
use super::request::EndTxn;
use super::response::{Answer, Effects};
use super::state::TxnState;
use super::types::{RequestToken, StatePartition};

/// What an EndTxn decides.
enum EndDecision {
    /// A retry of an EndTxn that already completed the same way: NONE.
    AlreadyDone,
    /// The Prepare record, answered once durable.
    Prepare(StatePartition, Record),
}

impl Coordinator {
    pub(super) fn end_txn(&mut self, token: RequestToken, request: EndTxn, now: i64) {
        match self.decide_end(&request, now) {
            Err(error) => self.answer(token, Answer::EndTxn(Err(error))),
            Ok(EndDecision::AlreadyDone) => self.answer(token, Answer::EndTxn(Ok(()))),
            Ok(EndDecision::Prepare(partition, record)) => {
                let mut out = Effects::default();
                out.reply_after(record, token, Answer::EndTxn(Ok(())));
                self.flush(partition, out);
            }
        }
    }

    /// Kafka's checks for a client's EndTxn, in its order.
    fn decide_end(&mut self, request: &EndTxn, now: i64) -> Result<EndDecision, TxnError> {
        let (partition, shard) = self.active(&request.transactional_id)?;
        let current = shard
            .transactions
            .get(&request.transactional_id)
            .ok_or(TxnError::InvalidProducerIdMapping)?;
        if current.producer_id != request.producer_id {
            return Err(TxnError::InvalidProducerIdMapping);
        }
        // A client never bumps the epoch: anything but the current one is
        // a fenced producer.
        if current.epoch != request.epoch {
            return Err(TxnError::ProducerFenced);
        }
        if shard.pending.contains_key(&request.transactional_id) {
            return Err(TxnError::ConcurrentTransactions);
        }
        let commit = request.commit;
        match current.state {
            TxnState::Ongoing => {
                let next = current.prepare_end(commit, now)?;
                let record = Record::Metadata {
                    transactional_id: request.transactional_id.clone(),
                    metadata: next,
                };
                Ok(EndDecision::Prepare(partition, record))
            }
            TxnState::CompleteCommit if commit => Ok(EndDecision::AlreadyDone),
            TxnState::CompleteAbort if !commit => Ok(EndDecision::AlreadyDone),
            TxnState::PrepareCommit if commit => Err(TxnError::ConcurrentTransactions),
            TxnState::PrepareAbort if !commit => Err(TxnError::ConcurrentTransactions),
            TxnState::CompleteCommit
            | TxnState::CompleteAbort
            | TxnState::PrepareCommit
            | TxnState::PrepareAbort
            | TxnState::Empty => Err(TxnError::InvalidTxnState),
            // Never stored by a coordinator: Kafka fails the request.
            TxnState::Dead | TxnState::PrepareEpochFence => Err(TxnError::IllegalTransition {
                from: current.state,
                to: if commit {
                    TxnState::PrepareCommit
                } else {
                    TxnState::PrepareAbort
                },
            }),
        }
    }
}
