//! What a handler needs of the node, narrowed per family of APIs, so a
//! handler's signature says what it can touch. The dispatcher builds them
//! from the node (`crate::broker::Broker`, the composition root); the
//! handlers below never see the whole node.

use std::sync::Arc;

use crate::broker::Broker;
use crate::budget::Backpressure;
use crate::cluster::ClusterState;
use crate::config::BackpressureMode;
use crate::controller::producer_ids::ProducerIds;
use crate::topics::{Topic, TopicTable};

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

    pub fn topic(&self, name: &str) -> Option<Arc<Topic>> {
        self.topics.get(name)
    }

    pub fn topic_by_id(&self, id: uuid::Uuid) -> Option<Arc<Topic>> {
        self.topics.by_id(id)
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
}

impl<'a> Producing<'a> {
    pub fn of(broker: &'a Broker) -> Producing<'a> {
        Producing {
            topics: &broker.topics,
            cluster: &broker.cluster,
            backpressure: &broker.backpressure,
            throttling: broker.config.backpressure_mode == BackpressureMode::Throttle,
            producer_ids: &broker.producer_ids,
        }
    }
}
