//! What the coordinator hands back to its host: answers to requests,
//! proposals of records, and marker writes owed to data partitions.
//! Transaction logic writes into an [`Effects`]; the coordinator numbers its
//! proposals and moves it into [`Ready`].

use bytes::Bytes;

use super::error::TxnError;
use super::record::Record;
use super::types::{ProducerIdAndEpoch, ProposalId, RequestToken, StatePartition, TopicPartition};

/// A verify-only answer per partition: NONE (in the transaction) or
/// TRANSACTION_ABORTABLE (not in it).
pub type PartitionVerdicts = Vec<(TopicPartition, Result<(), TxnError>)>;

/// The coordinator's answer to one request, before version shaping.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer {
    InitProducerId(Result<ProducerIdAndEpoch, TxnError>),
    /// AddPartitionsToTxn v0-v3 and AddOffsetsToTxn: one code for the
    /// whole request, as Kafka answers it.
    AddPartitions(Result<(), TxnError>),
    /// A v4 verify-only request: a code per partition, or one for all.
    VerifyPartitions(Result<PartitionVerdicts, TxnError>),
    AddOffsets(Result<(), TxnError>),
    EndTxn(Result<(), TxnError>),
}

impl Answer {
    /// The same kind of answer, failed with `error` (its proposal will
    /// never be acknowledged).
    pub fn into_failed(self, error: TxnError) -> Self {
        match self {
            Answer::InitProducerId(_) => Answer::InitProducerId(Err(error)),
            Answer::AddPartitions(_) => Answer::AddPartitions(Err(error)),
            Answer::VerifyPartitions(_) => Answer::VerifyPartitions(Err(error)),
            Answer::AddOffsets(_) => Answer::AddOffsets(Err(error)),
            Answer::EndTxn(_) => Answer::EndTxn(Err(error)),
        }
    }
}

/// An answer for the request the host identified by `token`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reply {
    pub token: RequestToken,
    pub answer: Answer,
}

/// Records to append to a `__transaction_state` partition through Raft.
/// The host proposes `entry` as one Raft entry (acks=all) and later
/// reports `on_acknowledged(id)` or `on_proposal_failed(id)`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Proposal {
    pub id: ProposalId,
    pub partition: StatePartition,
    pub entry: Bytes,
    /// The entry is a snapshot of the whole view: once it is acknowledged
    /// the log before it may be deleted.
    pub compacts: bool,
}

/// Markers owed to the partitions of a transaction whose Prepare state is
/// durable: the host writes a control batch (commit or abort, this producer
/// id and epoch, this coordinator epoch) to each partition, then reports
/// `on_markers_written` with the same transactional id, producer id and
/// epoch; the coordinator then completes the transaction.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MarkerWrite {
    pub partition: StatePartition,
    pub transactional_id: String,
    pub producer_id: i64,
    pub epoch: i16,
    pub commit: bool,
    /// The leadership epoch of the `__transaction_state` partition
    /// (Kafka's coordinator epoch): partitions refuse markers of an older
    /// coordinator.
    pub coordinator_epoch: i32,
    pub partitions: Vec<TopicPartition>,
}

/// Everything the host must act on after an input, in order: send the
/// replies, propose the entries, write the markers.
#[derive(Debug, Default)]
pub struct Ready {
    pub replies: Vec<Reply>,
    pub proposals: Vec<Proposal>,
    pub markers: Vec<MarkerWrite>,
}

impl Ready {
    pub fn is_empty(&self) -> bool {
        self.replies.is_empty() && self.proposals.is_empty() && self.markers.is_empty()
    }
}

/// What to do once a proposal is acknowledged (or fails).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OnAcknowledged {
    /// Nothing waits (a timeout's abort, a completion, an expiry).
    Nothing,
    /// Answer `answer` to `token`; if the proposal fails, the same kind of
    /// answer with NOT_COORDINATOR.
    Reply { token: RequestToken, answer: Answer },
}

/// One transactional id's record to propose, with what waits on it.
#[derive(Debug)]
pub struct PendingProposal {
    pub record: Record,
    pub waiter: OnAcknowledged,
}

/// Proposals collected while one input is handled (answers that need no
/// record go straight to the ready output).
#[derive(Debug, Default)]
pub struct Effects {
    pub proposals: Vec<PendingProposal>,
}

impl Effects {
    pub fn propose(&mut self, record: Record, waiter: OnAcknowledged) {
        self.proposals.push(PendingProposal { record, waiter });
    }

    /// Answers `answer` once `record` is acknowledged.
    pub fn reply_after(&mut self, record: Record, token: RequestToken, answer: Answer) {
        self.propose(record, OnAcknowledged::Reply { token, answer });
    }
}
