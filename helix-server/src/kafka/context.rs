//! What a handler needs of the node, narrowed per family of APIs, so a
//! handler's signature says what it can touch. The dispatcher builds them
//! from the node (`crate::broker::Broker`, the composition root); the
//! handlers below never see the whole node.

use std::sync::Arc;

use crate::broker::Broker;
use crate::cluster::ClusterState;
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
