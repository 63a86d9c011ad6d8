//! The one error type of the broker, and the one place where errors become
//! Kafka error codes ([`HelixError::kafka_code`]).

use kafka_protocol::error::ResponseError;

/// Everything that can go wrong inside the broker.
#[derive(Debug, thiserror::Error)]
pub enum HelixError {
    #[error("configuration: {0}")]
    Config(String),
    #[error("i/o: {0}")]
    Io(#[from] std::io::Error),
    #[error("data directory {0} is in use by another broker")]
    DataDirLocked(String),
    #[error("corrupt stored state: {0}")]
    CorruptState(String),
    #[error("frame of {0} bytes is larger than the limit of {1}")]
    FrameTooLarge(i64, usize),
    #[error("malformed request: {0}")]
    MalformedRequest(String),
    #[error("unknown topic or partition")]
    UnknownTopicOrPartition,
    #[error("unknown topic id")]
    UnknownTopicId,
    #[error("topic already exists: {0}")]
    TopicAlreadyExists(String),
    #[error("invalid topic name: {0}")]
    InvalidTopic(String),
    #[error("invalid partition count: {0}")]
    InvalidPartitions(String),
    #[error("invalid replication factor: {0}")]
    InvalidReplicationFactor(String),
    #[error("invalid replica assignment: {0}")]
    InvalidReplicaAssignment(String),
    #[error("this node is not the controller")]
    NotController,
    /// An error another node answered with, as its Kafka code and message.
    #[error("{1}")]
    Remote(i16, String),
    #[error("invalid config: {0}")]
    InvalidConfig(String),
    #[error("record batch is corrupt: {0}")]
    CorruptBatch(String),
    #[error("record batch of {0} bytes exceeds max.message.bytes {1}")]
    MessageTooLarge(usize, i32),
    #[error("invalid record: {0}")]
    InvalidRecord(String),
    /// INVALID_RECORD naming the records at fault by their index in the
    /// batch (ProduceResponse v8+ `record_errors`, KIP-467): a client fails
    /// those with INVALID_RECORD and the rest of the batch as retriable.
    #[error("invalid record: {message}")]
    InvalidRecords { message: String, indexes: Vec<i32> },
    /// Stored data a reader cannot be given in its format (zstd for a
    /// Fetch v0-v3 reader).
    #[error("unsupported compression type: {0}")]
    UnsupportedCompressionType(String),
    #[error(
        "record timestamp {0} is outside the topic's message.timestamp.before/after.max.ms bounds"
    )]
    InvalidTimestamp(i64),
    #[error("duplicate sequence number")]
    DuplicateSequence,
    #[error("out of order sequence number: expected {expected}, got {got}")]
    OutOfOrderSequence { expected: i32, got: i32 },
    #[error("producer epoch is stale")]
    InvalidProducerEpoch,
    #[error("producer {0} is unknown to this partition and its batch does not start at sequence 0")]
    UnknownProducerId(i64),
    #[error("transactions are not supported")]
    TransactionsUnsupported,
    #[error("a newer transaction coordinator has written markers for this producer")]
    TransactionCoordinatorFenced,
    #[error("a non-transactional batch from a producer with an open transaction")]
    InvalidTxnState,
    #[error("offset out of range")]
    OffsetOutOfRange,
    #[error("request timed out waiting for {0}")]
    Timeout(&'static str),
    #[error("invalid request: {0}")]
    InvalidRequest(String),
    #[error("partition is shutting down")]
    ShuttingDown,
    #[error("wal: {0}")]
    Wal(helix_wal::WalError),
    #[error("raft: {0}")]
    Raft(#[from] helix_raft::RaftError),
    #[error("not the leader of this partition")]
    NotLeader,
    #[error("the client's leader epoch is older than the leader's")]
    FencedLeaderEpoch,
    #[error("the client's leader epoch is newer than the leader's")]
    UnknownLeaderEpoch,
    #[error("too much unapplied data in the partition's raft log")]
    RaftBackpressure,
    /// Something this node needs is still on its way (retriable).
    #[error("waiting for {0}")]
    NotReady(&'static str),
    /// This node's replica was refused at open: stored data it had flushed
    /// is damaged (ADR 0001). It serves nothing until repaired.
    #[error("this replica is refused: {0}")]
    DamagedReplica(String),
}

impl From<helix_wal::WalError> for HelixError {
    fn from(e: helix_wal::WalError) -> HelixError {
        match e {
            helix_wal::WalError::OffsetOutOfRange { .. } => HelixError::OffsetOutOfRange,
            other => HelixError::Wal(other),
        }
    }
}

impl From<helix_raft::ProposeError> for HelixError {
    fn from(e: helix_raft::ProposeError) -> HelixError {
        match e {
            helix_raft::ProposeError::Backpressure => HelixError::RaftBackpressure,
            _ => HelixError::NotLeader,
        }
    }
}

/// The broker's result type.
pub type Result<T> = std::result::Result<T, HelixError>;

impl HelixError {
    /// The Kafka error code a client sees for this error.
    pub fn kafka_code(&self) -> i16 {
        let e = match self {
            HelixError::Config(_)
            | HelixError::DataDirLocked(_)
            | HelixError::CorruptState(_)
            | HelixError::MalformedRequest(_)
            | HelixError::FrameTooLarge(..) => ResponseError::UnknownServerError,
            HelixError::Io(_) => ResponseError::KafkaStorageError,
            HelixError::UnknownTopicOrPartition => ResponseError::UnknownTopicOrPartition,
            HelixError::UnknownTopicId => ResponseError::UnknownTopicId,
            HelixError::TopicAlreadyExists(_) => ResponseError::TopicAlreadyExists,
            HelixError::InvalidTopic(_) => ResponseError::InvalidTopicException,
            HelixError::InvalidPartitions(_) => ResponseError::InvalidPartitions,
            HelixError::InvalidReplicationFactor(_) => ResponseError::InvalidReplicationFactor,
            HelixError::InvalidReplicaAssignment(_) => ResponseError::InvalidReplicaAssignment,
            HelixError::NotController => ResponseError::NotController,
            HelixError::Remote(code, _) => return *code,
            HelixError::InvalidConfig(_) => ResponseError::InvalidConfig,
            HelixError::CorruptBatch(_) => ResponseError::CorruptMessage,
            HelixError::MessageTooLarge(..) => ResponseError::MessageTooLarge,
            HelixError::InvalidRecord(_) | HelixError::InvalidRecords { .. } => {
                ResponseError::InvalidRecord
            }
            HelixError::UnsupportedCompressionType(_) => ResponseError::UnsupportedCompressionType,
            HelixError::InvalidTimestamp(_) => ResponseError::InvalidTimestamp,
            HelixError::DuplicateSequence => ResponseError::DuplicateSequenceNumber,
            HelixError::OutOfOrderSequence { .. } => ResponseError::OutOfOrderSequenceNumber,
            HelixError::InvalidProducerEpoch => ResponseError::InvalidProducerEpoch,
            HelixError::UnknownProducerId(_) => ResponseError::UnknownProducerId,
            HelixError::TransactionsUnsupported => {
                ResponseError::TransactionalIdAuthorizationFailed
            }
            HelixError::TransactionCoordinatorFenced => ResponseError::TransactionCoordinatorFenced,
            HelixError::InvalidTxnState => ResponseError::InvalidTxnState,
            HelixError::OffsetOutOfRange => ResponseError::OffsetOutOfRange,
            // REQUEST_TIMED_OUT is retried by librdkafka and by the Java
            // producer (a RetriableException); see docs/adr/0011.
            HelixError::Timeout(_) => ResponseError::RequestTimedOut,
            HelixError::InvalidRequest(_) => ResponseError::InvalidRequest,
            HelixError::ShuttingDown | HelixError::NotLeader => ResponseError::NotLeaderOrFollower,
            HelixError::FencedLeaderEpoch => ResponseError::FencedLeaderEpoch,
            HelixError::UnknownLeaderEpoch => ResponseError::UnknownLeaderEpoch,
            HelixError::Wal(_) => ResponseError::KafkaStorageError,
            HelixError::Raft(_) => ResponseError::UnknownServerError,
            HelixError::RaftBackpressure => ResponseError::RequestTimedOut,
            HelixError::NotReady(_) => ResponseError::CoordinatorLoadInProgress,
            HelixError::DamagedReplica(_) => ResponseError::KafkaStorageError,
        };
        e.code()
    }

    /// Whether a client sees `code` for this error, raised here or
    /// answered by a peer ([`HelixError::Remote`]): the one way code outside
    /// this module tells a Kafka error by its code.
    pub fn is(&self, code: ResponseError) -> bool {
        self.kafka_code() == code.code()
    }

    /// A short text for the response's error message fields.
    pub fn message(&self) -> String {
        self.to_string()
    }
}

/// Code 0: no error.
pub const NONE: i16 = 0;

/// Shorthand for a Kafka code from the crate's table.
pub fn code(e: ResponseError) -> i16 {
    e.code()
}
