//! The coordinator's host inside the broker: owns the [`Coordinator`]
//! behind a mutex (never held across an await), turns its proposals into
//! records appended to the coordinator partitions (the same path as
//! Produce, acks=all), reports acknowledgements in log order and drives
//! `tick` from the wall clock.
//!
//! Coordinator partitions are the internal topic `__consumer_offsets`:
//! replicated Raft groups like any partition, placed on the members by a
//! rule every node computes alike (`controller::placement::internal`), in
//! `<data-dir>/groups/<n>`. A node coordinates the groups of the partitions
//! it leads: when it becomes a partition's leader it waits until everything
//! its log held is acknowledged (its new term's no-op), replays the log into
//! the coordinator, and serves; when it stops leading, the partition is
//! unloaded and its clients move to the new leader (FindCoordinator).
//!
//! A TxnOffsetCommit's entry is appended as a transactional batch of its
//! producer; the transaction coordinator writes its markers into the same
//! partition (`txn::markers`, through the topic table, which holds this
//! node's replicas of `__consumer_offsets` too).
//! The host reads the log after its view's position for those markers, in
//! log order with its own entries: before applying an acknowledged entry
//! (what precedes it in the log first), and on every tick while none of its
//! proposals is in flight (then nothing of its own can precede a marker).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use helix_raft::GroupId;
use helix_wal::LogConfig;
use kafka_protocol::messages::ResponseKind;
use tokio::sync::{mpsc, oneshot};

use super::coordinator::Coordinator;
use super::error::GroupError;
use super::response::{Proposal, Reply};
use super::types::LoggedEntry;
use super::types::{ClientInfo, CoordinatorPartition, ProposalId, RequestToken};
use super::wire::{GroupCall, NodeAddress, find_coordinator};
use crate::budget::Backpressure;
use crate::clock::now_ms_unsigned;
use crate::cluster::ClusterState;
use crate::controller::placement;
use crate::error::{HelixError, Result};
use crate::replica::Partition;
use crate::replica::internal::{self, InternalEntry, LeaderLoaded, TxnProducer};
use crate::replica::internal_queue::{self, Queued, SettlesProposals};
use crate::topics::{Opened, ReplicaFactory, Topic, TopicPartition};

/// Kafka's name of the internal topic holding group records.
pub const GROUPS_TOPIC: &str = "__consumer_offsets";
/// How often deadlines are checked. Session timeouts are seconds long; a
/// member expires at most this much late.
const TICK_INTERVAL: Duration = Duration::from_millis(100);
/// Raft group ids of coordinator partitions ("HELIXG" in the high bytes;
/// topic partitions take theirs from random topic ids).
const COORDINATOR_RAFT_GROUPS: u64 = 0x4845_4c49_5847_0000;

