//! The API versions the coordinator serves, and response encoding at a
//! negotiated version. The broker's ApiVersions answer takes these ranges
//! for the group APIs once it routes them here; the tests encode every
//! response at every version listed.

use bytes::BytesMut;
use kafka_protocol::messages::ApiKey;
use kafka_protocol::protocol::Encodable;

use super::error::GroupError;
use super::response::GroupResponse;

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
];

/// The version range served for `api`, if the coordinator serves it.
pub fn supported_versions(api: ApiKey) -> Option<(i16, i16)> {
    SUPPORTED_VERSIONS
        .iter()
        .find(|(key, _, _)| *key == api)
        .map(|&(_, min, max)| (min, max))
}

impl GroupResponse {
    /// The API this response answers.
    pub fn api_key(&self) -> ApiKey {
        match self {
            GroupResponse::JoinGroup(_) => ApiKey::JoinGroup,
            GroupResponse::SyncGroup(_) => ApiKey::SyncGroup,
            GroupResponse::Heartbeat(_) => ApiKey::Heartbeat,
            GroupResponse::LeaveGroup(_) => ApiKey::LeaveGroup,
            GroupResponse::OffsetCommit(_) => ApiKey::OffsetCommit,
            GroupResponse::OffsetFetch(_) => ApiKey::OffsetFetch,
            GroupResponse::ListGroups(_) => ApiKey::ListGroups,
            GroupResponse::DescribeGroups(_) => ApiKey::DescribeGroups,
            GroupResponse::DeleteGroups(_) => ApiKey::DeleteGroups,
            GroupResponse::OffsetDelete(_) => ApiKey::OffsetDelete,
        }
    }

    /// Encodes the response body (no header) at `version`.
    pub fn encode_body(&self, version: i16, buf: &mut BytesMut) -> Result<(), GroupError> {
        let result = match self {
            GroupResponse::JoinGroup(r) => r.encode(buf, version),
            GroupResponse::SyncGroup(r) => r.encode(buf, version),
            GroupResponse::Heartbeat(r) => r.encode(buf, version),
            GroupResponse::LeaveGroup(r) => r.encode(buf, version),
            GroupResponse::OffsetCommit(r) => r.encode(buf, version),
            GroupResponse::OffsetFetch(r) => r.encode(buf, version),
            GroupResponse::ListGroups(r) => r.encode(buf, version),
            GroupResponse::DescribeGroups(r) => r.encode(buf, version),
            GroupResponse::DeleteGroups(r) => r.encode(buf, version),
            GroupResponse::OffsetDelete(r) => r.encode(buf, version),
        };
        result.map_err(|_| GroupError::ResponseEncode)
    }
}
