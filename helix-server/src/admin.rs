//! Topic administration: auto-creation, CreateTopics, DeleteTopics,
//! CreatePartitions and config changes. Each is checked against the
//! controller's view here, then submitted as a controller command (from any
//! node: a non-leader forwards it); creations wait, bounded, for the new
//! partitions' leaders so clients that produce at once find one. Handlers
//! reach it as `broker.admin`.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use kafka_protocol::error::ResponseError;

use crate::cluster::ClusterState;
use crate::config::Config;
use crate::controller::service::Controller;
use crate::controller::{Command, placement, topic_config, validate_topic_name};
use crate::error::{HelixError, Result};
use crate::topics::{Topic, TopicTable};

/// How long a new topic's creation waits for its partitions' leaders.
const LEADERS_WAIT: Duration = Duration::from_secs(5);

/// A topic just created (or validated).
#[derive(Debug, Clone)]
pub struct NewTopic {
    pub id: uuid::Uuid,
    pub partitions: i32,
    pub replication_factor: i16,
    pub configs: BTreeMap<String, String>,
}

/// What topic administration needs of the node.
#[derive(Debug)]
pub struct TopicAdmin {
    /// `auto_create_topics`.
    auto_create_topics: bool,
    /// `default_partitions`.
    default_partitions: i32,
    /// `default_replication_factor` as configured (None: min(3, nodes)).
    default_replication_factor_setting: Option<i16>,
    cluster: Arc<ClusterState>,
    controller: Arc<Controller>,
    topics: Arc<TopicTable>,
}

impl TopicAdmin {
    pub fn new(
        config: &Config,
        cluster: Arc<ClusterState>,
        controller: Arc<Controller>,
        topics: Arc<TopicTable>,
    ) -> TopicAdmin {
        TopicAdmin {
            auto_create_topics: config.auto_create_topics,
            default_partitions: config.default_partitions,
            default_replication_factor_setting: config.default_replication_factor,
            cluster,
            controller,
            topics,
        }
    }

    fn topic(&self, name: &str) -> Option<Arc<Topic>> {
        self.topics.get(name)
    }

    /// The topic, created with the defaults if auto-creation is on.
    pub async fn topic_or_create(&self, name: &str) -> Result<Arc<Topic>> {
        if let Some(t) = self.topic(name) {
            return Ok(t);
        }
        if !self.auto_create_topics {
            return Err(HelixError::UnknownTopicOrPartition);
        }
        validate_topic_name(name)?;
        match self
            .create_topic(name, -1, -1, None, BTreeMap::new(), false)
            .await
        {
            // Created meanwhile, here or through another node.
            Ok(_) => self.topic(name).ok_or(HelixError::UnknownTopicOrPartition),
            Err(e) if e.is(ResponseError::TopicAlreadyExists) => {
                self.topic(name).ok_or(HelixError::UnknownTopicOrPartition)
            }
            Err(e) => Err(e),
        }
    }

    /// The replication factor of topics created without one.
    pub fn default_replication_factor(&self) -> i16 {
        let nodes = self.cluster.members.len() as i16;
        self.default_replication_factor_setting
            .unwrap_or(nodes.min(3))
    }

    /// CreateTopics: `partitions` and `replication_factor` -1 mean the
    /// defaults; `assignments` (partition → nodes) replace both.
    pub async fn create_topic(
        &self,
        name: &str,
        partitions: i32,
        replication_factor: i16,
        assignments: Option<Vec<Vec<u64>>>,
        configs: BTreeMap<String, String>,
        validate_only: bool,
    ) -> Result<NewTopic> {
        validate_topic_name(name)?;
        let configs = topic_config::validate_all(&configs)?;
        let members = self.cluster.member_ids();
        let replicas = match assignments {
            Some(sets) => {
                if partitions != -1 || replication_factor != -1 {
                    return Err(HelixError::InvalidRequest(
                        "give either replica assignments or partitions and replication factor"
                            .into(),
                    ));
                }
                sets
            }
            None => {
                let partitions = if partitions == -1 {
                    self.default_partitions
                } else {
                    partitions
                };
                if !(1..=crate::controller::MAX_PARTITIONS).contains(&partitions) {
                    return Err(HelixError::InvalidPartitions(format!(
                        "{partitions} partitions: must be 1..={}",
                        crate::controller::MAX_PARTITIONS
                    )));
                }
                let rf = if replication_factor == -1 {
                    self.default_replication_factor()
                } else {
                    replication_factor
                };
                let view = &self.controller.view().view;
                placement::assign(
                    &members,
                    usize::try_from(rf).unwrap_or(0),
                    partitions as usize,
                    view,
                )?
            }
        };
        topic_config::check_replication(&configs, replicas.first().map_or(0, Vec::len))?;
        let id = crate::ids::random_uuid();
        let command = Command::CreateTopic {
            name: name.to_string(),
            id: id.to_string(),
            partitions: replicas.len() as i32,
            configs: configs.clone(),
            replicas: replicas.clone(),
        };
        self.controller.view().view.validate(&command, &members)?;
        let created = NewTopic {
            id,
            partitions: replicas.len() as i32,
            replication_factor: replicas.first().map_or(0, |r| r.len() as i16),
            configs,
        };
        if validate_only {
            return Ok(created);
        }
        self.controller.submit(command).await?;
        self.wait_for_leaders(name).await;
        Ok(created)
    }

