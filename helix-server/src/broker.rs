//! The node's shared state: configuration, the controller, the running
//! topics and their partitions, and the produce backpressure budget. Every
//! Kafka handler receives an `Arc<Broker>`.

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use helix_wal::{Durability, FileBudget, LogConfig, SyncGroup};

use crate::batcher::{Backpressure, BatchLimits};
use crate::config::{Config, WriteDurability};
use crate::controller::topic_config::{self, EffectiveConfig};
use crate::controller::{Command, Controller, PRODUCER_ID_BLOCK, validate_topic_name};
use crate::error::{HelixError, Result};
use crate::partition::raft::{GroupSpec, RaftSettings};
use crate::partition::{Partition, PartitionSettings, Recovered};
use crate::replica::{HostSettings, NoPeers, ReplicaHost};

/// A running topic. Replaced as a whole when it changes.
#[derive(Debug)]
pub struct Topic {
    pub name: String,
    pub id: uuid::Uuid,
    pub partitions: Vec<Arc<Partition>>,
    /// Overrides set on the topic.
    pub configs: BTreeMap<String, String>,
    pub effective: EffectiveConfig,
}

impl Topic {
    pub fn partition(&self, index: i32) -> Option<&Arc<Partition>> {
        usize::try_from(index)
            .ok()
            .and_then(|i| self.partitions.get(i))
    }
}

#[derive(Debug)]
struct Admin {
    controller: Controller,
    /// Next producer id to hand out and the end of the current block.
    next_producer_id: i64,
    producer_id_block_end: i64,
}

/// What every partition log of the node shares.
#[derive(Debug, Clone)]
struct LogShared {
    /// One group commit for every log (fsync mode).
    sync_group: SyncGroup,
    /// One cap on mapped sealed segments for every log.
    file_budget: FileBudget,
}

/// The broker.
#[derive(Debug)]
pub struct Broker {
    pub config: Config,
    logs: LogShared,
    pub backpressure: Backpressure,
    /// Serialises metadata changes (the controller's single writer).
    admin: tokio::sync::Mutex<Admin>,
    topics: RwLock<HashMap<String, Arc<Topic>>>,
    /// A stable id of this single-node cluster.
    pub cluster_id: String,
    /// The consumer-group coordinator and its coordinator partitions.
    pub groups: Arc<crate::group::service::GroupService>,
    /// Every replica this node holds.
    pub host: Arc<ReplicaHost>,
}

/// How often retention is applied to every partition.
pub const RETENTION_INTERVAL: Duration = Duration::from_secs(30);

impl Broker {
    /// Opens the data directory: replays the controller and recovers every
    /// partition.
    pub async fn open(config: Config) -> Result<Arc<Broker>> {
        let controller = Controller::open(&config.data_dir.join("controller"), config.node_id)?;
        let cluster_id = cluster_id(&config)?;
        let logs = LogShared {
            sync_group: SyncGroup::new(),
            file_budget: FileBudget::new(FileBudget::DEFAULT_MAX_MAPPED),
        };
        let host = ReplicaHost::start(
            HostSettings {
                node: node_id(&config)?,
                shards: config.shards,
                tick: config.raft_tick,
                sync_group: logs.sync_group.clone(),
            },
            Arc::new(NoPeers),
        )?;
        let mut topics = HashMap::new();
        for (name, record) in &controller.view().topics {
            let effective = EffectiveConfig::resolve(&record.configs, &config);
            let partitions = open_partitions(
                &config,
                &logs,
                &host,
                name,
                &record.id,
                0..record.partitions,
                &effective,
            )
            .await?;
            topics.insert(
                name.clone(),
                Arc::new(Topic {
                    name: name.clone(),
                    id: record.id,
                    partitions,
                    configs: record.configs.clone(),
                    effective,
                }),
            );
        }
        tracing::info!(topics = topics.len(), "recovered the data directory");
        let end = controller.view().producer_ids_end;
        let admin = Admin {
            controller,
            next_producer_id: end,
            producer_id_block_end: end,
        };
        let backpressure = Backpressure::new(config.max_pending_requests, config.max_pending_bytes);
        let groups = crate::group::service::GroupService::open(
            &config,
            &backpressure,
            &host,
            logs.sync_group.clone(),
            logs.file_budget.clone(),
        )
        .await?;
        Ok(Arc::new(Broker {
            backpressure,
            groups,
            host,
            config,
            logs,
            admin: tokio::sync::Mutex::new(admin),
            topics: RwLock::new(topics),
            cluster_id,
        }))
    }

