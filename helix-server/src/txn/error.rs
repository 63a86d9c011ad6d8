//! The transaction coordinator's errors and the one place they become Kafka
//! error codes. Illegal state transitions and undecodable records are typed
//! errors, never panics.

use kafka_protocol::ResponseError;
use kafka_protocol::messages::ApiKey;

use super::state::TxnState;

/// Everything a transaction operation can answer besides success (carried
/// between nodes by `txn::peer`, hence serde).
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, thiserror::Error, serde::Serialize, serde::Deserialize,
)]
pub enum TxnError {
    #[error("the transactional id is empty or too long, or a field is out of range")]
    InvalidRequest,
    #[error("this node does not coordinate the transactional id")]
    NotCoordinator,
    #[error("the coordinator partition is being loaded")]
    LoadInProgress,
    #[error("another operation on the transaction is in progress")]
    ConcurrentTransactions,
    #[error("the producer's epoch is older than the transaction's")]
    InvalidProducerEpoch,
    #[error("a newer producer with the same transactional id fenced this one")]
    ProducerFenced,
    #[error("the transaction's state does not allow this operation")]
    InvalidTxnState,
    #[error("the producer id is not the one of the transactional id")]
    InvalidProducerIdMapping,
    #[error("the transactional id is not known")]
    TransactionalIdNotFound,
    #[error("transaction timeout outside (0, transaction.max.timeout.ms]")]
    InvalidTransactionTimeout,
    #[error("the partition is not part of the ongoing transaction")]
    TransactionAbortable,
    #[error("illegal transition from {from:?} to {to:?}")]
    IllegalTransition { from: TxnState, to: TxnState },
    #[error("the producer epoch cannot be bumped past i16::MAX")]
    EpochOverflow,
    #[error("record truncated: needed {needed} bytes, {left} left")]
    RecordTruncated { needed: usize, left: usize },
    #[error("record entry checksum mismatch")]
    RecordChecksum,
    #[error("unknown record format version {0}")]
    RecordVersion(u8),
    #[error("unknown record kind {0}")]
    RecordKind(u8),
    #[error("unknown transaction state id {0}")]
    RecordState(u8),
    #[error("record text is not UTF-8")]
    RecordUtf8,
    #[error("record has {0} trailing bytes")]
    RecordTrailing(usize),
}

impl TxnError {
    /// The Kafka error code this error is answered with.
    pub fn code(self) -> i16 {
        let error = match self {
            TxnError::InvalidRequest => ResponseError::InvalidRequest,
            TxnError::NotCoordinator => ResponseError::NotCoordinator,
            TxnError::LoadInProgress => ResponseError::CoordinatorLoadInProgress,
            TxnError::ConcurrentTransactions => ResponseError::ConcurrentTransactions,
            TxnError::InvalidProducerEpoch => ResponseError::InvalidProducerEpoch,
            TxnError::ProducerFenced => ResponseError::ProducerFenced,
            TxnError::InvalidTxnState => ResponseError::InvalidTxnState,
            TxnError::InvalidProducerIdMapping => ResponseError::InvalidProducerIdMapping,
            TxnError::TransactionalIdNotFound => ResponseError::TransactionalIdNotFound,
            TxnError::InvalidTransactionTimeout => ResponseError::InvalidTransactionTimeout,
            TxnError::TransactionAbortable => ResponseError::TransactionAbortable,
            // Kafka throws IllegalStateException in these cases: the
            // request fails with UNKNOWN_SERVER_ERROR.
            TxnError::IllegalTransition { .. }
            | TxnError::EpochOverflow
            | TxnError::RecordTruncated { .. }
            | TxnError::RecordChecksum
            | TxnError::RecordVersion(_)
            | TxnError::RecordKind(_)
            | TxnError::RecordState(_)
            | TxnError::RecordUtf8
            | TxnError::RecordTrailing(_) => ResponseError::UnknownServerError,
        };
        error.code()
    }

    /// The code answered to `api` at `version`: clients older than
    /// PRODUCER_FENCED (InitProducerId v0-v3, AddPartitionsToTxn,
    /// AddOffsetsToTxn and EndTxn v0-v1) get INVALID_PRODUCER_EPOCH
    /// instead, as Kafka's `KafkaApis` answers them.
    pub fn code_at(self, api: ApiKey, version: i16) -> i16 {
        let fenced_known_from = match api {
            ApiKey::InitProducerId => 4,
            ApiKey::AddPartitionsToTxn | ApiKey::AddOffsetsToTxn | ApiKey::EndTxn => 2,
            _ => 0,
        };
        if self == TxnError::ProducerFenced && version < fenced_known_from {
            TxnError::InvalidProducerEpoch.code()
        } else {
            self.code()
        }
    }

    /// The Produce error for a transactional batch whose partition the
    /// coordinator does not confirm in the producer's transaction (Kafka
    /// 3.9's answers to a failed verification): not in the transaction,
    /// INVALID_TXN_STATE; an old epoch, INVALID_PRODUCER_EPOCH; the
    /// coordinator loading, moving or elsewhere, NOT_ENOUGH_REPLICAS
    /// (retriable).
    pub fn produce_code(self) -> i16 {
        match self {
            TxnError::TransactionAbortable | TxnError::InvalidTxnState => {
                ResponseError::InvalidTxnState.code()
            }
            TxnError::ProducerFenced | TxnError::InvalidProducerEpoch => {
                ResponseError::InvalidProducerEpoch.code()
            }
            TxnError::InvalidProducerIdMapping | TxnError::TransactionalIdNotFound => {
                ResponseError::InvalidProducerIdMapping.code()
            }
            TxnError::NotCoordinator
            | TxnError::LoadInProgress
            | TxnError::ConcurrentTransactions => ResponseError::NotEnoughReplicas.code(),
            other => other.code(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn old_clients_get_invalid_producer_epoch_instead_of_producer_fenced() {
        let fenced = TxnError::ProducerFenced;
        assert_eq!(fenced.code_at(ApiKey::InitProducerId, 3), 47);
        assert_eq!(fenced.code_at(ApiKey::InitProducerId, 4), 90);
        assert_eq!(fenced.code_at(ApiKey::EndTxn, 1), 47);
        assert_eq!(fenced.code_at(ApiKey::EndTxn, 2), 90);
        assert_eq!(fenced.code_at(ApiKey::AddPartitionsToTxn, 1), 47);
        assert_eq!(fenced.code_at(ApiKey::AddOffsetsToTxn, 3), 90);
        assert_eq!(
            TxnError::ConcurrentTransactions.code_at(ApiKey::EndTxn, 0),
            51
        );
    }

    #[test]
    fn produce_codes_follow_kafkas_verification_answers() {
        assert_eq!(TxnError::TransactionAbortable.produce_code(), 48);
        assert_eq!(TxnError::ProducerFenced.produce_code(), 47);
        assert_eq!(TxnError::InvalidProducerIdMapping.produce_code(), 49);
        // Retriable while the coordinator loads or moves.
        assert_eq!(TxnError::LoadInProgress.produce_code(), 19);
        assert_eq!(TxnError::NotCoordinator.produce_code(), 19);
    }
}
