//! Clients of the oldest protocol versions, served as Kafka 3.9 serves them
//! (issue 30 item 2; Kafka 4.0 drops them with KIP-896).
//!
//! Produce v0-v2 carry message sets of magic 0 or 1 (Kafka's `LegacyRecord`;
//! the codec is `kafka_protocol::records::legacy`). [`produce`] converts such
//! a set to one v2 record batch, as Kafka 3.x's `LogValidator` stores it,
//! before the ordinary produce path validates and replicates it.
//!
//! Fetch v0-v3 readers cannot read v2 batches: [`fetch`] down-converts what
//! a fetch read to magic 0 (Fetch v0-v1) or magic 1 (Fetch v2-v3), as
//! Kafka's `RecordsUtil.downConvert` does.
//!
//! Clients speaking Produce v3+ and Fetch v4+ never reach this module: the
//! only cost on their path is one version comparison per partition.

pub mod fetch;
pub mod produce;

#[cfg(test)]
pub(crate) mod tests;

use kafka_protocol::records::legacy::LegacyError;

use crate::error::HelixError;

/// The most bytes the wrappers of one partition's message set may inflate
/// to, together. Kafka has no such bound (it inflates into the heap); here
/// a few KiB of gzip, or many small wrappers, cannot claim more than this
/// per partition of a request.
pub const MAX_INFLATED_SET: usize = 64 << 20;

impl From<LegacyError> for HelixError {
    fn from(e: LegacyError) -> HelixError {
        match e {
            LegacyError::Corrupt(m) => HelixError::CorruptBatch(m),
            LegacyError::Invalid(m) => HelixError::InvalidRecord(m),
        }
    }
}