    pub fn topic(&self, name: &str) -> Option<Arc<Topic>> {
        self.topics.read().ok()?.get(name).cloned()
    }

    pub fn topic_by_id(&self, id: uuid::Uuid) -> Option<Arc<Topic>> {
        self.topics
            .read()
            .ok()?
            .values()
            .find(|t| t.id == id)
            .cloned()
    }

    /// Every topic, sorted by name.
    pub fn all_topics(&self) -> Vec<Arc<Topic>> {
        let mut v: Vec<Arc<Topic>> = self
            .topics
            .read()
            .map(|t| t.values().cloned().collect())
            .unwrap_or_default();
        v.sort_by(|a, b| a.name.cmp(&b.name));
        v
    }

    /// The topic, created with the defaults if auto-creation is on.
    pub async fn topic_or_create(&self, name: &str) -> Result<Arc<Topic>> {
        if let Some(t) = self.topic(name) {
            return Ok(t);
        }
        if !self.config.auto_create_topics {
            return Err(HelixError::UnknownTopicOrPartition);
        }
        validate_topic_name(name)?;
        match self
            .create_topic(name, self.config.default_partitions, BTreeMap::new(), false)
            .await
        {
            Ok(t) => Ok(t),
            Err(HelixError::TopicAlreadyExists(_)) => {
                self.topic(name).ok_or(HelixError::UnknownTopicOrPartition)
            }
            Err(e) => Err(e),
        }
    }

    /// CreateTopics: `partitions` -1 means the default count.
    pub async fn create_topic(
        &self,
        name: &str,
        partitions: i32,
        configs: BTreeMap<String, String>,
        validate_only: bool,
    ) -> Result<Arc<Topic>> {
        let partitions = if partitions == -1 {
            self.config.default_partitions
        } else {
            partitions
        };
        let configs = topic_config::validate_all(&configs)?;
        let id = random_uuid();
        let command = Command::CreateTopic {
            name: name.to_string(),
            id: id.to_string(),
            partitions,
            configs: configs.clone(),
        };
        let mut admin = self.admin.lock().await;
        admin.controller.view().validate(&command)?;
        let effective = EffectiveConfig::resolve(&configs, &self.config);
        if validate_only {
            return Ok(Arc::new(Topic {
                name: name.into(),
                id,
                partitions: Vec::new(),
                configs,
                effective,
            }));
        }
        admin.controller.submit(command)?;
        let opened = open_partitions(
            &self.config,
            &self.logs,
            &self.host,
            name,
            &id,
            0..partitions,
            &effective,
        )
        .await?;
        let topic = Arc::new(Topic {
            name: name.into(),
            id,
            partitions: opened,
            configs,
            effective,
        });
        self.install(topic.clone());
        tracing::info!(topic = name, partitions, "created topic");
        Ok(topic)
    }

    pub async fn delete_topic(&self, name: &str) -> Result<uuid::Uuid> {
        let mut admin = self.admin.lock().await;
        let topic = self
            .topic(name)
            .ok_or(HelixError::UnknownTopicOrPartition)?;
        let id = topic.id;
        admin
            .controller
            .submit(Command::DeleteTopic { name: name.into() })?;
        if let Ok(mut topics) = self.topics.write() {
            topics.remove(name);
        }
        // Stop the partitions before their files go.
        crate::partition::close_all(&topic.partitions).await;
        let dir = topic_dir(&self.config, &id);
        if let Err(e) = std::fs::remove_dir_all(&dir) {
            tracing::warn!(dir = %dir.display(), error = %e, "could not remove a deleted topic's data");
        }
        tracing::info!(topic = name, "deleted topic");
        Ok(id)
    }

