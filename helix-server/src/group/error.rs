//! The coordinator's errors and the one place they become Kafka error codes.
//! Record decoding has its own variants: garbage is a typed error, never a
//! panic.

use kafka_protocol::ResponseError;

/// Everything a group operation can answer besides success.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum GroupError {
    #[error("group id is empty or longer than the configured limit")]
    InvalidGroupId,
    #[error("this node does not coordinate the group")]
    NotCoordinator,
    #[error("the coordinator partition is being loaded")]
    LoadInProgress,
    #[error("the group is being deleted or was deleted")]
    CoordinatorNotAvailable,
    #[error("the group does not know this member id")]
    UnknownMemberId,
    #[error("the member must rejoin with the member id it was given")]
    MemberIdRequired,
    #[error("the request's generation is not the group's")]
    IllegalGeneration,
    #[error("the group is rebalancing")]
    RebalanceInProgress,
    #[error("another member holds this group.instance.id")]
    FencedInstanceId,
    #[error("protocol type or protocols do not match the group")]
    InconsistentGroupProtocol,
    #[error("session timeout outside the configured bounds")]
    InvalidSessionTimeout,
    #[error("the group has reached its maximum size")]
    GroupMaxSizeReached,
    #[error("the group does not exist")]
    GroupIdNotFound,
    #[error("the group still has members")]
    NonEmptyGroup,
    #[error("the group is subscribed to the topic")]
    GroupSubscribedToTopic,
    #[error("offset metadata longer than the configured limit")]
    OffsetMetadataTooLarge,
    #[error("a field is out of its allowed range")]
    InvalidRequest,
    #[error("a transaction holds an offset of the partition pending")]
    UnstableOffsetCommit,
    #[error("the transactional producer's epoch is older than the partition's")]
    InvalidProducerEpoch,
    #[error("record truncated: needed {needed} bytes, {left} left")]
    RecordTruncated { needed: usize, left: usize },
    #[error("record entry checksum mismatch")]
    RecordChecksum,
    #[error("unknown record format version {0}")]
    RecordVersion(u8),
    #[error("unknown record kind {0}")]
    RecordKind(u8),
    #[error("record text is not UTF-8")]
    RecordUtf8,
    #[error("record has {0} trailing bytes")]
    RecordTrailing(usize),
}

impl GroupError {
    /// The Kafka error code this error is answered with.
    pub fn code(self) -> i16 {
        let error = match self {
            GroupError::InvalidGroupId => ResponseError::InvalidGroupId,
            GroupError::NotCoordinator => ResponseError::NotCoordinator,
            GroupError::LoadInProgress => ResponseError::CoordinatorLoadInProgress,
            GroupError::CoordinatorNotAvailable => ResponseError::CoordinatorNotAvailable,
            GroupError::UnknownMemberId => ResponseError::UnknownMemberId,
            GroupError::MemberIdRequired => ResponseError::MemberIdRequired,
            GroupError::IllegalGeneration => ResponseError::IllegalGeneration,
            GroupError::RebalanceInProgress => ResponseError::RebalanceInProgress,
            GroupError::FencedInstanceId => ResponseError::FencedInstanceId,
            GroupError::InconsistentGroupProtocol => ResponseError::InconsistentGroupProtocol,
            GroupError::InvalidSessionTimeout => ResponseError::InvalidSessionTimeout,
            GroupError::GroupMaxSizeReached => ResponseError::GroupMaxSizeReached,
            GroupError::GroupIdNotFound => ResponseError::GroupIdNotFound,
            GroupError::NonEmptyGroup => ResponseError::NonEmptyGroup,
            GroupError::GroupSubscribedToTopic => ResponseError::GroupSubscribedToTopic,
            GroupError::OffsetMetadataTooLarge => ResponseError::OffsetMetadataTooLarge,
            GroupError::InvalidRequest => ResponseError::InvalidRequest,
            GroupError::UnstableOffsetCommit => ResponseError::UnstableOffsetCommit,
            GroupError::InvalidProducerEpoch => ResponseError::InvalidProducerEpoch,
            GroupError::RecordTruncated { .. }
            | GroupError::RecordChecksum
            | GroupError::RecordVersion(_)
            | GroupError::RecordKind(_)
            | GroupError::RecordUtf8
            | GroupError::RecordTrailing(_) => ResponseError::UnknownServerError,
        };
        error.code()
    }
}

/// Kafka's "no error".
pub const NONE: i16 = 0;

/// The code of a result: 0 for success.
pub fn code_of(result: Result<(), GroupError>) -> i16 {
    match result {
        Ok(()) => NONE,
        Err(error) => error.code(),
    }
}
