//! What a handler needs of the node, narrowed per family of APIs, so a
//! handler's signature says what it can touch. The dispatcher builds them
//! from the node (`crate::broker::Broker`, the composition root); the
//! handlers below never see the whole node.

use std::sync::Arc;

use helix_raft::NodeId;

use crate::admin::TopicAdmin;
use crate::broker::Broker;
use crate::budget::Backpressure;
use crate::cluster::ClusterState;
use crate::config::{BackpressureMode, Config};
use crate::controller::producer_ids::ProducerIds;
use crate::controller::service::Controller;
use crate::topics::TopicTable;
use crate::txn::service::TxnService;

/// The data plane's view (Fetch, ListOffsets, DeleteRecords,
/// OffsetForLeaderEpoch): the topics with this node's replicas, and the
/// cluster view for the leader hints of KIP-951.
#[derive(Clone, Copy)]
pub struct Partitions<'a> {
    pub topics: &'a TopicTable,
    pub cluster: &'a ClusterState,
}

impl<'a> Partitions<'a> {
    pub fn of(broker: &'a Broker) -> Partitions<'a> {
        Partitions {
            topics: &broker.topics,
            cluster: &broker.cluster,
        }
    }
}

/// What Produce and InitProducerId need: the topics, the cluster view (for
/// leader hints, kept by the answer that outlives the request's reading),
/// the node's produce budgets and how it applies them, and producer ids.
#[derive(Clone, Copy)]
pub struct Producing<'a> {
    pub topics: &'a TopicTable,
    pub cluster: &'a Arc<ClusterState>,
    pub backpressure: &'a Backpressure,
    /// Throttle mode (ADR 0011): a full node answers with a throttle time
    /// instead of waiting.
    pub throttling: bool,
    pub producer_ids: &'a Arc<ProducerIds>,
    /// The transaction coordinator: InitProducerId with a transactional id,
    /// and the check of a transactional batch's partition.
    pub txn: &'a TxnService,
}

impl<'a> Producing<'a> {
    pub fn of(broker: &'a Broker) -> Producing<'a> {
        Producing {
            topics: &broker.topics,
            cluster: &broker.cluster,
            backpressure: &broker.backpressure,
            throttling: broker.config.backpressure_mode == BackpressureMode::Throttle,
            producer_ids: &broker.producer_ids,
            txn: &broker.txn,
        }
    }
}

/// What topic administration needs (CreateTopics, DeleteTopics,
/// CreatePartitions, DescribeConfigs, AlterConfigs,
/// IncrementalAlterConfigs): the topics as this node knows them, the admin
/// service that changes them through the controller, and the node's
/// settings (the defaults a topic's configs fall back to).
#[derive(Clone, Copy)]
pub struct Administering<'a> {
    pub topics: &'a TopicTable,
    pub admin: &'a TopicAdmin,
    pub config: &'a Config,
}

impl<'a> Administering<'a> {
    pub fn of(broker: &'a Broker) -> Administering<'a> {
        Administering {
            topics: &broker.topics,
            admin: &broker.admin,
            config: &broker.config,
        }
    }
}

/// What the routing answers need (Metadata, DescribeCluster): the cluster
/// view (members, liveness, leaders), the topics, the admin service (a
/// Metadata request may create a topic), the controller (whether this
/// node has caught up with its log, who leads it) and the cluster id.
#[derive(Clone, Copy)]
pub struct Routing<'a> {
    pub cluster: &'a ClusterState,
    pub topics: &'a TopicTable,
    pub admin: &'a TopicAdmin,
    pub controller: &'a Controller,
    pub cluster_id: &'a str,
}

impl<'a> Routing<'a> {
    pub fn of(broker: &'a Broker) -> Routing<'a> {
        Routing {
            cluster: &broker.cluster,
            topics: &broker.topics,
            admin: &broker.admin,
            controller: &broker.controller,
            cluster_id: &broker.cluster_id,
        }
    }

    /// The controller as clients are told: group 0's leader, or this node
    /// while that is unknown. Any node takes admin requests (it forwards
    /// controller commands), as KRaft brokers do (KIP-590), so a client
    /// never waits for an election to send one.
    pub fn controller_id(&self) -> NodeId {
        self.cluster
            .controller(self.controller.partition())
            .unwrap_or(self.cluster.me)
    }
}
