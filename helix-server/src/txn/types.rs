//! Identifiers and positions the transaction coordinator hands to and
//! receives from its host, and Kafka's rule placing a transactional id on a
//! `__transaction_state` partition. Newtypes keep a request token from being
//! mistaken for a proposal id, or a state partition for a data partition.

use std::fmt;

/// Kafka's "no producer id" (`RecordBatch.NO_PRODUCER_ID`).
pub const NO_PRODUCER_ID: i64 = -1;
/// Kafka's "no producer epoch" (`RecordBatch.NO_PRODUCER_EPOCH`).
pub const NO_PRODUCER_EPOCH: i16 = -1;

/// The host's handle for one request whose answer may be deferred. The
/// coordinator returns it in a [`super::response::Reply`]; it never
/// interprets it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RequestToken(pub u64);

/// One proposal of records to a `__transaction_state` partition's Raft
/// group. The host reports its fate with `on_acknowledged` /
/// `on_proposal_failed`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ProposalId(pub u64);

/// A partition of `__transaction_state` (one Raft group) that owns a fixed
/// share of transactional ids.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct StatePartition(pub u32);

impl fmt::Display for StatePartition {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "__transaction_state-{}", self.0)
    }
}

/// A data partition taking part in a transaction (a topic partition, or
/// the `__consumer_offsets` partition of a group for AddOffsetsToTxn).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TopicPartition {
    pub topic: String,
    pub partition: i32,
}

impl TopicPartition {
    pub fn new(topic: &str, partition: i32) -> Self {
        Self {
            topic: topic.to_owned(),
            partition,
        }
    }
}

/// A producer id with one of its epochs: what InitProducerId answers and
/// what a KIP-360 request names as the producer it continues.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ProducerIdAndEpoch {
    pub producer_id: i64,
    pub epoch: i16,
}

pub use crate::controller::placement::kafka_partition_for;

/// The `__transaction_state` partition coordinating `transactional_id`.
pub fn state_partition_for(transactional_id: &str, partitions: u32) -> StatePartition {
    StatePartition(kafka_partition_for(transactional_id, partitions))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Expected values computed from Java's definition
    /// (`s[0]*31^(n-1) + ... + s[n-1]` over UTF-16 units, 32-bit wrapping),
    /// then `Utils.abs(h) % 50`.
    #[test]
    fn partition_matches_kafkas_rule_on_java_string_hash_code() {
        let cases: [(&str, i64); 8] = [
            ("hello", 99_162_322),
            ("group", 98_629_247),
            ("txn-7", 110_810_516),
            ("my-transactional-id", -959_806_496),
            ("zzzzzzzzzz", -1_580_979_136),
            ("producer-λ", 1_752_579_136),
            // Outside the BMP: two UTF-16 units (a surrogate pair).
            ("tx-😀-1", 757_058_544),
            ("", 0),
        ];
        for (key, java_hash) in cases {
            let expected = (java_hash.unsigned_abs() % 50) as u32;
            assert_eq!(
                state_partition_for(key, 50),
                StatePartition(expected),
                "{key}"
            );
        }
        assert_eq!(state_partition_for("my-transactional-id", 50).0, 46);
        assert_eq!(state_partition_for("tx-😀-1", 50).0, 44);
    }

    #[test]
    fn hash_of_i32_min_maps_to_partition_zero_like_utils_abs() {
        // "polygenelubricants".hashCode() == Integer.MIN_VALUE.
        assert_eq!(kafka_partition_for("polygenelubricants", 50), 0);
        assert_eq!(kafka_partition_for("polygenelubricants", 7), 0);
    }

    #[test]
    fn zero_partitions_is_treated_as_one() {
        assert_eq!(kafka_partition_for("anything", 0), 0);
        assert_eq!(kafka_partition_for("anything", 1), 0);
    }
}
