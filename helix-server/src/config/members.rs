//! The cluster's members: the `[[nodes]]` tables of the configuration file.
//!
//! ```toml
//! [[nodes]]
//! id = 1
//! kafka = "127.0.0.1:9092"   # Kafka listener, advertised to clients
//! peer = "127.0.0.1:9192"    # peer transport listener
//! # optional: per-listener addresses told to clients of that listener
//! advertised_listeners = "PLAINTEXT://127.0.0.1:9092,SASL_SSL://127.0.0.1:9093"
//! ```
//!
//! Every node is started with the same list (or one whose ids and Kafka
//! addresses agree) and its own `--node-id`. The list is static: Helix has
//! no membership changes yet. Without `[[nodes]]` the broker is a single
//! node of its own.

use std::net::{SocketAddr, ToSocketAddrs};

use serde::Deserialize;

use crate::error::{HelixError, Result};

/// Most nodes a cluster may list (an explicit limit, as every count).
pub const MAX_NODES: usize = 64;

/// One `[[nodes]]` table.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NodeSpec {
    pub id: i32,
    /// `host:port` of the node's Kafka listener (what clients are told).
    pub kafka: String,
    /// `host:port` of the node's peer transport listener.
    pub peer: String,
    /// `host:port` of the node's metrics endpoint (optional; default
    /// 127.0.0.1 at 9644 plus the node's position in the sorted list).
    #[serde(default)]
    pub metrics: Option<String>,
    /// The node's `advertised.listeners` (`NAME://HOST:PORT,...`): what a
    /// client connected to a listener of that name is told of this node
    /// (optional; without it clients are told `kafka`, ADR 0028).
    #[serde(default)]
    pub advertised_listeners: Option<String>,
}

/// The validated `[[nodes]]` list: every member of the cluster, and this node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Members {
    /// Sorted by id.
    pub nodes: Vec<NodeSpec>,
    pub me: i32,
}

impl Members {
    /// Checks the `[[nodes]]` tables and finds `node_id` among them. Errors
    /// name the offending key.
    pub fn new(mut nodes: Vec<NodeSpec>, node_id: i32) -> Result<Members> {
        let bad = |what: String| Err(HelixError::Config(what));
        if nodes.is_empty() {
            return bad("nodes: the list is empty".into());
        }
        if nodes.len() > MAX_NODES {
            return bad(format!("nodes: {} nodes, at most {MAX_NODES}", nodes.len()));
        }
        let mut seen_addresses: Vec<(SocketAddr, String)> = Vec::new();
        for (i, n) in nodes.iter().enumerate() {
            if n.id < 1 {
                return bad(format!("nodes[{i}].id: {} (node ids are positive)", n.id));
            }
            if let Some(j) = nodes[..i].iter().position(|m| m.id == n.id) {
                return bad(format!(
                    "nodes[{i}].id: node id {} is also nodes[{j}].id",
                    n.id
                ));
            }
            let metrics = n.metrics.iter().map(|m| ("metrics", m));
            for (key, addr) in [("kafka", &n.kafka), ("peer", &n.peer)]
                .into_iter()
                .chain(metrics)
            {
                let at = format!("nodes[{i}].{key}");
                let resolved =
                    resolve(addr).map_err(|e| HelixError::Config(format!("{at}: {e}")))?;
                if let Some((_, other)) = seen_addresses.iter().find(|(a, _)| *a == resolved) {
                    return bad(format!("{at}: address {addr} is also {other}"));
                }
                seen_addresses.push((resolved, at));
            }
        }
        for (i, n) in nodes.iter().enumerate() {
            if let Some(text) = &n.advertised_listeners {
                super::listeners::advertised_addresses(text).map_err(|e| {
                    HelixError::Config(format!("nodes[{i}].advertised_listeners: {e}"))
                })?;
            }
        }
        if !nodes.iter().any(|n| n.id == node_id) {
            let ids: Vec<String> = nodes.iter().map(|n| n.id.to_string()).collect();
            return bad(format!(
                "node_id: {node_id} is not among the nodes' ids ({})",
                ids.join(", ")
            ));
        }
        nodes.sort_by_key(|n| n.id);
        Ok(Members { nodes, me: node_id })
    }

    /// This node's table.
    pub fn this_node(&self) -> &NodeSpec {
        // `new` checked that `me` is listed.
        self.nodes
            .iter()
            .find(|n| n.id == self.me)
            .unwrap_or(&self.nodes[0])
    }

    /// Every node but this one.
    pub fn peers(&self) -> impl Iterator<Item = &NodeSpec> {
        self.nodes.iter().filter(move |n| n.id != self.me)
    }

