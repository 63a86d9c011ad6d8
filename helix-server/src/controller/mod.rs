//! The controller: topics, their partitions and replica sets, topic configs
//! and producer-id blocks, as commands applied to an in-memory view.
//!
//! It is the state machine of Raft group 0, whose voters are every node:
//! a [`Command`] is proposed (on the group's leader; other nodes forward it,
//! [`service`]), and every node applies the acknowledged commands in log
//! order ([`applier`]) with [`ControllerView::apply`], which validates
//! again (commands proposed concurrently may conflict) and is deterministic,
//! so every node's view is the same at the same log position.

pub mod acls;
pub mod applier;
pub mod election;
pub mod forward;
pub mod message_format;
pub mod placement;
pub mod producer_ids;
pub mod quorum;
pub mod quotas;
pub mod scram;
pub mod service;
pub mod topic_config;

use std::collections::BTreeMap;

use helix_raft::NodeId;
use serde::{Deserialize, Serialize};

use crate::error::{HelixError, Result};

/// Producer ids are handed out in blocks of this many; a block is persisted
/// before any id of it is used, so ids are never reused after a restart.
pub const PRODUCER_ID_BLOCK: i64 = 1000;

/// Most partitions a topic may have (an explicit limit, as every count).
pub const MAX_PARTITIONS: i32 = 10_000;

/// A change to the cluster's metadata.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum Command {
    CreateTopic {
        name: String,
        id: String,
        partitions: i32,
        configs: BTreeMap<String, String>,
        /// The replicas of each partition, preferred leader first. Empty in
        /// logs written before the cluster: then every partition is on the
        /// node that replays it.
        #[serde(default)]
        replicas: Vec<Vec<u64>>,
    },
    DeleteTopic {
        name: String,
    },
    CreatePartitions {
        name: String,
        count: i32,
        /// The replicas of each new partition (as in `CreateTopic`).
        #[serde(default)]
        replicas: Vec<Vec<u64>>,
    },
    /// Replaces the topic's whole set of overrides.
    SetTopicConfigs {
        name: String,
        configs: BTreeMap<String, String>,
    },
    /// Ids below `end` are taken (written by single-node brokers).
    AllocateProducerIds {
        end: i64,
    },
    /// Takes the next block of producer ids; its start is the outcome.
    AllocateProducerIdBlock,
    /// Adds ACL bindings; one already kept stays as it is ([`acls`]).
    CreateAcls {
        bindings: Vec<crate::acl::AclBinding>,
    },
    /// Removes ACL bindings: those DeleteAcls' filters selected.
    DeleteAcls {
        bindings: Vec<crate::acl::AclBinding>,
    },
    /// Sets and removes users' SCRAM credentials ([`scram`]).
    AlterScramCredentials(scram::ScramAlteration),
    /// Sets and removes client quotas ([`quotas`]).
    AlterClientQuotas(quotas::QuotaAlteration),
}

impl Command {
    /// The topic a command changes, if any.
    pub fn topic(&self) -> Option<&str> {
        match self {
            Command::CreateTopic { name, .. }
            | Command::DeleteTopic { name }
            | Command::CreatePartitions { name, .. }
            | Command::SetTopicConfigs { name, .. } => Some(name),
            Command::AllocateProducerIds { .. }
            | Command::AllocateProducerIdBlock
            | Command::CreateAcls { .. }
            | Command::DeleteAcls { .. } => None,
            Command::AlterScramCredentials(_) | Command::AlterClientQuotas(_) => None,
        }
    }
}

/// What applying a command produced.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Outcome {
    Done,
    /// Producer ids `start..start + PRODUCER_ID_BLOCK` belong to the proposer.
    ProducerIdBlock {
        start: i64,
    },
}

/// What the controller knows about one topic.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicRecord {
    pub id: uuid::Uuid,
    pub configs: BTreeMap<String, String>,
    /// One replica set per partition, preferred leader first.
    pub replicas: Vec<Vec<NodeId>>,
}

impl TopicRecord {
    pub fn partitions(&self) -> i32 {
        self.replicas.len() as i32
    }
}

/// The in-memory view built from the commands.
#[derive(Debug, Default, Clone)]
pub struct ControllerView {
    pub topics: BTreeMap<String, TopicRecord>,
    /// First producer id not yet handed out in any block.
    pub producer_ids_end: i64,
    /// Every ACL binding; shared so a request's authorization reads a
    /// snapshot without holding the view ([`acls`]).
    pub acls: std::sync::Arc<crate::acl::AclTable>,
    /// Users' SCRAM credentials.
    pub scram: scram::ScramTable,
    /// Client quotas by user and client id.
    pub quotas: quotas::QuotaTable,
}

