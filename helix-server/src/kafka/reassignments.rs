//! ListPartitionReassignments (`kafka-reassign-partitions.sh --list`):
//! Helix never moves a partition's replicas by reassignment (a partition's
//! replicas are its Raft group's voters, placed at creation), so nothing is
//! ever being reassigned and the answer is always empty. Its counterpart
//! AlterPartitionReassignments is not served (ADR 0012, "Operator tools":
//! `--execute` fails with UnsupportedVersionException).

use kafka_protocol::messages::ListPartitionReassignmentsResponse;

/// The (empty) list of reassignments under way.
pub fn list() -> ListPartitionReassignmentsResponse {
    ListPartitionReassignmentsResponse::default()
}