    pub async fn create_partitions(
        &self,
        name: &str,
        count: i32,
        validate_only: bool,
    ) -> Result<()> {
        let mut admin = self.admin.lock().await;
        let old = self
            .topic(name)
            .ok_or(HelixError::UnknownTopicOrPartition)?;
        let command = Command::CreatePartitions {
            name: name.into(),
            count,
        };
        admin.controller.view().validate(&command)?;
        if validate_only {
            return Ok(());
        }
        admin.controller.submit(command)?;
        let mut partitions = old.partitions.clone();
        let first_new = old.partitions.len() as i32;
        partitions.extend(
            open_partitions(
                &self.config,
                &self.logs,
                &self.host,
                name,
                &old.id,
                first_new..count,
                &old.effective,
            )
            .await?,
        );
        self.install(Arc::new(Topic {
            name: old.name.clone(),
            id: old.id,
            partitions,
            configs: old.configs.clone(),
            effective: old.effective,
        }));
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
        let mut admin = self.admin.lock().await;
        let old = self
            .topic(name)
            .ok_or(HelixError::UnknownTopicOrPartition)?;
        if validate_only {
            return Ok(());
        }
        admin.controller.submit(Command::SetTopicConfigs {
            name: name.into(),
            configs: configs.clone(),
        })?;
        let effective = EffectiveConfig::resolve(&configs, &self.config);
        // helix-wal takes retention and segment size at open: partitions
        // reopen their logs when those change.
        let log_settings_changed = effective.retention_ms != old.effective.retention_ms
            || effective.retention_bytes != old.effective.retention_bytes
            || effective.segment_bytes != old.effective.segment_bytes;
        self.install(Arc::new(Topic {
            name: old.name.clone(),
            id: old.id,
            partitions: old.partitions.clone(),
            configs,
            effective,
        }));
        if log_settings_changed {
            let log = log_config(&self.config, &self.logs, &effective);
            for p in &old.partitions {
                p.reconfigure(log.clone()).await;
            }
            // Apply the new retention now rather than at the next sweep.
            let now_ms = now_ms();
            for p in &old.partitions {
                p.retention(now_ms);
            }
        }
        Ok(())
    }

    /// InitProducerId without a transactional id: a fresh id, epoch 0.
    pub async fn next_producer_id(&self) -> Result<i64> {
        let mut admin = self.admin.lock().await;
        if admin.next_producer_id >= admin.producer_id_block_end {
            let end = admin.producer_id_block_end + PRODUCER_ID_BLOCK;
            admin
                .controller
                .submit(Command::AllocateProducerIds { end })?;
            admin.producer_id_block_end = end;
        }
        let id = admin.next_producer_id;
        admin.next_producer_id += 1;
        Ok(id)
    }

    /// Applies every topic's retention settings to its partitions.
    pub fn apply_retention(&self) {
        let now_ms = now_ms();
        for t in self.all_topics() {
            for p in &t.partitions {
                p.retention(now_ms);
            }
        }
    }

    /// Shutdown: every partition flushes and closes its log.
    pub async fn close_all(&self) {
        let all: Vec<Arc<Partition>> = self
            .all_topics()
            .iter()
            .flat_map(|t| t.partitions.clone())
            .collect();
        crate::partition::close_all(&all).await;
        self.groups.close().await;
        let host = self.host.clone();
        let _ = tokio::task::spawn_blocking(move || host.stop()).await;
    }

    fn install(&self, topic: Arc<Topic>) {
        if let Ok(mut topics) = self.topics.write() {
            topics.insert(topic.name.clone(), topic);
        }
    }
}

fn topic_dir(config: &Config, id: &uuid::Uuid) -> PathBuf {
    config.data_dir.join("topics").join(id.simple().to_string())
}

/// Threads recovering partitions at once: their time is mostly fsync
/// latency, which overlaps.
const RECOVERY_THREADS: usize = 8;

/// Opens partitions `indexes` of a topic: recovered on up to
/// [`RECOVERY_THREADS`] plain threads, then handed to the replica host in
/// index order.
async fn open_partitions(
    config: &Config,
    logs: &LogShared,
    host: &ReplicaHost,
    name: &str,
    id: &uuid::Uuid,
    indexes: std::ops::Range<i32>,
    effective: &EffectiveConfig,
) -> Result<Vec<Arc<Partition>>> {
    let all: Vec<i32> = indexes.collect();
    let per_thread = all.len().div_ceil(RECOVERY_THREADS).max(1);
    let recovered: Vec<Result<Vec<Recovered>>> = tokio::task::block_in_place(|| {
        std::thread::scope(|scope| {
            let workers: Vec<_> = all
                .chunks(per_thread)
                .map(|chunk| {
                    scope.spawn(move || {
                        chunk
                            .iter()
                            .map(|p| recover_partition(config, logs, name, id, *p, effective))
                            .collect()
                    })
                })
                .collect();
            workers
                .into_iter()
                .map(|w| {
                    w.join().unwrap_or_else(|_| {
                        Err(HelixError::CorruptState(
                            "partition recovery thread panicked".into(),
                        ))
                    })
                })
                .collect()
        })
    });
    let mut started = Vec::with_capacity(all.len());
    for chunk in recovered {
        for r in chunk? {
            started.push(host.install(r).await?);
        }
    }
    Ok(started)
}

