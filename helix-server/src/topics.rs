//! The topic table: what the controller says about every topic (id,
//! configs, each partition's replica set) joined with this node's replicas
//! of its partitions. It follows the controller's view: [`TopicTable::reconcile`]
//! opens the replicas of new partitions hosted here, closes and deletes
//! those of deleted topics, and reopens logs whose settings changed.
//! Handlers read it through [`Topic::local`].

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, RwLock};

use helix_raft::{GroupId, NodeId};
use helix_wal::{Durability, FileBudget, LogConfig, SyncGroup};

use crate::batcher::BatchLimits;
use crate::config::{Config, WriteDurability};
use crate::controller::TopicRecord;
use crate::controller::applier::ViewFollower;
use crate::controller::topic_config::EffectiveConfig;
use crate::error::{HelixError, Result};
use crate::host::ReplicaHost;
use crate::replica::raft::{GroupSpec, RaftSettings};
use crate::replica::{Partition, PartitionSettings, Recovered};

/// One partition of a topic.
#[derive(Debug, Clone)]
pub struct TopicPartition {
    pub index: i32,
    pub group: GroupId,
    /// Preferred leader first.
    pub replicas: Vec<NodeId>,
    /// This node's replica, if it holds one.
    pub local: Option<Arc<Partition>>,
    /// Why this node's replica was refused at open (damaged flushed data,
    /// ADR 0001): requests for it get KAFKA_STORAGE_ERROR.
    pub refused: Option<String>,
}

/// A topic as this node knows it. Replaced as a whole when it changes.
#[derive(Debug)]
pub struct Topic {
    pub name: String,
    pub id: uuid::Uuid,
    pub partitions: Vec<TopicPartition>,
    /// Overrides set on the topic.
    pub configs: std::collections::BTreeMap<String, String>,
    pub effective: EffectiveConfig,
    /// Kafka's internal topics (`__consumer_offsets`).
    pub internal: bool,
}

impl Topic {
    /// An internal topic (`__consumer_offsets`, `__transaction_state`) as
    /// Metadata and DescribeConfigs show it; `overrides` are the topic
    /// configs Kafka creates it with (its logs are bounded by snapshots,
    /// ADR 0020, where Kafka's are compacted: the same promise).
    pub fn internal(
        name: &str,
        id: uuid::Uuid,
        partitions: Vec<TopicPartition>,
        overrides: &[(&str, String)],
    ) -> Topic {
        let configs: std::collections::BTreeMap<String, String> = overrides
            .iter()
            .map(|(k, v)| ((*k).to_owned(), v.clone()))
            .collect();
        let effective = EffectiveConfig::resolve(&configs, &crate::config::Config::default());
        Topic {
            name: name.to_owned(),
            id,
            partitions,
            configs,
            effective,
            internal: true,
        }
    }

    /// Replicas per partition (every partition has as many).
    pub fn replication_factor(&self) -> usize {
        self.partitions.first().map_or(0, |p| p.replicas.len())
    }
}

/// The local replica of partition `index` of a topic looked up by name or
/// (`by_id`) by id, or the error a client gets for it.
pub fn replica(topic: Option<&Arc<Topic>>, index: i32, by_id: bool) -> Result<&Arc<Partition>> {
    match topic {
        Some(t) => t.local(index),
        None if by_id => Err(HelixError::UnknownTopicId),
        None => Err(HelixError::UnknownTopicOrPartition),
    }
}

impl Topic {
    /// This node's replica of partition `index`: UNKNOWN_TOPIC_OR_PARTITION
    /// for an index the topic does not have, NOT_LEADER_OR_FOLLOWER when
    /// another node holds it (the client asks Metadata again).
    pub fn local(&self, index: i32) -> Result<&Arc<Partition>> {
        let p = usize::try_from(index)
            .ok()
            .and_then(|i| self.partitions.get(i))
            .ok_or(HelixError::UnknownTopicOrPartition)?;
        if let Some(why) = &p.refused {
            return Err(HelixError::DamagedReplica(why.clone()));
        }
        p.local.as_ref().ok_or(HelixError::NotLeader)
    }

