//! The node: what every Kafka handler receives as `Arc<Broker>`. It puts
//! together the cluster view ([`ClusterState`]), the controller, the topic
//! table with this node's replicas, the replica host, the group coordinator
//! and the produce backpressure budget, and offers the few operations
//! handlers need on them; the work itself lives in those modules.

use std::sync::Arc;
use std::time::Duration;

use helix_raft::{GroupId, MemoryBudget, NodeId};
use helix_wal::{Durability, FileBudget, LogConfig, SyncGroup, SyncMethod};

use crate::admin::TopicAdmin;
use crate::budget::Backpressure;
use crate::cluster::ClusterState;
use crate::cluster::peers::{CallService, LinkSlot, PeerHandler, PeerLink, TransportLink};
use crate::config::{Config, WriteDurability};
use crate::controller::election::{CALL_ELECT, ElectionCalls};
use crate::controller::forward::{CALL_CONTROLLER_SUBMIT, ForwardedCalls};
use crate::controller::producer_ids::ProducerIds;
use crate::controller::quorum::{CALL_QUORUM, QuorumCalls};
use crate::controller::service::Controller;
use crate::controller::{TopicRecord, applier};
use crate::error::{HelixError, Result};
use crate::host::{HostSettings, ReplicaHost};
use crate::replica::raft::RaftSettings;
use crate::topics::{LogShared, ReplicaFactory, TopicTable};
use crate::transport::tls::PeerTls;
use crate::transport::{Transport, TransportConfig};
use crate::txn::peer::CALL_TXN;
use crate::txn::peer_calls::TxnCalls;

/// How often retention is applied to every partition.
pub const RETENTION_INTERVAL: Duration = Duration::from_secs(30);

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
    /// The transaction coordinator's host (`__transaction_state`).
    pub txn: Arc<crate::txn::service::TxnService>,
    /// Every replica this node holds.
    pub host: Arc<ReplicaHost>,
    /// Where peers' payloads and calls go (the peer transport's inbound
    /// side; the in-process cluster tests deliver to it directly).
    #[cfg_attr(not(test), allow(dead_code))]
    pub peers: Arc<PeerHandler>,
    /// The peer transport (a single node has none).
    pub transport: Option<Transport>,
    /// Producer ids for idempotent producers.
    pub producer_ids: Arc<ProducerIds>,
    /// Creating, deleting and reconfiguring topics.
    pub admin: TopicAdmin,
    /// What the log cleaner last did per partition (`/metrics`).
    pub cleaner_stats: Arc<crate::compact::stats::CleanerStats>,
    /// The ACL authorizer, when configured (`authorizer`); None allows
    /// every request (ADR 0028, slice 2).
    pub authorizer: Option<crate::acl::authorizer::Authorizer>,
    /// Client quota rates measured on this node (KIP-13, KIP-219).
    pub quotas: Arc<crate::quota::ClientQuotas>,
    /// The peer transport once it runs (DescribeQuorum asks group 0's
    /// leader through it).
    pub link: Arc<LinkSlot>,
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
        let txn_calls = Arc::new(TxnCalls::default());
        let quorum_calls = Arc::new(QuorumCalls::default());
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
                (CALL_TXN, txn_calls.clone()),
                (CALL_QUORUM, quorum_calls.clone()),
                (CALL_ELECT, Arc::new(ElectionCalls::new(host.clone()))),
            ],
        ));
        let transport = match (&config.cluster, link_to) {
            (Some(_), Some(l)) => {
                link.set(l);
                None
            }
            (Some(c), None) if c.nodes.len() > 1 => {
                let mut settings = TransportConfig::new(
                    me.0,
                    c.peer_listen()?,
                    c.peers().map(|n| (n.id as u64, n.peer.clone())).collect(),
                    cluster_id.clone(),
                );
                if let Some(t) = &config.peer_tls {
                    settings.tls = Some(
                        PeerTls::load(&t.keystore_location, &t.truststore_location)
                            .map_err(HelixError::Config)?,
                    );
                }
                let t = Transport::start(settings, peers.clone(), host.links())
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
        let settled = controller.clone();
        let topics = Arc::new(TopicTable::new(
            factory.clone(),
            Box::new(move || settled.caught_up()),
        ));
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
        let producer_ids = ProducerIds::new(controller.clone());
        let txn = crate::txn::service::TxnService::open(
            &factory,
            &cluster,
            &backpressure,
            &topics,
            &producer_ids,
            &link,
            &groups,
        )
        .await?;
        topics.insert(txn.internal_topic());
        txn_calls.set(&txn);
        standing.set_opened();
        controller_calls.set(controller.clone());
        quorum_calls.set(controller.clone());
        cluster.set_liveness(link.clone());
        tokio::spawn(applier::run(controller.clone(), topics.clone()));
        tokio::spawn(crate::cluster::gossip::run(
            cluster.clone(),
            Arc::downgrade(&host),
            link.clone(),
            config.raft_tick,
        ));
        Ok(Arc::new(Broker {
            admin: TopicAdmin::new(&config, cluster.clone(), controller.clone(), topics.clone()),
            cleaner_stats: Arc::default(),
            authorizer: crate::acl::authorizer::Authorizer::from_config(&config.authorizer),
            quotas: Arc::new(crate::quota::ClientQuotas::new(controller.clone())),
            producer_ids,
            backpressure,
            request_budget: crate::budget::RequestBudget::new(config.queued_max_request_bytes),
            groups,
            txn,
            host,
            peers,
            transport,
            config,
            cluster,
            controller,
            topics,
            cluster_id,
            link,
        }))
    }

    /// The tests' way to a topic (handlers reach topics through their
    /// narrow contexts, `kafka::context`).
    #[cfg(test)]
    pub fn topic(&self, name: &str) -> Option<Arc<crate::topics::Topic>> {
        self.topics.get(name)
    }

    /// Applies every topic's retention settings to its local replicas.
    pub fn apply_retention(&self) {
        self.topics.apply_retention();
    }

    /// Shutdown: every replica flushes and closes its log.
    pub async fn close_all(&self) {
        self.topics.close_all().await;
        self.groups.close().await;
        self.txn.close().await;
        crate::replica::close_all(std::slice::from_ref(self.controller.partition())).await;
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
        tokio::task::block_in_place(|| crate::replica::recover(&dir, "controller", 0, settings))?;
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
