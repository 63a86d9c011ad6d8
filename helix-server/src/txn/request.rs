//! The requests the coordinator decides, one transactional id each. The
//! host (the next step's `txn::service`) decodes Kafka's requests into
//! these and shapes the answers for the negotiated version; an
//! AddPartitionsToTxn v4 batch becomes one request per transaction.

use std::collections::BTreeSet;

use super::types::{ProducerIdAndEpoch, TopicPartition};

/// InitProducerId with a transactional id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InitProducerId {
    pub transactional_id: String,
    pub timeout_ms: i32,
    /// KIP-360 (v3+): the producer id and epoch the client holds and asks
    /// to continue; `None` for a producer starting afresh.
    pub expected: Option<ProducerIdAndEpoch>,
    /// A producer id from the controller's blocks, used if the coordinator
    /// needs a new one (a new transactional id, or epochs exhausted). The
    /// host supplies one when [`super::Coordinator::needs_producer_id`]
    /// says so; an unused one is simply never handed out.
    pub new_producer_id: Option<i64>,
}

/// AddPartitionsToTxn (v0-v3, and v4's non-verify transactions).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AddPartitions {
    pub transactional_id: String,
    pub producer_id: i64,
    pub epoch: i16,
    pub partitions: BTreeSet<TopicPartition>,
}

/// AddOffsetsToTxn: the group's `__consumer_offsets` partition joins the
/// transaction.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AddOffsets {
    pub transactional_id: String,
    pub producer_id: i64,
    pub epoch: i16,
    pub group_id: String,
    /// How many partitions `__consumer_offsets` has (the group
    /// coordinator's setting).
    pub offsets_partitions: u32,
}

/// EndTxn.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EndTxn {
    pub transactional_id: String,
    pub producer_id: i64,
    pub epoch: i16,
    pub commit: bool,
}

/// A request of one of the coordinator's APIs, one transactional id each.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TxnRequest {
    InitProducerId(InitProducerId),
    AddPartitions(AddPartitions),
    /// KIP-890 part 1 (AddPartitionsToTxn v4 `verify_only`), asked by a
    /// partition leader: are these partitions in the ongoing transaction of
    /// this producer id and epoch? Changes nothing.
    VerifyPartitions(AddPartitions),
    /// Built only by tests until the concurrent branch `txo` (AddOffsetsToTxn
    /// through dispatch) lands and sends it from the service.
    #[allow(dead_code)]
    AddOffsets(AddOffsets),
    EndTxn(EndTxn),
}
