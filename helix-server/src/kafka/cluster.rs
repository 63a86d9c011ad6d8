//! DescribeCluster: this node as the only broker and the controller.

use std::sync::Arc;

use kafka_protocol::messages::describe_cluster_response::DescribeClusterBroker;
use kafka_protocol::messages::{BrokerId, DescribeClusterRequest, DescribeClusterResponse};

use super::wire_str;
use crate::broker::Broker;

pub fn describe(
    broker: &Arc<Broker>,
    req: DescribeClusterRequest,
    version: i16,
) -> DescribeClusterResponse {
    let (host, port) = broker.config.advertised_host_port();
    let mut resp = DescribeClusterResponse::default();
    resp.cluster_id = wire_str(&broker.cluster_id);
    resp.controller_id = BrokerId(broker.config.node_id);
    if version >= 1 {
        resp.endpoint_type = req.endpoint_type;
    }
    let mut b = DescribeClusterBroker::default();
    b.broker_id = BrokerId(broker.config.node_id);
    b.host = wire_str(&host);
    b.port = port;
    resp.brokers = vec![b];
    resp
}