impl ControllerView {
    /// Checks a command against the current view and the cluster's nodes.
    pub fn validate(&self, c: &Command, nodes: &[NodeId]) -> Result<()> {
        match c {
            Command::CreateTopic {
                name,
                id,
                partitions,
                replicas,
                ..
            } => {
                validate_topic_name(name)?;
                if self.topics.contains_key(name) {
                    return Err(HelixError::TopicAlreadyExists(name.clone()));
                }
                uuid::Uuid::parse_str(id).map_err(|e| HelixError::InvalidRequest(e.to_string()))?;
                if *partitions < 1 || *partitions > MAX_PARTITIONS {
                    return Err(HelixError::InvalidPartitions(format!(
                        "{partitions} partitions: must be 1..={MAX_PARTITIONS}"
                    )));
                }
                validate_replicas(replicas, *partitions as usize, nodes)
            }
            Command::DeleteTopic { name } | Command::SetTopicConfigs { name, .. } => self
                .topics
                .get(name)
                .map(|_| ())
                .ok_or(HelixError::UnknownTopicOrPartition),
            Command::CreatePartitions {
                name,
                count,
                replicas,
            } => {
                let t = self
                    .topics
                    .get(name)
                    .ok_or(HelixError::UnknownTopicOrPartition)?;
                if *count <= t.partitions() {
                    return Err(HelixError::InvalidPartitions(format!(
                        "topic has {} partitions; the new count {count} must be larger",
                        t.partitions()
                    )));
                }
                if *count > MAX_PARTITIONS {
                    return Err(HelixError::InvalidPartitions(format!(
                        "at most {MAX_PARTITIONS}"
                    )));
                }
                validate_replicas(replicas, (*count - t.partitions()) as usize, nodes)
            }
            Command::AllocateProducerIds { end } => {
                if *end <= self.producer_ids_end {
                    return Err(HelixError::InvalidRequest(
                        "producer id blocks only grow".into(),
                    ));
                }
                Ok(())
            }
            Command::AllocateProducerIdBlock => Ok(()),
            Command::CreateAcls { bindings } => self.validate_create_acls(bindings),
            Command::DeleteAcls { .. } => Ok(()),
            Command::AlterScramCredentials(a) => self.scram.validate(a),
            Command::AlterClientQuotas(a) => self.quotas.validate(a),
        }
    }

    /// Applies a logged command: checked again first (it may conflict with
    /// one logged before it); a refused command changes nothing. `members`
    /// are the cluster's nodes; `local` is the replaying node, where a topic
    /// logged without replica sets (by a single-node broker) lives.
    pub fn apply(&mut self, c: &Command, members: &[NodeId], local: NodeId) -> Result<Outcome> {
        let c = self.with_legacy_replicas(c, local);
        self.validate(&c, members)?;
        let sets = |replicas: &[Vec<u64>]| -> Vec<Vec<NodeId>> {
            replicas
                .iter()
                .map(|r| r.iter().map(|n| NodeId(*n)).collect())
                .collect()
        };
        match c {
            Command::CreateTopic {
                name,
                id,
                configs,
                replicas,
                ..
            } => {
                let id = uuid::Uuid::parse_str(&id)
                    .map_err(|e| HelixError::InvalidRequest(e.to_string()))?;
                let replicas = sets(&replicas);
                self.topics.insert(
                    name,
                    TopicRecord {
                        id,
                        configs,
                        replicas,
                    },
                );
            }
            Command::CreatePartitions { name, replicas, .. } => {
                if let Some(t) = self.topics.get_mut(&name) {
                    t.replicas.extend(sets(&replicas));
                }
            }
            Command::DeleteTopic { name } => {
                self.topics.remove(&name);
            }
            Command::SetTopicConfigs { name, configs } => {
                if let Some(t) = self.topics.get_mut(&name) {
                    t.configs = configs;
                }
            }
            Command::AllocateProducerIds { end } => {
                self.producer_ids_end = self.producer_ids_end.max(end);
            }
            Command::AllocateProducerIdBlock => {
                let start = self.producer_ids_end;
                self.producer_ids_end = start + PRODUCER_ID_BLOCK;
                return Ok(Outcome::ProducerIdBlock { start });
            }
            Command::CreateAcls { bindings } => self.create_acls(&bindings)?,
            Command::DeleteAcls { bindings } => self.delete_acls(&bindings),
            Command::AlterScramCredentials(a) => self.scram.apply(a),
            Command::AlterClientQuotas(a) => self.quotas.apply(a),
        }
        Ok(Outcome::Done)
    }

    /// `c` with the replica sets a single-node log left out: every
    /// partition on `local`.
    fn with_legacy_replicas(&self, c: &Command, local: NodeId) -> Command {
        let mut c = c.clone();
        match &mut c {
            Command::CreateTopic {
                partitions,
                replicas,
                ..
            } if replicas.is_empty() => {
                *replicas = vec![vec![local.0]; (*partitions).clamp(0, MAX_PARTITIONS) as usize];
            }
            Command::CreatePartitions {
                name,
                count,
                replicas,
            } if replicas.is_empty() => {
                let old = self
                    .topics
                    .get(name.as_str())
                    .map_or(0, TopicRecord::partitions);
                *replicas = vec![vec![local.0]; (*count - old).clamp(0, MAX_PARTITIONS) as usize];
            }
            _ => {}
        }
        c
    }
}