/// Refuses to open a data dir whose coordinator partitions were created with
/// another `coordinator_partitions`: group ids would hash elsewhere and
/// their groups and offsets would silently vanish. The count is kept in
/// `groups/partition-count` (a single-node data dir from before holds every
/// partition, so their number is the count).
fn check_partition_count(data_dir: &std::path::Path, count: u32) -> Result<()> {
    let dir = data_dir.join("groups");
    let file = dir.join("partition-count");
    let recorded = match std::fs::read_to_string(&file) {
        Ok(text) => Some(text.trim().parse::<u32>().map_err(|_| {
            HelixError::Config(format!("{}: {text:?} is not a count", file.display()))
        })?),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => match std::fs::read_dir(&dir) {
            Ok(entries) => {
                let n = entries
                    .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
                    .count() as u32;
                (n > 0).then_some(n)
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
            Err(e) => return Err(HelixError::Config(format!("cannot list groups/: {e}"))),
        },
        Err(e) => return Err(e.into()),
    };
    if let Some(n) = recorded
        && n != count
    {
        return Err(HelixError::Config(format!(
            "the data dir was made with {n} coordinator partitions; \
             group_coordinator_partitions is {count} (it cannot change)"
        )));
    }
    std::fs::create_dir_all(&dir)?;
    std::fs::write(&file, format!("{count}\n"))?;
    Ok(())
}

/// The coordinator and the requests waiting for its replies.
#[derive(Debug)]
struct Host {
    coordinator: Coordinator,
    waiting: HashMap<RequestToken, oneshot::Sender<Reply>>,
    next_token: u64,
}

/// A group as its coordinator holds it (metrics).
#[derive(Debug, Clone)]
pub struct GroupView {
    pub id: String,
    pub state: &'static str,
    pub members: usize,
    /// (topic, partition, committed offset).
    pub offsets: Vec<(String, i32, i64)>,
}

/// The broker's group service.
#[derive(Debug)]
pub struct GroupService {
    host: Mutex<Host>,
    /// One ordered proposal queue per coordinator partition held here
    /// (`replica::internal_queue`).
    proposers: HashMap<u32, mpsc::UnboundedSender<Queued<ProposalId>>>,
    /// Every coordinator partition: its group, replicas and local replica.
    partitions: Vec<TopicPartition>,
    cluster: Arc<ClusterState>,
    topic_id: uuid::Uuid,
    /// Segment size of its logs (described as `segment.bytes`).
    segment_bytes: u64,
}

impl GroupService {
    /// Opens the coordinator partitions this node holds and starts the
    /// tasks that load them as their leadership comes and goes, propose
    /// and tick.
    pub async fn open(
        factory: &ReplicaFactory,
        cluster: &Arc<ClusterState>,
        backpressure: &Backpressure,
    ) -> Result<Arc<GroupService>> {
        let config = &factory.config;
        let group_config = config.groups.clone();
        check_partition_count(&config.data_dir, group_config.coordinator_partitions)?;
        let count = group_config.coordinator_partitions;
        let segment_bytes = group_config.segment_bytes;
        let coordinator = Coordinator::new(group_config);
        // No retention: these logs are the groups' state (Kafka compacts
        // them instead; Helix snapshots and deletes before the snapshot).
        let log = LogConfig {
            segment_bytes,
            durability: factory.durability(),
            sync_group: Some(factory.logs.sync_group.clone()),
            file_budget: Some(factory.logs.file_budget.clone()),
            ..LogConfig::default()
        };
        let members = cluster.member_ids();
        let rf = members.len().min(3);
        let sets = placement::internal(&members, rf, count as usize);
        let mut partitions: Vec<TopicPartition> = sets
            .into_iter()
            .enumerate()
            .map(|(i, replicas)| TopicPartition {
                index: i as i32,
                group: GroupId(COORDINATOR_RAFT_GROUPS | i as u64),
                replicas,
                local: None,
                refused: None,
            })
            .collect();
        let wanted = partitions
            .iter()
            .filter(|p| p.replicas.contains(&factory.node))
            .map(|p| {
                (
                    p.index,
                    config.data_dir.join("groups").join(p.index.to_string()),
                    factory.settings(p.group, p.replicas.clone(), log.clone()),
                )
            })
            .collect();
        for (index, opened) in factory.open(GROUPS_TOPIC, wanted).await? {
            match opened {
                Opened::Serving(p) => partitions[index as usize].local = Some(p),
                Opened::Refused(why) => partitions[index as usize].refused = Some(why),
            }
        }
        let mut proposers = HashMap::new();
        let mut queues = Vec::new();
        for p in &partitions {
            if let Some(local) = &p.local {
                let (tx, rx) = mpsc::unbounded_channel();
                proposers.insert(p.index as u32, tx);
                queues.push((local.clone(), rx));
            }
        }
        let service = Arc::new(GroupService {
            host: Mutex::new(Host {
                coordinator,
                waiting: HashMap::new(),
                next_token: 0,
            }),
            proposers,
            partitions,
            cluster: cluster.clone(),
            topic_id: internal_topic_id(),
            segment_bytes,
        });
        for (partition, rx) in queues {
            let index = CoordinatorPartition(partition.index as u32);
            internal::serve(&service, index, partition.clone())?;
            tokio::spawn(internal_queue::propose_in_order(
                Arc::downgrade(&service),
                index,
                partition,
                rx,
                backpressure.clone(),
            ));
        }
        tokio::spawn(tick(Arc::downgrade(&service)));
        Ok(service)
    }

    /// `__consumer_offsets` as Metadata shows it (internal).
    pub fn internal_topic(&self) -> Topic {
        // Kafka creates it with these three overrides (measured on 3.9.1).
        Topic::internal(
            GROUPS_TOPIC,
            self.topic_id,
            self.partitions.clone(),
            &[
                ("cleanup.policy", "compact".into()),
                ("compression.type", "producer".into()),
                ("segment.bytes", self.segment_bytes.to_string()),
            ],
        )
    }

    /// The node coordinating `group_id`: the leader of its partition.
    fn coordinator_of(&self, group_id: &str) -> Option<NodeAddress> {
        // A node that hears no majority cannot vouch for any leader:
        // COORDINATOR_NOT_AVAILABLE, retriable (issue 30 item 7).
        if !self.cluster.hears_majority() {
            return None;
        }
        let index = self.lock().coordinator.partition_for(group_id).0 as usize;
        let p = self.partitions.get(index)?;
        let leader = self.cluster.leadership(p.group, p.local.as_deref())?.leader;
        let m = self.cluster.member(leader)?;
        Some(NodeAddress {
            node_id: i32::try_from(m.id.0).ok()?,
            host: m.host.clone(),
            port: m.port,
        })
    }

    /// Answers one group call from `client_id` at `client_host` (Kafka's
    /// "/1.2.3.4" form, shown by DescribeGroups). The future resolves when the coordinator
    /// replies (a JoinGroup may wait for the whole join phase).
    pub async fn call(
        &self,
        call: GroupCall,
        version: i16,
        client_id: String,
        client_host: String,
    ) -> Result<ResponseKind> {
        let request = match call {
            GroupCall::FindCoordinator(request) => {
                return Ok(ResponseKind::FindCoordinator(find_coordinator(
                    &request,
                    version,
                    |key| self.coordinator_of(key),
                )));
            }
            GroupCall::Coordinator(request) => request,
        };
        let (tx, rx) = oneshot::channel();
        {
            let mut host = self.lock();
            host.next_token += 1;
            let token = RequestToken(host.next_token);
            host.waiting.insert(token, tx);
            let client = ClientInfo {
                client_id,
                client_host,
            };
            host.coordinator
                .handle(token, version, &client, request, now_ms_unsigned());
            self.drain(&mut host);
        }
        let reply = rx.await.map_err(|_| HelixError::ShuttingDown)?;
        Ok(reply.response.into_kind())
    }

    /// How many `__consumer_offsets` partitions there are (AddOffsetsToTxn
    /// hashes a group id over them).
    pub fn offsets_partitions(&self) -> u32 {
        self.partitions.len() as u32
    }

    /// The `__consumer_offsets` partition of `group_id`.
    pub fn offsets_partition_of(&self, group_id: &str) -> i32 {
        self.lock().coordinator.partition_for(group_id).0 as i32
    }

    /// Applies what the log holds past the view's position up to `limit`
    /// (markers, and any entry of this node not applied yet), in log order.
    fn catch_up(&self, host: &mut Host, index: CoordinatorPartition, limit: i64) {
        let Some(from) = host.coordinator.log_position(index) else {
            return;
        };
        if from >= limit {
            return;
        }
        let Some(partition) = self
            .partitions
            .get(index.0 as usize)
            .and_then(|p| p.local.clone())
        else {
            return;
        };
        let now = now_ms_unsigned();
        let read = internal::for_each_entry(&partition, from, limit, |offset, entry| {
            let applied = host
                .coordinator
                .apply_logged(index, offset, logged(&entry), now);
            if let Err(error) = applied {
                tracing::warn!(partition = %index, offset, %error, "skipping a coordinator entry");
            }
            Ok(())
        });
        if let Err(error) = read {
            tracing::warn!(partition = %index, %error, "reading a coordinator partition for markers");
        }
        self.drain(host);
    }

    /// Markers written since the last look, for every partition served
    /// here with no proposal in flight (tick).
    fn notice_markers(&self) {
        let mut host = self.lock();
        for p in &self.partitions {
            let Some(local) = &p.local else { continue };
            let index = CoordinatorPartition(p.index as u32);
            if host.coordinator.has_in_flight(index) {
                continue;
            }
            let hw = local.high_watermark().0;
            self.catch_up(&mut host, index, hw);
        }
    }

    /// The groups this node coordinates (loaded partitions only), for
    /// metrics: state, members and committed offsets.
    pub fn observe(&self) -> Vec<GroupView> {
        let host = self.lock();
        host.coordinator
            .shards
            .values()
            .filter(|shard| !shard.loading)
            .flat_map(|shard| shard.groups.values())
            .map(|g| GroupView {
                id: g.id.clone(),
                state: g.state.name(),
                members: g.members.len(),
                offsets: g
                    .offsets
                    .iter()
                    .map(|((topic, partition), c)| (topic.clone(), *partition, c.offset))
                    .collect(),
            })
            .collect()
    }

    /// Shutdown: every coordinator partition flushes and closes its log.
    pub async fn close(&self) {
        let local: Vec<Arc<Partition>> = self
            .partitions
            .iter()
            .filter_map(|p| p.local.clone())
            .collect();
        crate::replica::close_all(&local).await;
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Host> {
        self.host
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Delivers the coordinator's output: replies to their waiting
    /// requests, proposals to their partitions' queues.
    fn drain(&self, host: &mut Host) {
        loop {
            let ready = host.coordinator.take_ready();
            if ready.is_empty() {
                return;
            }
            for reply in ready.replies {
                if let Some(waiting) = host.waiting.remove(&reply.token) {
                    let _ = waiting.send(reply);
                }
            }
            for proposal in ready.proposals {
                let Proposal {
                    id,
                    partition,
                    entry,
                    compacts,
                    producer,
                } = proposal;
                let queued = Queued {
                    id,
                    entry,
                    compacts,
                    producer: producer.map(|p| TxnProducer {
                        producer_id: p.producer_id,
                        epoch: p.epoch,
                    }),
                };
                let queue = self.proposers.get(&partition.0);
                if queue.is_none_or(|q| q.send(queued).is_err()) {
                    host.coordinator.on_proposal_failed(id, now_ms_unsigned());
                }
            }
        }
    }
}

impl SettlesProposals for GroupService {
    type ProposalId = ProposalId;
    type Partition = CoordinatorPartition;

    /// Before an entry acknowledged at `offset` is applied: what precedes
    /// it in the log (markers) is applied first.
    fn before_applying(&self, index: CoordinatorPartition, offset: i64) {
        let mut host = self.lock();
        self.catch_up(&mut host, index, offset);
    }

    fn settle(&self, id: ProposalId, outcome: std::result::Result<i64, HelixError>) {
        let mut host = self.lock();
        match outcome.map_err(|e| refusal(&e)) {
            Ok(offset) => host
                .coordinator
                .on_appended(id, Some(offset), now_ms_unsigned()),
            Err(error) => host
                .coordinator
                .on_proposal_refused(id, error, now_ms_unsigned()),
        }
        self.drain(&mut host);
    }
}

/// What the coordinator answers for an entry its partition's leader
/// refused: a transactional entry of a fenced epoch (a newer one of the
/// producer reached the partition after the verification) is
/// INVALID_PRODUCER_EPOCH; any other failure NOT_COORDINATOR, as before.
fn refusal(error: &HelixError) -> GroupError {
    match error {
        HelixError::InvalidProducerEpoch => GroupError::InvalidProducerEpoch,
        _ => GroupError::NotCoordinator,
    }
}

/// An entry read back from a coordinator partition, as the coordinator
/// takes it.
fn logged(entry: &InternalEntry) -> LoggedEntry<'_> {
    match entry {
        InternalEntry::Value { value, producer } => LoggedEntry::Records {
            entry: value,
            producer: producer.map(|p| p.producer_id),
        },
        InternalEntry::Marker(m) => LoggedEntry::Marker {
            producer_id: m.producer_id,
            commit: m.commit,
        },
    }
}

/// The id `__consumer_offsets` shows in Metadata: the same on every node.
fn internal_topic_id() -> uuid::Uuid {
    uuid::Uuid::from_u128(u128::from(COORDINATOR_RAFT_GROUPS) << 64 | 1)
}

impl LeaderLoaded for GroupService {
    type Id = CoordinatorPartition;

    /// Rebuilds a partition's view from its acknowledged log and serves it
    /// at the replica's current term.
    fn load(&self, id: CoordinatorPartition, partition: &Partition) -> Result<()> {
        let now = now_ms_unsigned();
        let epoch = partition.leadership().term.0;
        let mut host = self.lock();
        host.coordinator.begin_load(id);
        let end = partition.high_watermark().0;
        let records = internal::for_each_entry(partition, 0, end, |offset, entry| {
            let replayed = host.coordinator.replay_at(id, offset, logged(&entry), now);
            if let Err(error) = replayed {
                tracing::warn!(partition = %id, offset, %error, "skipping a coordinator record");
            }
            Ok(())
        });
        let replayed_to = match records {
            Ok(next) => next.max(end),
            Err(e) => {
                host.coordinator.unload(id);
                self.drain(&mut host);
                return Err(e);
            }
        };
        host.coordinator
            .finish_load_at(id, epoch, Some(replayed_to), now);
        self.drain(&mut host);
        tracing::info!(partition = %id, epoch, end, "coordinating the partition's groups");
        Ok(())
    }

    fn unload(&self, id: CoordinatorPartition) {
        let mut host = self.lock();
        host.coordinator.unload(id);
        self.drain(&mut host);
        tracing::info!(partition = %id, "no longer coordinating the partition's groups");
    }
}

async fn tick(service: Weak<GroupService>) {
    let mut interval = tokio::time::interval(TICK_INTERVAL);
    loop {
        interval.tick().await;
        let Some(service) = service.upgrade() else {
            return;
        };
        service.notice_markers();
        let mut host = service.lock();
        host.coordinator.tick(now_ms_unsigned());
        service.drain(&mut host);
    }
}
