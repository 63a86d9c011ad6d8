//! The node: what every Kafka handler receives as `Arc<Broker>`. It puts
//! together the cluster view ([`ClusterState`]), the controller, the topic
//! table with this node's replicas, the replica host, the group coordinator
//! and the produce backpressure budget, and offers the few operations
//! handlers need on them; the work itself lives in those modules.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use helix_raft::{GroupId, MemoryBudget, NodeId};
use helix_wal::{Durability, FileBudget, LogConfig, SyncGroup, SyncMethod};
use kafka_protocol::error::ResponseError;

use crate::budget::Backpressure;
use crate::cluster::ClusterState;
use crate::cluster::peers::{CallService, LinkSlot, PeerHandler, PeerLink, TransportLink};
use crate::config::{Config, WriteDurability};
use crate::controller::forward::{CALL_CONTROLLER_SUBMIT, ForwardedCalls};
use crate::controller::producer_ids::ProducerIds;
use crate::controller::service::Controller;
use crate::controller::topic_config;
use crate::controller::{Command, TopicRecord, applier, placement, validate_topic_name};
use crate::error::{HelixError, Result};
use crate::partition::raft::RaftSettings;
use crate::replica::{HostSettings, ReplicaHost};
use crate::topics::{LogShared, ReplicaFactory, Topic, TopicTable};
use crate::transport::{Transport, TransportConfig};

/// How often retention is applied to every partition.
pub const RETENTION_INTERVAL: Duration = Duration::from_secs(30);

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

/// The node.
#[derive(Debug)]
pub struct Broker {
    pub config: Config,
    pub cluster_id: String,
    pub cluster: Arc<ClusterState>,
    pub controller: Arc<Controller>,
    pub topics: Arc<TopicTable>,
    pub backpressure: Backpressure,
    /// Request bytes being received and processed (`queued_max_request_bytes`).
    pub request_budget: crate::budget::RequestBudget,
    /// The consumer-group coordinator and its coordinator partitions.
    pub groups: Arc<crate::group::service::GroupService>,
    /// Every replica this node holds.
    pub host: Arc<ReplicaHost>,
    /// Where peers' payloads and calls go (the peer transport's inbound
    /// side; the in-process cluster tests deliver to it directly).
    #[cfg_attr(not(test), allow(dead_code))]
    pub peers: Arc<PeerHandler>,
    /// The peer transport (a single node has none).
    pub transport: Option<Transport>,
    /// Producer ids for idempotent producers.
    producer_ids: Arc<ProducerIds>,
}

impl Broker {
    /// Opens the data directory: the controller's replica and view, then
    /// every replica this node holds, the group coordinator, and the tasks
    /// that keep them in step with the cluster.
    pub async fn open(config: Config) -> Result<Arc<Broker>> {
        Broker::open_with(config, None).await
    }

    /// As `open`, over `link` instead of the peer transport when given (the
    /// in-process cluster tests join brokers in memory).
    pub async fn open_with(
        config: Config,
        link_to: Option<Arc<dyn PeerLink>>,
    ) -> Result<Arc<Broker>> {
        let cluster = Arc::new(ClusterState::new(&config)?);
        let me = cluster.me;
        let cluster_id = config.resolve_cluster_id()?;
        let logs = LogShared {
            sync_group: SyncGroup::with_method(sync_method(config.write_durability)),
            file_budget: FileBudget::new(FileBudget::DEFAULT_MAX_MAPPED),
        };
        let link = Arc::new(LinkSlot::default());
        let standing = crate::rejoin::Standing::pending(&config.data_dir)?;
        let host = ReplicaHost::start(
            HostSettings {
                node: me,
                shards: config.shards,
                tick: config.raft_tick,
                sync_group: logs.sync_group.clone(),
                replica_lag: config.replica_lag_time_max,
                balance_every: config
                    .auto_leader_rebalance_enable
                    .then_some(config.leader_imbalance_check_interval),
            },
            link.clone(),
        )?;
        // The transport runs before any group does: a node deciding how it
        // starts asks its peers, and answers theirs, first (ADR 0018).
        let controller_calls = Arc::new(ForwardedCalls::default());
        let peers = Arc::new(PeerHandler::new(
            host.clone(),
            cluster.clone(),
            standing.clone(),
            vec![
                (
                    crate::rejoin::CALL_STATUS,
                    standing.clone() as Arc<dyn CallService>,
                ),
                (CALL_CONTROLLER_SUBMIT, controller_calls.clone()),
            ],
        ));
        let transport = match (&config.cluster, link_to) {
            (Some(_), Some(l)) => {
                link.set(l);
                None
            }
            (Some(c), None) if c.nodes.len() > 1 => {
                let settings = TransportConfig::new(
                    me.0,
                    c.peer_listen()?,
                    c.peers().map(|n| (n.id as u64, n.peer.clone())).collect(),
                    cluster_id.clone(),
                );
                let t = Transport::start(settings, peers.clone())
                    .await
                    .map_err(|e| HelixError::Config(e.to_string()))?;
                link.set(Arc::new(TransportLink(t.clone())));
                Some(t)
            }
            _ => None,
        };
        // In-process test clusters (no transport) always start fresh.
        let ask = transport.as_ref().map(|t| TransportLink(t.clone()));
        let others: Vec<NodeId> = cluster
            .member_ids()
            .into_iter()
            .filter(|n| *n != me)
            .collect();
        crate::rejoin::establish(
            &config,
            &cluster_id,
            me,
            &others,
            ask.as_ref().map(|l| l as &dyn PeerLink),
            &standing,
        )
        .await?;
        let factory = ReplicaFactory {
            config: config.clone(),
            node: me,
            logs,
            raft: raft_settings(&config),
            host: host.clone(),
            standing: standing.clone(),
        };
        let backpressure = Backpressure::new(config.max_pending_requests, config.max_pending_bytes);
        let controller = Arc::new(open_controller(&factory, &cluster, &backpressure, &link).await?);
        if standing.rejoining() {
            tokio::spawn(crate::rejoin::finish_rejoin(
                standing.clone(),
                controller.clone(),
                config.data_dir.join("controller"),
            ));
        }
        let topics = Arc::new(TopicTable::new(factory.clone()));
        let records: Vec<(String, TopicRecord)> = controller
            .view()
            .view
            .topics
            .iter()
            .map(|(n, r)| (n.clone(), r.clone()))
            .collect();
        for (name, record) in &records {
            topics.reconcile(name, Some(record)).await?;
        }
        tracing::info!(topics = records.len(), "recovered the data directory");
        let groups =
            crate::group::service::GroupService::open(&factory, &cluster, &backpressure).await?;
        topics.insert(groups.internal_topic());
        standing.set_opened();
        controller_calls.set(controller.clone());
        cluster.set_liveness(link.clone());
        tokio::spawn(applier::run(controller.clone(), topics.clone()));
        tokio::spawn(crate::cluster::gossip::run(
            cluster.clone(),
            Arc::downgrade(&host),
            link.clone(),
            config.raft_tick,
        ));
        Ok(Arc::new(Broker {
            producer_ids: ProducerIds::new(controller.clone()),
            backpressure,
            request_budget: crate::budget::RequestBudget::new(config.queued_max_request_bytes),
            groups,
            host,
            peers,
            transport,
            config,
            cluster,
            controller,
            topics,
            cluster_id,
        }))
    }

