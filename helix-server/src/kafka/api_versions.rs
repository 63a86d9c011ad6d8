//! ApiVersions: the APIs and version ranges this broker serves, and the
//! KIP-511 fallback for a client newer than us.
//!
//! Each range is what the matching handler decodes and answers, tested
//! version by version (`kafka/tests.rs`). Produce and Fetch start at v0, as
//! Kafka 3.9 serves them: Produce v0-v2 carry magic 0/1 message sets,
//! converted to v2 batches on the way in, and Fetch v0-v3 readers get the
//! stored batches down-converted to their format (`kafka/legacy`); ListOffsets
//! v0 is how those clients find the earliest and latest offsets. (Kafka 4
//! refuses those versions, KIP-896, but still advertises Produce from v0,
//! KAFKA-18659: librdkafka turns compression off unless the broker's Produce
//! range reaches down to v0-v2.) Clients always pick the highest common
//! version, so a client that speaks v2 batches never takes the legacy path.

use kafka_protocol::messages::api_versions_response::ApiVersion;
use kafka_protocol::messages::{ApiKey, ApiVersionsResponse};

use super::producer_state::{DESCRIBE_PRODUCERS_VERSIONS, WRITE_TXN_MARKERS_VERSIONS};
use super::sasl;
use super::{client_quotas, scram_credentials};
use crate::error::code;
use kafka_protocol::error::ResponseError;

/// (api, min, max) served by this broker.
pub const SUPPORTED: &[(ApiKey, i16, i16)] = &[
    (ApiKey::Produce, 0, 13),
    (ApiKey::Fetch, 0, 18),
    (ApiKey::ListOffsets, 0, 10),
    (ApiKey::Metadata, 0, 13),
    (ApiKey::ApiVersions, 0, 4),
    (ApiKey::CreateTopics, 2, 7),
    (ApiKey::DeleteTopics, 1, 6),
    (ApiKey::DeleteRecords, 0, 2),
    (ApiKey::InitProducerId, 0, 5),
    (ApiKey::OffsetForLeaderEpoch, 2, 4),
    (ApiKey::DescribeConfigs, 1, 4),
    (ApiKey::AlterConfigs, 0, 2),
    (ApiKey::CreatePartitions, 0, 3),
    (ApiKey::IncrementalAlterConfigs, 0, 1),
    (ApiKey::DescribeCluster, 0, 2),
    // The operators' tools (`kafka/operator.rs`).
    (ApiKey::DescribeLogDirs, 1, 4),
    (ApiKey::DescribeQuorum, 0, 2),
    (ApiKey::ListPartitionReassignments, 0, 0),
    (ApiKey::ElectLeaders, 0, 2),
    // Served with or without an authorizer (without: SECURITY_DISABLED),
    // as Kafka 3.9 advertises them; v0 (deprecated in 3.9, removed by
    // KIP-896) is not decoded by kafka-protocol 0.18.
    (ApiKey::DescribeAcls, 1, 3),
    (ApiKey::CreateAcls, 1, 3),
    (ApiKey::DeleteAcls, 1, 3),
    (
        ApiKey::DescribeProducers,
        DESCRIBE_PRODUCERS_VERSIONS.0,
        DESCRIBE_PRODUCERS_VERSIONS.1,
    ),
    (
        ApiKey::WriteTxnMarkers,
        WRITE_TXN_MARKERS_VERSIONS.0,
        WRITE_TXN_MARKERS_VERSIONS.1,
    ),
    (
        ApiKey::DescribeClientQuotas,
        client_quotas::DESCRIBE_VERSIONS.0,
        client_quotas::DESCRIBE_VERSIONS.1,
    ),
    (
        ApiKey::AlterClientQuotas,
        client_quotas::ALTER_VERSIONS.0,
        client_quotas::ALTER_VERSIONS.1,
    ),
    (
        ApiKey::DescribeUserScramCredentials,
        scram_credentials::DESCRIBE_VERSIONS.0,
        scram_credentials::DESCRIBE_VERSIONS.1,
    ),
    (
        ApiKey::AlterUserScramCredentials,
        scram_credentials::ALTER_VERSIONS.0,
        scram_credentials::ALTER_VERSIONS.1,
    ),
];

/// The SASL APIs: served, and advertised, on SASL listeners only.
pub const SASL: &[(ApiKey, i16, i16)] = &[
    (
        ApiKey::SaslHandshake,
        sasl::HANDSHAKE_VERSIONS.0,
        sasl::HANDSHAKE_VERSIONS.1,
    ),
    (
        ApiKey::SaslAuthenticate,
        sasl::AUTHENTICATE_VERSIONS.0,
        sasl::AUTHENTICATE_VERSIONS.1,
    ),
];

/// Whether `key` is one of the SASL APIs.
pub fn is_sasl(key: ApiKey) -> bool {
    SASL.iter().any(|(k, _, _)| *k == key)
}

/// The range of `key` a handler serves, if any (SASL ones on SASL
/// listeners only).
pub fn range(key: ApiKey) -> Option<(i16, i16)> {
    SUPPORTED
        .iter()
        .chain(SASL)
        .find(|(k, _, _)| *k == key)
        .map(|(_, lo, hi)| (*lo, *hi))
        .or_else(|| crate::group::wire::range(key))
        .or_else(|| crate::txn::wire::range(key))
}

/// Whether a request of this version is decoded and answered.
pub fn serves(key: ApiKey, version: i16) -> bool {
    range(key).is_some_and(|(lo, hi)| version >= lo && version <= hi)
}

/// The ApiVersions answer; `error` is UNSUPPORTED_VERSION for the KIP-511
/// fallback (which is always encoded as v0). `sasl_listener`: the SASL APIs
/// are listed (they are served on this connection).
pub fn response(unsupported: bool, sasl_listener: bool) -> ApiVersionsResponse {
    let mut r = ApiVersionsResponse::default();
    r.error_code = if unsupported {
        code(ResponseError::UnsupportedVersion)
    } else {
        0
    };
    r.api_keys = SUPPORTED
        .iter()
        .copied()
        .chain(crate::group::wire::advertised())
        .chain(crate::txn::wire::advertised())
        .chain(SASL.iter().copied().filter(|_| sasl_listener))
        .map(|(k, lo, hi)| {
            let mut v = ApiVersion::default();
            v.api_key = k as i16;
            v.min_version = lo;
            v.max_version = hi;
            v
        })
        .collect();
    r
}