    /// Waits (bounded) until every partition of a new topic has a known
    /// leader, so clients that produce right away find one.
    async fn wait_for_leaders(&self, name: &str) {
        let deadline = tokio::time::Instant::now() + LEADERS_WAIT;
        while tokio::time::Instant::now() < deadline {
            let Some(t) = self.topic(name) else { return };
            // A leader known everywhere, and serving where it is this node.
            let all = t.partitions.iter().all(|p| {
                self.cluster
                    .leadership(p.group, p.local.as_deref())
                    .is_some_and(|l| {
                        l.leader != self.cluster.me
                            || p.local.as_ref().is_some_and(|r| r.leadership().serving)
                    })
            });
            if all {
                return;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        tracing::info!(topic = name, "created; some partitions have no leader yet");
    }

    /// The topic `name`, if it exists and is not internal: what DeleteTopics
    /// and CreatePartitions may change (AlterConfigs refuses an internal
    /// topic with INVALID_CONFIG instead).
    fn user_topic(&self, name: &str) -> Result<Arc<Topic>> {
        let topic = self
            .topic(name)
            .ok_or(HelixError::UnknownTopicOrPartition)?;
        if topic.internal {
            return Err(HelixError::InvalidRequest(format!(
                "{name} is an internal topic"
            )));
        }
        Ok(topic)
    }

    pub async fn delete_topic(&self, name: &str) -> Result<uuid::Uuid> {
        let topic = self.user_topic(name)?;
        self.controller
            .submit(Command::DeleteTopic { name: name.into() })
            .await?;
        Ok(topic.id)
    }

    pub async fn create_partitions(
        &self,
        name: &str,
        count: i32,
        assignments: Option<Vec<Vec<u64>>>,
        validate_only: bool,
    ) -> Result<()> {
        let topic = self.user_topic(name)?;
        // Checked before placement, which builds one replica set per new
        // partition: a count near i32::MAX must not allocate gigabytes.
        if count > crate::controller::MAX_PARTITIONS {
            return Err(HelixError::InvalidPartitions(format!(
                "at most {}",
                crate::controller::MAX_PARTITIONS
            )));
        }
        let members = self.cluster.member_ids();
        let old = topic.partitions.len() as i32;
        let rf = topic.partitions.first().map_or(1, |p| p.replicas.len());
        let replicas = match assignments {
            Some(sets) => sets,
            None => {
                let view = &self.controller.view().view;
                placement::assign(&members, rf, (count - old).max(0) as usize, view)?
            }
        };
        let command = Command::CreatePartitions {
            name: name.into(),
            count,
            replicas,
        };
        self.controller.view().view.validate(&command, &members)?;
        if validate_only {
            return Ok(());
        }
        self.controller.submit(command).await?;
        self.wait_for_leaders(name).await;
        Ok(())
    }

    /// Replaces a topic's overrides (AlterConfigs, IncrementalAlterConfigs
    /// compute the new set).
    pub async fn set_topic_configs(
        &self,
        name: &str,
        configs: BTreeMap<String, String>,
        validate_only: bool,
    ) -> Result<()> {
        let configs = topic_config::validate_all(&configs)?;
        let topic = self
            .topic(name)
            .ok_or(HelixError::UnknownTopicOrPartition)?;
        if topic.internal {
            return Err(HelixError::InvalidConfig(format!(
                "{name} is an internal topic"
            )));
        }
        topic_config::check_replication(&configs, topic.replication_factor())?;
        if validate_only {
            return Ok(());
        }
        self.controller
            .submit(Command::SetTopicConfigs {
                name: name.into(),
                configs,
            })
            .await?;
        Ok(())
    }
}