/// One replica set per partition: non-empty, no node twice, every node a
/// member, all of the same size.
fn validate_replicas(replicas: &[Vec<u64>], partitions: usize, nodes: &[NodeId]) -> Result<()> {
    if replicas.len() != partitions {
        return Err(HelixError::InvalidReplicaAssignment(format!(
            "{} replica sets for {partitions} partitions",
            replicas.len()
        )));
    }
    let rf = replicas.first().map_or(0, Vec::len);
    for (p, set) in replicas.iter().enumerate() {
        if set.is_empty() || set.len() != rf {
            return Err(HelixError::InvalidReplicaAssignment(format!(
                "partition {p}: {} replicas where every partition has {rf}",
                set.len()
            )));
        }
        for (i, n) in set.iter().enumerate() {
            if set[..i].contains(n) {
                return Err(HelixError::InvalidReplicaAssignment(format!(
                    "partition {p}: node {n} twice"
                )));
            }
            if !nodes.contains(&NodeId(*n)) {
                return Err(HelixError::InvalidReplicaAssignment(format!(
                    "partition {p}: node {n} is not a member of the cluster"
                )));
            }
        }
    }
    Ok(())
}

/// Kafka's topic name rule: 1..=249 of `[a-zA-Z0-9._-]`, not `.` or `..`.
pub fn validate_topic_name(name: &str) -> Result<()> {
    let ok = !name.is_empty()
        && name.len() <= 249
        && name != "."
        && name != ".."
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'_' || b == b'-');
    if ok {
        Ok(())
    } else {
        Err(HelixError::InvalidTopic(name.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NODES: [NodeId; 3] = [NodeId(1), NodeId(2), NodeId(3)];

    fn create(name: &str, replicas: Vec<Vec<u64>>) -> Command {
        Command::CreateTopic {
            name: name.into(),
            id: uuid::Uuid::from_u128(7).to_string(),
            partitions: replicas.len().max(1) as i32,
            configs: BTreeMap::new(),
            replicas,
        }
    }

    #[test]
    fn commands_apply_in_order_and_conflicts_change_nothing() {
        let mut v = ControllerView::default();
        let me = NodeId(1);
        let c = create("orders", vec![vec![1, 2, 3], vec![2, 3, 1]]);
        v.validate(&c, &NODES).expect("valid");
        assert_eq!(v.apply(&c, &NODES, me).expect("applied"), Outcome::Done);
        // The same create proposed concurrently by another node: refused at
        // apply, the view unchanged.
        assert!(matches!(
            v.apply(&c, &NODES, me),
            Err(HelixError::TopicAlreadyExists(_))
        ));
        let grow = Command::CreatePartitions {
            name: "orders".into(),
            count: 3,
            replicas: vec![vec![3, 1, 2]],
        };
        v.apply(&grow, &NODES, me).expect("grown");
        let t = &v.topics["orders"];
        assert_eq!(t.partitions(), 3);
        assert_eq!(t.replicas[2], vec![NodeId(3), NodeId(1), NodeId(2)]);
        let a = v
            .apply(&Command::AllocateProducerIdBlock, &NODES, me)
            .expect("block");
        let b = v
            .apply(&Command::AllocateProducerIdBlock, &NODES, me)
            .expect("block");
        assert_eq!(a, Outcome::ProducerIdBlock { start: 0 });
        assert_eq!(
            b,
            Outcome::ProducerIdBlock {
                start: PRODUCER_ID_BLOCK
            }
        );
        v.apply(
            &Command::DeleteTopic {
                name: "orders".into(),
            },
            &NODES,
            me,
        )
        .expect("deleted");
        assert!(v.topics.is_empty());
    }

    #[test]
    fn bad_replica_sets_are_refused() {
        let v = ControllerView::default();
        for replicas in [
            vec![vec![1, 1, 2]],
            vec![vec![1, 2, 9]],
            vec![vec![1, 2], vec![1]],
            vec![vec![]],
        ] {
            let c = create("t", replicas.clone());
            assert!(
                matches!(
                    v.validate(&c, &NODES),
                    Err(HelixError::InvalidReplicaAssignment(_))
                ),
                "{replicas:?}"
            );
        }
        assert!(
            v.validate(&create("bad/name", vec![vec![1]]), &NODES)
                .is_err()
        );
    }

    #[test]
    fn single_node_logs_without_replica_sets_replay_on_the_local_node() {
        let mut v = ControllerView::default();
        let legacy: Command = serde_json::from_str(
            r#"{"op":"create_topic","name":"a","id":"00000000-0000-0000-0000-000000000007","partitions":2,"configs":{}}"#,
        )
        .expect("old command");
        let members = [NodeId(4)];
        v.apply(&legacy, &members, NodeId(4)).expect("applied");
        assert_eq!(v.topics["a"].replicas, vec![vec![NodeId(4)]; 2]);
        let old_ids: Command =
            serde_json::from_str(r#"{"op":"allocate_producer_ids","end":2000}"#).expect("old");
        v.apply(&old_ids, &members, NodeId(4)).expect("applied");
        assert_eq!(
            v.apply(&Command::AllocateProducerIdBlock, &members, NodeId(4))
                .expect("block"),
            Outcome::ProducerIdBlock { start: 2000 }
        );
    }
}
