//! Who this node is: its Raft id and the cluster it belongs to.

use helix_raft::NodeId;

use super::Config;
use crate::error::{HelixError, Result};

impl Config {
    /// This node's identity in every Raft group and in the peer transport:
    /// `node_id`, which must be positive.
    pub fn raft_node_id(&self) -> Result<NodeId> {
        u64::try_from(self.node_id)
            .ok()
            .filter(|n| *n > 0)
            .map(NodeId)
            .ok_or_else(|| HelixError::Config("node_id must be positive".into()))
    }

    /// The cluster id: configured, or derived from the member list alike on
    /// every node; a single node creates one and keeps it in its data directory.
    pub fn resolve_cluster_id(&self) -> Result<String> {
        if let Some(id) = &self.cluster_id {
            return Ok(id.clone());
        }
        if let Some(c) = &self.cluster {
            return Ok(c.derived_id());
        }
        let path = self.data_dir.join("cluster-id");
        match std::fs::read_to_string(&path) {
            Ok(s) if !s.trim().is_empty() => Ok(s.trim().to_string()),
            Ok(_) | Err(_) => {
                std::fs::create_dir_all(&self.data_dir)?;
                let id = crate::ids::random_uuid().simple().to_string();
                std::fs::write(&path, &id)?;
                Ok(id)
            }
        }
    }
}
