//! The operators' cluster APIs that Kafka's CLI tools call
//! (`kafka-log-dirs.sh`, `kafka-metadata-quorum.sh`,
//! `kafka-reassign-partitions.sh --list`, `kafka-leader-election.sh`):
//! each request to its handler. Their ACLs are checked before
//! (`authorize/cluster.rs`).

use kafka_protocol::messages::{
    DescribeLogDirsRequest, DescribeQuorumRequest, ElectLeadersRequest, RequestKind, ResponseKind,
};

use super::{elect_leaders, log_dirs, quorum, reassignments};
use crate::broker::Broker;

/// One of this family's requests.
pub enum Call {
    DescribeLogDirs(DescribeLogDirsRequest),
    DescribeQuorum(DescribeQuorumRequest),
    ListPartitionReassignments,
    ElectLeaders(ElectLeadersRequest),
}

/// `kind` as this family's request, or back when it is another's.
pub fn call(kind: RequestKind) -> Result<Call, Box<RequestKind>> {
    Ok(match kind {
        RequestKind::DescribeLogDirs(r) => Call::DescribeLogDirs(r),
        RequestKind::DescribeQuorum(r) => Call::DescribeQuorum(r),
        RequestKind::ListPartitionReassignments(_) => Call::ListPartitionReassignments,
        RequestKind::ElectLeaders(r) => Call::ElectLeaders(r),
        other => return Err(Box::new(other)),
    })
}

/// The answer to `call`, at `version`.
pub async fn answer(b: &Broker, call: Call, version: i16) -> ResponseKind {
    match call {
        Call::DescribeLogDirs(req) => {
            ResponseKind::DescribeLogDirs(log_dirs::describe(&b.topics, &b.config.data_dir, &req))
        }
        Call::DescribeQuorum(req) => ResponseKind::DescribeQuorum(
            quorum::describe(&b.controller, &b.link, &b.cluster, &req, version).await,
        ),
        Call::ListPartitionReassignments => {
            ResponseKind::ListPartitionReassignments(reassignments::list())
        }
        Call::ElectLeaders(req) => ResponseKind::ElectLeaders(
            elect_leaders::elect(&b.topics, &b.cluster, &b.host, &b.link, &req).await,
        ),
    }
}
