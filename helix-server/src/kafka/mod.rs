//! The Kafka front end: framing, the connection loop, dispatch, and one
//! module per API family. All wire codecs come from `kafka-protocol`.

pub mod acls;
pub mod admission;
pub mod api_versions;
pub mod authorize;
pub mod broker_configs;
pub mod client_quotas;
pub mod configs;
pub mod connection;
pub mod context;
pub mod describe_cluster;
pub mod dispatch;
pub mod elect_leaders;
pub mod fetch;
pub mod frame;
pub mod leader_hint;
pub mod legacy;
pub mod list_offsets;
pub mod log_dirs;
pub mod metadata;
pub mod offset_commit;
pub mod operator;
pub mod produce;
pub mod producer_state;
pub mod quorum;
pub mod reassignments;
pub mod records;
pub mod request_order;
pub mod sasl;
pub mod scram_credentials;
pub mod segmented;
pub mod session;
pub mod throttle;
pub mod tls;
pub mod topics;

#[cfg(test)]
mod acls_tests;
#[cfg(test)]
pub(crate) mod producer_state_tests;
#[cfg(test)]
pub(crate) mod tests;
#[cfg(test)]
mod txn_offsets_tests;

use kafka_protocol::messages::TopicName;
use kafka_protocol::protocol::StrBytes;

/// A wire string from a Rust string.
pub(crate) fn wire_str(s: &str) -> StrBytes {
    StrBytes::from_string(s.to_string())
}

/// A wire topic name from a Rust string.
pub(crate) fn wire_topic(s: &str) -> TopicName {
    TopicName(wire_str(s))
}