    /// Every replica this node holds.
    pub fn local_replicas(&self) -> impl Iterator<Item = &Arc<Partition>> {
        self.partitions.iter().filter_map(|p| p.local.as_ref())
    }
}

/// What every log of the node shares.
#[derive(Debug, Clone)]
pub struct LogShared {
    /// One group commit for every log (fsync mode).
    pub sync_group: SyncGroup,
    /// One cap on mapped sealed segments for every log.
    pub file_budget: FileBudget,
}

/// How replicas are opened on this node.
#[derive(Debug, Clone)]
pub struct ReplicaFactory {
    pub config: Config,
    pub node: NodeId,
    pub logs: LogShared,
    pub raft: RaftSettings,
    pub host: Arc<ReplicaHost>,
    /// Where the node stands (ADR 0018), handed to every replica it opens.
    pub standing: Arc<crate::rejoin::Standing>,
}

/// A replica after its open: served, or refused with the reason.
pub enum Opened {
    Serving(Arc<Partition>),
    Refused(String),
}

/// A replica whose flushed data is damaged is refused, alone: one log line
/// with the file and position, and the rest of the node serves (ADR 0001).
/// Any other failure to open stops the caller as before.
fn refuse(
    topic: &str,
    index: i32,
    e: HelixError,
) -> Result<std::result::Result<Recovered, String>> {
    match &e {
        HelixError::Wal(
            damage @ helix_wal::WalError::Corrupt {
                file,
                position,
                reason,
            },
        ) => {
            tracing::error!(
                topic,
                partition = index,
                file = %file.display(),
                position,
                %reason,
                "replica refused: data it had flushed is damaged; it serves nothing and takes no writes until repaired (the node's other partitions serve)"
            );
            Ok(Err(damage.to_string()))
        }
        _ => Err(e),
    }
}

/// Threads recovering partitions at once: their time is mostly fsync
/// latency, which overlaps.
const RECOVERY_THREADS: usize = 8;

impl ReplicaFactory {
    /// A partition log's settings from the node's and the topic's.
    pub fn log_config(&self, effective: &EffectiveConfig) -> LogConfig {
        LogConfig {
            // Kafka's own floor for segment.bytes is 14; helix-wal takes any
            // positive size up to its maximum.
            segment_bytes: u64::try_from(effective.segment_bytes)
                .unwrap_or(1 << 30)
                .clamp(14, helix_wal::MAX_SEGMENT_BYTES),
            segment_ms: u64::try_from(effective.segment_ms).ok(),
            // Kafka's 0 indexes every batch; the WAL's 1 does the same.
            index_interval_bytes: u64::try_from(effective.index_interval_bytes)
                .unwrap_or(4096)
                .max(1),
            // Retention is the `delete` policy: a `compact`-only topic keeps
            // its segments for the cleaner (Kafka's `LogConfig.delete`).
            retention_bytes: u64::try_from(effective.retention_bytes)
                .ok()
                .filter(|_| effective.cleanup.delete),
            retention_ms: u64::try_from(effective.retention_ms)
                .ok()
                .filter(|_| effective.cleanup.delete),
            durability: self.durability(),
            sync_group: Some(self.logs.sync_group.clone()),
            file_budget: Some(self.logs.file_budget.clone()),
            ..LogConfig::default()
        }
    }

    pub fn durability(&self) -> Durability {
        match self.config.write_durability {
            WriteDurability::ReplicationOnly => Durability::ReplicationOnly,
            WriteDurability::Fsync => Durability::Fsync,
        }
    }

    pub fn settings(
        &self,
        group: GroupId,
        voters: Vec<NodeId>,
        log: LogConfig,
    ) -> PartitionSettings {
        PartitionSettings {
            spec: GroupSpec {
                node: self.node,
                group,
                voters,
                raft: self.raft.clone(),
            },
            batch: BatchLimits {
                linger: self.config.batch_linger,
                max_bytes: self.config.batch_max_bytes,
                max_requests: self.config.batch_max_requests,
            },
            log,
            producer_id_expiration_ms: self.config.producer_id_expiration_ms,
            standing: self.standing.clone(),
            links: self.host.links(),
        }
    }

