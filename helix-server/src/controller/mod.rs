//! The controller: topics, their partition counts, topic configs and
//! producer-id blocks, as commands applied to an in-memory view.
//!
//! It is the state machine of Raft group 0: every change is a [`Command`],
//! made durable first through group 0 ([`log::CommandLog`]: helix-raft over
//! helix-wal, one voter for now), then applied by
//! [`ControllerView::apply`], which is deterministic and never fails for a
//! command that passed validation. A restart replays the commands.

pub mod log;
pub mod topic_config;

use std::collections::BTreeMap;
use std::path::Path;

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
    },
    DeleteTopic {
        name: String,
    },
    CreatePartitions {
        name: String,
        count: i32,
    },
    /// Replaces the topic's whole set of overrides.
    SetTopicConfigs {
        name: String,
        configs: BTreeMap<String, String>,
    },
    /// Ids below `end` are taken.
    AllocateProducerIds {
        end: i64,
    },
}

/// What the controller knows about one topic.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicRecord {
    pub id: uuid::Uuid,
    pub partitions: i32,
    pub configs: BTreeMap<String, String>,
}

/// The in-memory view built from the commands.
#[derive(Debug, Default)]
pub struct ControllerView {
    pub topics: BTreeMap<String, TopicRecord>,
    /// First producer id not yet handed out in any block.
    pub producer_ids_end: i64,
}

impl ControllerView {
    /// Checks a command against the current view.
    pub fn validate(&self, c: &Command) -> Result<()> {
        match c {
            Command::CreateTopic {
                name,
                id,
                partitions,
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
                Ok(())
            }
            Command::DeleteTopic { name } | Command::SetTopicConfigs { name, .. } => self
                .topics
                .get(name)
                .map(|_| ())
                .ok_or(HelixError::UnknownTopicOrPartition),
            Command::CreatePartitions { name, count } => {
                let t = self
                    .topics
                    .get(name)
                    .ok_or(HelixError::UnknownTopicOrPartition)?;
                if *count <= t.partitions {
                    return Err(HelixError::InvalidPartitions(format!(
                        "topic has {} partitions; the new count {count} must be larger",
                        t.partitions
                    )));
                }
                if *count > MAX_PARTITIONS {
                    return Err(HelixError::InvalidPartitions(format!(
                        "at most {MAX_PARTITIONS}"
                    )));
                }
                Ok(())
            }
            Command::AllocateProducerIds { end } => {
                if *end <= self.producer_ids_end {
                    return Err(HelixError::InvalidRequest(
                        "producer id blocks only grow".into(),
                    ));
                }
                Ok(())
            }
        }
    }

    /// Applies a validated command.
    pub fn apply(&mut self, c: &Command) {
        match c {
            Command::CreateTopic {
                name,
                id,
                partitions,
                configs,
            } => {
                let id = uuid::Uuid::parse_str(id).unwrap_or_default();
                self.topics.insert(
                    name.clone(),
                    TopicRecord {
                        id,
                        partitions: *partitions,
                        configs: configs.clone(),
                    },
                );
            }
            Command::DeleteTopic { name } => {
                self.topics.remove(name);
            }
            Command::CreatePartitions { name, count } => {
                if let Some(t) = self.topics.get_mut(name) {
                    t.partitions = *count;
                }
            }
            Command::SetTopicConfigs { name, configs } => {
                if let Some(t) = self.topics.get_mut(name) {
                    t.configs = configs.clone();
                }
            }
            Command::AllocateProducerIds { end } => {
                self.producer_ids_end = self.producer_ids_end.max(*end);
            }
        }
    }
}

/// The controller of a single node: the view plus its durable command log.
#[derive(Debug)]
pub struct Controller {
    view: ControllerView,
    log: log::CommandLog,
}

impl Controller {
    /// Opens group 0's log in `dir` and replays it.
    pub fn open(dir: &Path, node_id: i32) -> Result<Controller> {
        let (log, commands) = log::CommandLog::open(dir, node_id)?;
        let mut view = ControllerView::default();
        for c in &commands {
            // A command was validated before it was logged; replay trusts
            // it, so an old log stays readable as validation evolves.
            view.apply(c);
        }
        Ok(Controller { view, log })
    }

    pub fn view(&self) -> &ControllerView {
        &self.view
    }

    /// Validates, persists, applies.
    pub fn submit(&mut self, c: Command) -> Result<()> {
        self.view.validate(&c)?;
        self.log.append(&c)?;
        self.view.apply(&c);
        Ok(())
    }
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

    fn create(name: &str, partitions: i32) -> Command {
        Command::CreateTopic {
            name: name.into(),
            id: uuid::Uuid::from_u128(7).to_string(),
            partitions,
            configs: BTreeMap::new(),
        }
    }

    #[test]
    fn commands_survive_a_restart() {
        let dir = tempfile::tempdir().expect("tempdir");
        {
            let mut c = Controller::open(dir.path(), 1).expect("open");
            c.submit(create("orders", 3)).expect("create");
            c.submit(Command::CreatePartitions {
                name: "orders".into(),
                count: 5,
            })
            .expect("grow");
            let mut cfg = BTreeMap::new();
            cfg.insert("retention.ms".to_string(), "1000".to_string());
            c.submit(Command::SetTopicConfigs {
                name: "orders".into(),
                configs: cfg,
            })
            .expect("cfg");
            c.submit(Command::AllocateProducerIds { end: 1000 })
                .expect("pids");
        }
        let c = Controller::open(dir.path(), 1).expect("reopen");
        let t = &c.view().topics["orders"];
        assert_eq!(t.partitions, 5);
        assert_eq!(t.configs["retention.ms"], "1000");
        assert_eq!(c.view().producer_ids_end, 1000);
    }

    #[test]
    fn invalid_commands_are_refused_and_not_logged() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut c = Controller::open(dir.path(), 1).expect("open");
        c.submit(create("a", 1)).expect("create");
        assert!(matches!(
            c.submit(create("a", 1)),
            Err(HelixError::TopicAlreadyExists(_))
        ));
        assert!(matches!(
            c.submit(create("bad/name", 1)),
            Err(HelixError::InvalidTopic(_))
        ));
        assert!(matches!(
            c.submit(create("b", 0)),
            Err(HelixError::InvalidPartitions(_))
        ));
        assert!(
            c.submit(Command::CreatePartitions {
                name: "a".into(),
                count: 1
            })
            .is_err()
        );
        drop(c);
        let c = Controller::open(dir.path(), 1).expect("reopen");
        assert_eq!(c.view().topics.len(), 1);
    }

    #[test]
    fn a_torn_last_command_is_cut() {
        let dir = tempfile::tempdir().expect("tempdir");
        {
            let mut c = Controller::open(dir.path(), 1).expect("open");
            c.submit(create("a", 1)).expect("create");
        }
        // A crash mid-append leaves part of a batch after the last whole one.
        let path = dir.path().join("wal").join("00000000000000000000.log");
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .expect("open segment");
        std::io::Write::write_all(&mut f, &[0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 90, 0])
            .expect("write");
        drop(f);
        let mut c = Controller::open(dir.path(), 1).expect("reopen");
        assert!(c.view().topics.contains_key("a"));
        c.submit(create("b", 1))
            .expect("the log continues after the cut");
        drop(c);
        let c = Controller::open(dir.path(), 1).expect("reopen again");
        assert_eq!(c.view().topics.len(), 2);
    }
}