    /// The address this node's metrics endpoint binds: its `metrics` key,
    /// or 127.0.0.1:9644 plus the node's position among the sorted ids (so
    /// the nodes of a cluster on one machine do not collide).
    pub fn metrics_listen(&self) -> Result<SocketAddr> {
        let node = self.this_node();
        match &node.metrics {
            Some(addr) => resolve(addr).map_err(|e| {
                HelixError::Config(format!("metrics address of node {}: {e}", self.me))
            }),
            None => {
                let position = self.nodes.iter().position(|n| n.id == self.me).unwrap_or(0);
                Ok(SocketAddr::from((
                    [127, 0, 0, 1],
                    super::DEFAULT_METRICS_PORT + position as u16,
                )))
            }
        }
    }

    /// The address this node's Kafka listener binds.
    pub fn kafka_listen(&self) -> Result<SocketAddr> {
        resolve(&self.this_node().kafka)
            .map_err(|e| HelixError::Config(format!("kafka address of node {}: {e}", self.me)))
    }

    /// The address this node's peer listener binds.
    pub fn peer_listen(&self) -> Result<SocketAddr> {
        resolve(&self.this_node().peer)
            .map_err(|e| HelixError::Config(format!("peer address of node {}: {e}", self.me)))
    }

    /// The cluster id every node derives alike from the member list, unless
    /// the configuration names one.
    pub fn derived_id(&self) -> String {
        // FNV-1a: stable across builds and platforms (std's hasher is not).
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        for n in &self.nodes {
            for b in format!("{}={}/{};", n.id, n.kafka, n.peer).bytes() {
                h ^= u64::from(b);
                h = h.wrapping_mul(0x0000_0100_0000_01b3);
            }
        }
        format!("helix-{h:016x}")
    }
}

/// `host:port` to the first socket address it names.
fn resolve(addr: &str) -> std::result::Result<SocketAddr, String> {
    addr.to_socket_addrs()
        .map_err(|e| format!("{addr:?} is not HOST:PORT ({e})"))?
        .next()
        .ok_or_else(|| format!("{addr:?} resolves to no address"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(id: i32, kafka: u16, peer: u16) -> NodeSpec {
        NodeSpec {
            id,
            kafka: format!("127.0.0.1:{kafka}"),
            peer: format!("127.0.0.1:{peer}"),
            metrics: None,
            advertised_listeners: None,
        }
    }

    fn three() -> Vec<NodeSpec> {
        vec![
            node(3, 9094, 9194),
            node(1, 9092, 9192),
            node(2, 9093, 9193),
        ]
    }

    fn refusal(nodes: Vec<NodeSpec>, me: i32) -> String {
        match Members::new(nodes, me) {
            Err(HelixError::Config(m)) => m,
            other => panic!("expected a refusal, got {other:?}"),
        }
    }

    #[test]
    fn a_valid_list_is_sorted_and_finds_this_node() {
        let c = Members::new(three(), 2).expect("valid");
        assert_eq!(c.nodes.iter().map(|n| n.id).collect::<Vec<_>>(), [1, 2, 3]);
        assert_eq!(c.this_node().kafka, "127.0.0.1:9093");
        assert_eq!(c.peers().map(|n| n.id).collect::<Vec<_>>(), [1, 3]);
        assert_eq!(c.peer_listen().expect("addr").port(), 9193);
        let again = Members::new(three(), 1).expect("valid");
        assert_eq!(c.derived_id(), again.derived_id(), "same list, same id");
    }

    #[test]
    fn bad_lists_are_refused_naming_the_key() {
        let mut dup_id = three();
        dup_id[2].id = 3;
        assert!(refusal(dup_id, 1).contains("nodes[2].id"));
        let mut dup_addr = three();
        dup_addr[1].peer = dup_addr[0].kafka.clone();
        let m = refusal(dup_addr, 1);
        assert!(
            m.contains("nodes[1].peer") && m.contains("nodes[0].kafka"),
            "{m}"
        );
        assert!(refusal(three(), 7).contains("node_id: 7"));
        let mut bad_addr = three();
        bad_addr[0].kafka = "no-port".into();
        assert!(refusal(bad_addr, 1).contains("nodes[0].kafka"));
        let mut zero = three();
        zero[0].id = 0;
        assert!(refusal(zero, 1).contains("nodes[0].id"));
        assert!(refusal(Vec::new(), 1).contains("nodes"));
    }

    #[test]
    fn metrics_addresses_default_per_position_and_are_checked() {
        let c = Members::new(three(), 2).expect("valid");
        assert_eq!(c.metrics_listen().expect("default").port(), 9645);
        let mut nodes = three();
        nodes[0].metrics = Some("127.0.0.1:9194".into());
        let e = refusal(nodes, 1);
        assert!(
            e.contains("nodes[0].metrics") && e.contains("nodes[0].peer"),
            "{e}"
        );
    }
}
