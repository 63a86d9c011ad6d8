//! The API versions the coordinator serves. The broker's ApiVersions
//! answer adds these ranges (`wire::advertised`); the tests encode every
//! response at every version listed.

use kafka_protocol::messages::ApiKey;

/// (API, min version, max version) served by the coordinator. OffsetCommit
/// starts at v2 and OffsetFetch at v1 because the codec crate decodes no
/// older ones (Kafka 4 dropped them too, KIP-896).
pub const SUPPORTED_VERSIONS: &[(ApiKey, i16, i16)] = &[
    (ApiKey::OffsetCommit, 2, 9),
    (ApiKey::OffsetFetch, 1, 9),
    (ApiKey::JoinGroup, 0, 9),
    (ApiKey::Heartbeat, 0, 4),
    (ApiKey::LeaveGroup, 0, 5),
    (ApiKey::SyncGroup, 0, 5),
    (ApiKey::DescribeGroups, 0, 6),
    (ApiKey::ListGroups, 0, 5),
    (ApiKey::DeleteGroups, 0, 2),
    (ApiKey::OffsetDelete, 0, 0),
    // v4 adds only TRANSACTION_ABORTABLE, never answered here.
    (ApiKey::TxnOffsetCommit, 0, 4),
];