    /// Recovers replicas (blocking; up to [`RECOVERY_THREADS`] at once) and
    /// hands them to the host, in order. A fresh replica whose preferred
    /// leader is this node campaigns at once rather than after a timeout.
    pub async fn open(
        &self,
        topic: &str,
        wanted: Vec<(i32, PathBuf, PartitionSettings)>,
    ) -> Result<Vec<(i32, Opened)>> {
        let per_thread = wanted.len().div_ceil(RECOVERY_THREADS).max(1);
        type Outcome = (i32, bool, std::result::Result<Recovered, String>);
        let recovered: Vec<Result<Vec<Outcome>>> = tokio::task::block_in_place(|| {
            std::thread::scope(|scope| {
                let workers: Vec<_> = wanted
                    .chunks(per_thread)
                    .map(|chunk| {
                        scope.spawn(move || {
                            chunk
                                .iter()
                                .map(|(index, dir, settings)| {
                                    let fresh = !dir.join("wal").exists();
                                    let leads =
                                        settings.spec.voters.first() == Some(&settings.spec.node);
                                    let recovered = match crate::replica::recover(
                                        dir,
                                        topic,
                                        *index,
                                        settings.clone(),
                                    ) {
                                        Ok(r) => Ok(r),
                                        Err(e) => refuse(topic, *index, e)?,
                                    };
                                    Ok((*index, fresh && leads, recovered))
                                })
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
        let mut opened = Vec::with_capacity(wanted.len());
        for chunk in recovered {
            for (index, campaign, r) in chunk? {
                let r = match r {
                    Ok(r) => r,
                    Err(why) => {
                        opened.push((index, Opened::Refused(why)));
                        continue;
                    }
                };
                let p = self.host.install(r).await?;
                if campaign && p.leadership().role != helix_raft::Role::Leader {
                    self.host.campaign(p.group);
                }
                opened.push((index, Opened::Serving(p)));
            }
        }
        Ok(opened)
    }
}

/// The topics of the cluster and this node's replicas of them.
pub struct TopicTable {
    factory: ReplicaFactory,
    topics: RwLock<HashMap<String, Arc<Topic>>>,
    /// Whether this node has caught up with the controller's log. Retention deletes by
    /// the topics' settings, and a node behind the log may hold settings
    /// the operator has changed since: a node restarted right after
    /// `retention.ms` was raised again deleted what the new setting keeps,
    /// and its replica no longer matched the others. Kafka's brokers start
    /// deleting only once caught up with the metadata log too.
    caught_up: CaughtUp,
}

/// Tells whether the node has caught up with the controller's log.
pub type CaughtUp = Box<dyn Fn() -> bool + Send + Sync>;

/// The Raft group of partition `index` of the topic with id `id`: the same
/// on every node, unique per (topic, partition).
pub fn partition_group(id: &uuid::Uuid, index: i32) -> GroupId {
    GroupId((id.as_u64_pair().0 & !0xffff) | (index as u64 & 0xffff))
}

impl std::fmt::Debug for TopicTable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TopicTable")
            .field("factory", &self.factory)
            .field("topics", &self.topics)
            .finish_non_exhaustive()
    }
}

impl TopicTable {
    /// `caught_up`: whether the node has caught up with the controller's
    /// log (retention waits for it, see the field).
    pub fn new(factory: ReplicaFactory, caught_up: CaughtUp) -> TopicTable {
        TopicTable {
            factory,
            topics: RwLock::new(HashMap::new()),
            caught_up,
        }
    }

    /// Whether retention may delete now: the settings are current.
    fn settings_current(&self) -> bool {
        self.current()
    }

    /// Whether the table holds every topic the controller's log had
    /// committed when this node first heard its leader: only then is a
    /// topic missing here deleted rather than not known yet (a node just
    /// restarted rebuilds its table as it learns what is committed).
    pub fn current(&self) -> bool {
        (self.caught_up)()
    }

    pub fn get(&self, name: &str) -> Option<Arc<Topic>> {
        self.topics.read().ok()?.get(name).cloned()
    }

    pub fn by_id(&self, id: uuid::Uuid) -> Option<Arc<Topic>> {
        self.topics
            .read()
            .ok()?
            .values()
            .find(|t| t.id == id)
            .cloned()
    }

    /// Every topic, sorted by name.
    pub fn all(&self) -> Vec<Arc<Topic>> {
        let mut v: Vec<Arc<Topic>> = self
            .topics
            .read()
            .map(|t| t.values().cloned().collect())
            .unwrap_or_default();
        v.sort_by(|a, b| a.name.cmp(&b.name));
        v
    }

    /// Every replica this node holds, of every topic.
    pub fn local_replicas(&self) -> Vec<Arc<Partition>> {
        self.all()
            .iter()
            .flat_map(|t| t.local_replicas().cloned().collect::<Vec<_>>())
            .collect()
    }

    /// Adds a topic that is not in the controller's view (internal topics),
    /// its local replicas already open.
    pub fn insert(&self, topic: Topic) {
        if let Ok(mut topics) = self.topics.write() {
            topics.insert(topic.name.clone(), Arc::new(topic));
        }
    }

    /// Brings `name` in line with the controller's record of it (None:
    /// deleted): opens, closes and reconfigures local replicas. Idempotent.
    pub async fn reconcile(&self, name: &str, record: Option<&TopicRecord>) -> Result<()> {
        let old = self.get(name);
        match (old, record) {
            (None, None) => Ok(()),
            (Some(old), None) => {
                self.remove(&old).await;
                Ok(())
            }
            (Some(old), Some(rec)) if old.id != rec.id => {
                self.remove(&old).await;
                self.create(name, rec, None).await
            }
            (old, Some(rec)) => self.create(name, rec, old).await,
        }
    }

    /// Installs `rec` as the topic, reusing the replicas `old` already has
    /// open and opening the rest that live here.
    async fn create(&self, name: &str, rec: &TopicRecord, old: Option<Arc<Topic>>) -> Result<()> {
        let effective = EffectiveConfig::resolve(&rec.configs, &self.factory.config);
        let log = self.factory.log_config(&effective);
        let me = self.factory.node;
        let mut partitions: Vec<TopicPartition> = rec
            .replicas
            .iter()
            .enumerate()
            .map(|(i, replicas)| TopicPartition {
                index: i as i32,
                group: partition_group(&rec.id, i as i32),
                replicas: replicas.clone(),
                local: old
                    .as_ref()
                    .and_then(|o| o.partitions.get(i))
                    .and_then(|p| p.local.clone()),
                refused: None,
            })
            .collect();
        let wanted: Vec<(i32, PathBuf, PartitionSettings)> = partitions
            .iter()
            .filter(|p| p.local.is_none() && p.replicas.contains(&me))
            .map(|p| {
                (
                    p.index,
                    self.topic_dir(&rec.id).join(p.index.to_string()),
                    self.factory
                        .settings(p.group, p.replicas.clone(), log.clone()),
                )
            })
            .collect();
        for (index, opened) in self.factory.open(name, wanted).await? {
            match opened {
                Opened::Serving(p) => partitions[index as usize].local = Some(p),
                Opened::Refused(why) => partitions[index as usize].refused = Some(why),
            }
        }
        // Every field the partition log's settings come from.
        let log_settings_changed = old.as_ref().is_some_and(|o| {
            let (a, b) = (&o.effective, &effective);
            (a.retention_ms, a.retention_bytes, a.segment_bytes)
                != (b.retention_ms, b.retention_bytes, b.segment_bytes)
                || (a.segment_ms, a.index_interval_bytes) != (b.segment_ms, b.index_interval_bytes)
                || a.cleanup.delete != b.cleanup.delete
        });
        let topic = Arc::new(Topic {
            name: name.to_string(),
            id: rec.id,
            partitions,
            configs: rec.configs.clone(),
            effective,
            internal: false,
        });
        if let Ok(mut topics) = self.topics.write() {
            topics.insert(name.to_string(), topic.clone());
        }
        if old.is_none() {
            tracing::info!(
                topic = name,
                partitions = rec.replicas.len(),
                "topic created"
            );
        }
        if log_settings_changed {
            // helix-wal takes these at open: the replicas reopen their logs,
            // then apply the new retention now rather than at the next sweep
            // (not while replaying settings that later ones may replace).
            let now_ms = crate::clock::now_ms();
            let current = self.settings_current();
            for p in topic.local_replicas() {
                p.reconfigure(log.clone()).await;
                if current {
                    p.retention(now_ms);
                }
            }
        }
        Ok(())
    }

    async fn remove(&self, topic: &Topic) {
        if let Ok(mut topics) = self.topics.write() {
            topics.remove(&topic.name);
        }
        let local: Vec<Arc<Partition>> = topic.local_replicas().cloned().collect();
        // Stop the replicas before their files go.
        crate::replica::close_all(&local).await;
        let dir = self.topic_dir(&topic.id);
        if dir.exists()
            && let Err(e) = std::fs::remove_dir_all(&dir)
        {
            tracing::warn!(dir = %dir.display(), error = %e, "could not remove a deleted topic's data");
        }
        tracing::info!(topic = %topic.name, "topic deleted");
    }

    fn topic_dir(&self, id: &uuid::Uuid) -> PathBuf {
        self.factory
            .config
            .data_dir
            .join("topics")
            .join(id.simple().to_string())
    }

    /// Applies every topic's retention settings to its local replicas,
    /// once the node has caught up with the controller's log.
    pub fn apply_retention(&self) {
        if !self.settings_current() {
            tracing::debug!("retention waits: not caught up with the controller's log");
            return;
        }
        let now_ms = crate::clock::now_ms();
        for p in self.local_replicas() {
            p.retention(now_ms);
        }
    }

    /// The local replicas the log cleaner looks at: those of topics whose
    /// `cleanup.policy` has `compact`, once the node has caught up with
    /// the controller's log (the policy it cleans by is then current).
    pub fn compaction_targets(&self) -> Vec<crate::compact::cleaner::CleanTarget> {
        if !self.settings_current() {
            return Vec::new();
        }
        let mut out = Vec::new();
        for topic in self.all() {
            let e = &topic.effective;
            // Internal topics keep their own snapshot-and-truncate scheme
            // (a `log_cleanup_policy=compact` node default is not theirs).
            if !e.cleanup.compact || topic.internal {
                continue;
            }
            let shape = (&self.factory.log_config(e)).into();
            let config = crate::compact::policy::CompactionConfig {
                min_cleanable_ratio: e.compaction.min_cleanable_ratio,
                min_compaction_lag_ms: e.compaction.min_compaction_lag_ms,
                max_compaction_lag_ms: e.compaction.max_compaction_lag_ms,
            };
            // Every replica cleans its own log: a follower caught up from
            // a cleaned range gets it as `Stored` entries (ADR 0027 step
            // 3), keeping the leader's offsets over the gaps.
            for p in topic.local_replicas() {
                out.push(crate::compact::cleaner::CleanTarget {
                    topic: topic.name.clone(),
                    partition: p.clone(),
                    config,
                    delete_retention_ms: e.compaction.delete_retention_ms,
                    shape,
                });
            }
        }
        out
    }

    /// Shutdown: every replica flushes and closes its log.
    pub async fn close_all(&self) {
        crate::replica::close_all(&self.local_replicas()).await;
    }
}

/// The table follows the controller's view: each topic change reconciles
/// this node's replicas of it.
impl ViewFollower for TopicTable {
    fn topic_changed<'a>(
        &'a self,
        name: &'a str,
        record: Option<&'a TopicRecord>,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = Result<()>> + Send + 'a>> {
        Box::pin(self.reconcile(name, record))
    }
}
