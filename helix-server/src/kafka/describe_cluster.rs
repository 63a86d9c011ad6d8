//! DescribeCluster: the live brokers (every member, on a node that hears no
//! majority) and the controller (group 0's leader).

use kafka_protocol::messages::describe_cluster_response::DescribeClusterBroker;
use kafka_protocol::messages::{DescribeClusterRequest, DescribeClusterResponse};

use super::context::Routing;
use super::metadata::broker_id;
use super::wire_str;

pub fn describe(
    node: Routing<'_>,
    req: DescribeClusterRequest,
    version: i16,
) -> DescribeClusterResponse {
    let mut resp = DescribeClusterResponse::default();
    resp.cluster_id = wire_str(node.cluster_id);
    resp.controller_id = broker_id(node.controller_id());
    if version >= 1 {
        resp.endpoint_type = req.endpoint_type;
    }
    resp.brokers = node
        .cluster
        .members_to_offer()
        .into_iter()
        .map(|m| {
            let mut b = DescribeClusterBroker::default();
            b.broker_id = broker_id(m.id);
            b.host = wire_str(&m.host);
            b.port = m.port;
            b
        })
        .collect();
    resp
}