    pub fn topic(&self, name: &str) -> Option<Arc<Topic>> {
        self.topics.get(name)
    }

    pub fn topic_by_id(&self, id: uuid::Uuid) -> Option<Arc<Topic>> {
        self.topics.by_id(id)
    }

    /// Every topic, sorted by name.
    pub fn all_topics(&self) -> Vec<Arc<Topic>> {
        self.topics.all()
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
        self.config
            .default_replication_factor
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
                    self.config.default_partitions
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

    pub async fn delete_topic(&self, name: &str) -> Result<uuid::Uuid> {
        let topic = self
            .topic(name)
            .ok_or(HelixError::UnknownTopicOrPartition)?;
        if topic.internal {
            return Err(HelixError::InvalidRequest(format!(
                "{name} is an internal topic"
            )));
        }
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
        let topic = self
            .topic(name)
            .ok_or(HelixError::UnknownTopicOrPartition)?;
        if topic.internal {
            return Err(HelixError::InvalidRequest(format!(
                "{name} is an internal topic"
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

    /// InitProducerId without a transactional id: a fresh id, epoch 0.
    pub async fn next_producer_id(&self) -> Result<i64> {
        self.producer_ids.next().await
    }

    /// Applies every topic's retention settings to its local replicas.
    pub fn apply_retention(&self) {
        self.topics.apply_retention();
    }

    /// Shutdown: every replica flushes and closes its log.
    pub async fn close_all(&self) {
        self.topics.close_all().await;
        self.groups.close().await;
        crate::partition::close_all(std::slice::from_ref(self.controller.partition())).await;
        let host = self.host.clone();
        let _ = tokio::task::spawn_blocking(move || host.stop()).await;
        if let Some(t) = &self.transport {
            for p in t.status() {
                tracing::info!("peer transport at shutdown: {p}");
            }
            t.shutdown();
        }
    }
}

/// How fsync rounds flush. With fsync durability every log is flushed and one
/// `syncfs` covers them all. With replication-only only the controller's log
/// is, and a `syncfs` for it would also write back every partition's
/// unflushed bytes (2.2 s under load, measured): flush its files alone.
fn sync_method(durability: WriteDurability) -> SyncMethod {
    match durability {
        WriteDurability::Fsync => SyncMethod::Syncfs,
        WriteDurability::ReplicationOnly => SyncMethod::PerFile,
    }
}

/// Opens the controller: group 0 (every member a voter) over its own WAL
/// in `<data-dir>/controller` (always fsync: metadata must outlive a power
/// loss), and its view rebuilt from it.
async fn open_controller(
    factory: &ReplicaFactory,
    cluster: &ClusterState,
    backpressure: &Backpressure,
    link: &Arc<LinkSlot>,
) -> Result<Controller> {
    let dir = factory.config.data_dir.join("controller");
    let log = LogConfig {
        durability: Durability::Fsync,
        segment_bytes: 64 << 20,
        sync_group: Some(factory.logs.sync_group.clone()),
        file_budget: Some(factory.logs.file_budget.clone()),
        ..LogConfig::default()
    };
    let members = cluster.member_ids();
    let settings = factory.settings(GroupId(0), members.clone(), log);
    let recovered =
        tokio::task::block_in_place(|| crate::partition::recover(&dir, "controller", 0, settings))?;
    let partition = factory.host.install(recovered).await?;
    tokio::task::block_in_place(|| {
        applier::open(
            partition,
            cluster.me,
            members,
            &dir,
            backpressure.clone(),
            link.clone(),
        )
    })
}

/// The Raft settings of every group of this node (one memory budget
/// shared by all of them).
fn raft_settings(config: &Config) -> RaftSettings {
    RaftSettings {
        election_ticks: config.raft_election_ticks,
        heartbeat_ticks: config.raft_heartbeat_ticks,
        max_inflight_appends: config.raft_max_inflight_appends,
        node_budget: Some(MemoryBudget::new(config.raft_memory_budget_bytes)),
        ..RaftSettings::default()
    }
}
