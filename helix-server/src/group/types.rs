//! Identifiers and positions the coordinator hands to and receives from its
//! host. Newtypes keep a request token from being mistaken for a proposal id.

use std::fmt;

use crate::controller::placement::kafka_partition_for;

/// The host's handle for one request whose response may be deferred. The
/// coordinator returns it in a [`super::Reply`]; it never interprets it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RequestToken(pub u64);

/// One proposal of coordinator records to a coordinator partition's Raft
/// group. The host reports its fate with `on_acknowledged` / `on_proposal_failed`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ProposalId(pub u64);

/// The transactional producer a TxnOffsetCommit's entry is appended for:
/// the batch carries its id and epoch, and its marker ends the offsets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TxnProducer {
    pub producer_id: i64,
    pub epoch: i16,
}

/// An internal coordinator partition (one Raft group) that owns a fixed
/// share of group ids.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct CoordinatorPartition(pub u32);

impl fmt::Display for CoordinatorPartition {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "coordinator-{}", self.0)
    }
}

/// Where the coordinator's output for a request goes, and in which shape:
/// the token names the request, the version the response's wire version.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReplyTo {
    pub token: RequestToken,
    pub version: i16,
}

/// What the connection knows about the client that the group needs
/// (DescribeGroups shows it).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ClientInfo {
    pub client_id: String,
    pub client_host: String,
}

/// Maps a group id to its coordinator partition: Kafka's rule
/// ([`kafka_partition_for`]), as Kafka's `__consumer_offsets` placement does, so
/// the spread of real group names matches what operators know. It is part of
/// the durable layout: changing it moves groups between partitions.
pub fn coordinator_partition_for(group_id: &str, partitions: u32) -> CoordinatorPartition {
    CoordinatorPartition(kafka_partition_for(group_id, partitions))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn partition_matches_java_string_hash_code() {
        // "group".hashCode() == 98629247 in Java.
        assert_eq!(
            coordinator_partition_for("group", 50),
            CoordinatorPartition(98629247 % 50)
        );
        assert_eq!(coordinator_partition_for("", 50), CoordinatorPartition(0));
        assert_eq!(
            coordinator_partition_for("anything", 1),
            CoordinatorPartition(0)
        );
        assert_eq!(
            coordinator_partition_for("anything", 0),
            CoordinatorPartition(0)
        );
    }
}

/// An entry of a coordinator partition's log as the host reads it back.
#[derive(Debug, Clone, Copy)]
pub enum LoggedEntry<'a> {
    /// An entry of records; `producer` is set for a transactional batch.
    Records {
        entry: &'a [u8],
        producer: Option<i64>,
    },
    /// A transaction marker of `producer_id`.
    Marker { producer_id: i64, commit: bool },
}