fn recover_partition(
    config: &Config,
    logs: &LogShared,
    name: &str,
    id: &uuid::Uuid,
    index: i32,
    effective: &EffectiveConfig,
) -> Result<Recovered> {
    let dir = topic_dir(config, id).join(index.to_string());
    let log = log_config(config, logs, effective);
    let node = node_id(config)?;
    let settings = PartitionSettings {
        spec: GroupSpec {
            node,
            // Unique per (topic, partition), the same on every node.
            group: helix_raft::GroupId((id.as_u64_pair().0 & !0xffff) | (index as u64 & 0xffff)),
            voters: vec![node],
            raft: raft_settings(config),
        },
        batch: BatchLimits {
            linger: config.batch_linger,
            max_bytes: config.batch_max_bytes,
            max_requests: config.batch_max_requests,
        },
        log,
    };
    crate::partition::recover(&dir, name, index, settings)
}

/// This node's Raft id.
pub fn node_id(config: &Config) -> Result<helix_raft::NodeId> {
    u64::try_from(config.node_id)
        .ok()
        .filter(|n| *n > 0)
        .map(helix_raft::NodeId)
        .ok_or_else(|| HelixError::Config("node_id must be positive".into()))
}

/// The Raft settings of every group of this node.
pub fn raft_settings(config: &Config) -> RaftSettings {
    RaftSettings {
        election_ticks: config.raft_election_ticks,
        heartbeat_ticks: config.raft_heartbeat_ticks,
        max_inflight_appends: config.raft_max_inflight_appends,
        ..RaftSettings::default()
    }
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

/// A partition log's settings from the node's and the topic's.
fn log_config(config: &Config, logs: &LogShared, effective: &EffectiveConfig) -> LogConfig {
    LogConfig {
        // Kafka's own floor for segment.bytes is 14; helix-wal takes any
        // positive size up to its maximum.
        segment_bytes: u64::try_from(effective.segment_bytes)
            .unwrap_or(1 << 30)
            .clamp(14, helix_wal::MAX_SEGMENT_BYTES),
        retention_bytes: u64::try_from(effective.retention_bytes).ok(),
        retention_ms: u64::try_from(effective.retention_ms).ok(),
        durability: match config.write_durability {
            WriteDurability::ReplicationOnly => Durability::ReplicationOnly,
            WriteDurability::Fsync => Durability::Fsync,
        },
        sync_group: Some(logs.sync_group.clone()),
        file_budget: Some(logs.file_budget.clone()),
        ..LogConfig::default()
    }
}

/// The cluster id, created once and kept in the data directory.
fn cluster_id(config: &Config) -> Result<String> {
    let path = config.data_dir.join("cluster-id");
    match std::fs::read_to_string(&path) {
        Ok(s) if !s.trim().is_empty() => Ok(s.trim().to_string()),
        Ok(_) | Err(_) => {
            std::fs::create_dir_all(&config.data_dir)?;
            let id = random_uuid().simple().to_string();
            std::fs::write(&path, &id)?;
            Ok(id)
        }
    }
}

/// A random (v4-shaped) UUID from the standard library's per-process
/// random hasher keys and the clock; topic ids need uniqueness, not secrecy.
pub fn random_uuid() -> uuid::Uuid {
    use std::hash::{BuildHasher, Hasher};
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    let mut words = [0u64; 2];
    for (i, w) in words.iter_mut().enumerate() {
        let mut h = std::collections::hash_map::RandomState::new().build_hasher();
        h.write_u128(nanos);
        h.write_usize(i);
        *w = h.finish();
    }
    uuid::Builder::from_random_bytes(
        ((u128::from(words[0]) << 64) | u128::from(words[1])).to_be_bytes(),
    )
    .into_uuid()
}
