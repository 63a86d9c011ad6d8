//! The transaction coordinator's host inside the broker, the shape of
//! `group::service` (both follow their partitions' leadership with
//! `replica::internal::serve` and propose through
//! `replica::internal_queue`, which deletes the log before an acknowledged
//! snapshot). It owns the [`Coordinator`]
//! behind a mutex (never held across an await), supplies producer ids from
//! the controller's blocks, turns proposals into records appended to the
//! `__transaction_state` partitions (acks=all, the path of Produce),
//! reports acknowledgements in log order, writes the markers the
//! coordinator asks for, and drives `tick` from the wall clock.
//!
//! `__transaction_state` partitions are placed like `__consumer_offsets`
//! (`controller::placement::internal`), in `<data-dir>/transactions/<n>`,
//! with Raft group ids of their own. A node coordinates the transactional
//! ids of the partitions it leads: once its new term's entries are
//! acknowledged it replays the log, serves, and asks again for the markers
//! of every transaction found in a Prepare state.
//!
//! Markers are written by `txn::markers`; a transaction's
//! `__consumer_offsets` partition (AddOffsetsToTxn) is the group service's
//! replica, which this service is given at open (the group service knows
//! nothing of transactions).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use helix_raft::{GroupId, NodeId, Role};
use helix_wal::LogConfig;
use tokio::sync::{mpsc, oneshot};

use super::coordinator::Coordinator;
use super::error::TxnError;
use super::markers::{MarkerHost, Route};
use super::request::{AddOffsets, EndTxn, InitProducerId, TxnRequest};
use super::response::{Answer, MarkerWrite, Proposal, Reply};
use super::types::{ProducerIdAndEpoch, ProposalId, RequestToken, StatePartition, TopicPartition};
use super::views::{ListFilter, TxnDescription, TxnListing};
use crate::budget::Backpressure;
use crate::clock::now_ms_unsigned;
use crate::cluster::ClusterState;
use crate::cluster::peers::LinkSlot;
use crate::config::TxnConfig;
use crate::controller::placement;
use crate::controller::producer_ids::ProducerIds;
use crate::error::{HelixError, Result};
use crate::group::service::GroupService;
use crate::group::wire::NodeAddress;
use crate::replica::Partition;
use crate::replica::internal::{self, LeaderLoaded};
use crate::replica::internal_queue::{self, Queued, SettlesProposals};
use crate::replica::markers::Marker;
use crate::topics::{self, Opened, ReplicaFactory, Topic, TopicTable};

/// Kafka's name of the internal topic holding transaction records.
pub const TRANSACTIONS_TOPIC: &str = "__transaction_state";
/// How often deadlines are checked (the coordinator itself looks for
/// timed-out transactions every `abort_check_interval_ms`).
const TICK_INTERVAL: Duration = Duration::from_millis(100);
/// Raft group ids of `__transaction_state` partitions ("HELIXT" in the high
/// bytes; `__consumer_offsets` has "HELIXG", topic partitions take theirs
/// from random topic ids).
const STATE_RAFT_GROUPS: u64 = 0x4845_4c49_5854_0000;
/// Refuses to open a data dir whose `__transaction_state` partitions were
/// created with another count: transactional ids would hash elsewhere and
/// their transactions would silently vanish. The count is kept in
/// `transactions/partition-count`.
fn check_partition_count(data_dir: &std::path::Path, count: u32) -> Result<()> {
    let dir = data_dir.join("transactions");
    let file = dir.join("partition-count");
    match std::fs::read_to_string(&file) {
        Ok(text) => {
            let n = text.trim().parse::<u32>().map_err(|_| {
                HelixError::Config(format!("{}: {text:?} is not a count", file.display()))
            })?;
            if n != count {
                return Err(HelixError::Config(format!(
                    "the data dir was made with {n} __transaction_state partitions; \
                     transaction_state_partitions is {count} (it cannot change)"
                )));
            }
            Ok(())
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            std::fs::create_dir_all(&dir)?;
            std::fs::write(&file, format!("{count}\n"))?;
            Ok(())
        }
        Err(e) => Err(e.into()),
    }
}

/// The coordinator and the requests waiting for its replies.
#[derive(Debug)]
struct Host {
    coordinator: Coordinator,
    waiting: HashMap<RequestToken, oneshot::Sender<Reply>>,
    next_token: u64,
}

/// The broker's transaction service.
#[derive(Debug)]
pub struct TxnService {
    host: Mutex<Host>,
    /// One ordered proposal queue per `__transaction_state` partition held
    /// here (`replica::internal_queue`).
    proposers: HashMap<u32, mpsc::UnboundedSender<Queued<ProposalId>>>,
    /// Every `__transaction_state` partition: its group, replicas and local replica.
    partitions: Vec<topics::TopicPartition>,
    pub(super) cluster: Arc<ClusterState>,
    /// The data partitions markers are written to (through their local
    /// replicas when this node leads them).
    topics: Arc<TopicTable>,
    /// Peers, for markers and verifications on other nodes (`txn::peer`).
    pub(super) link: Arc<LinkSlot>,
    producer_ids: Arc<ProducerIds>,
    /// `__consumer_offsets`: its partition count (AddOffsetsToTxn) and the
    /// replicas markers of offsets in transactions go to.
    groups: Arc<GroupService>,
    state_partitions: u32,
    topic_id: uuid::Uuid,
    /// Segment size of its logs (described as `segment.bytes`).
    segment_bytes: u64,
    me: Weak<TxnService>,
}

impl TxnService {
    /// Opens the `__transaction_state` partitions this node holds and
    /// starts the tasks that load them as their leadership comes and goes,
    /// propose and tick.
    pub async fn open(
        factory: &ReplicaFactory,
        cluster: &Arc<ClusterState>,
        backpressure: &Backpressure,
        topics: &Arc<TopicTable>,
        producer_ids: &Arc<ProducerIds>,
        link: &Arc<LinkSlot>,
        groups: &Arc<GroupService>,
    ) -> Result<Arc<TxnService>> {
        let config: TxnConfig = factory.config.transactions.clone();
        let data_dir = factory.config.data_dir.clone();
        check_partition_count(&data_dir, config.state_partitions)?;
        let count = config.state_partitions;
        let segment_bytes = config.segment_bytes;
        let coordinator = Coordinator::new(config);
        // No retention: these logs are the transactions' state.
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
        let mut partitions: Vec<topics::TopicPartition> = sets
            .into_iter()
            .enumerate()
            .map(|(i, replicas)| topics::TopicPartition {
                index: i as i32,
                group: GroupId(STATE_RAFT_GROUPS | i as u64),
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
                    data_dir.join("transactions").join(p.index.to_string()),
                    factory.settings(p.group, p.replicas.clone(), log.clone()),
                )
            })
            .collect();
        for (index, opened) in factory.open(TRANSACTIONS_TOPIC, wanted).await? {
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
        let service = Arc::new_cyclic(|me| TxnService {
            host: Mutex::new(Host {
                coordinator,
                waiting: HashMap::new(),
                next_token: 0,
            }),
            proposers,
            partitions,
            cluster: cluster.clone(),
            topics: topics.clone(),
            link: link.clone(),
            producer_ids: producer_ids.clone(),
            groups: groups.clone(),
            state_partitions: count,
            topic_id: internal_topic_id(),
            segment_bytes,
            me: me.clone(),
        });
        for (partition, rx) in queues {
            let index = StatePartition(partition.index as u32);
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

    /// `__transaction_state` as Metadata shows it (internal).
    pub fn internal_topic(&self) -> Topic {
        // Kafka creates it with these overrides (measured on 3.9.1; its
        // min.insync.replicas override is a majority here, by Raft).
        Topic::internal(
            TRANSACTIONS_TOPIC,
            self.topic_id,
            self.partitions.clone(),
            &[
                ("cleanup.policy", "compact".into()),
                ("compression.type", "uncompressed".into()),
                ("segment.bytes", self.segment_bytes.to_string()),
                ("unclean.leader.election.enable", "false".into()),
            ],
        )
    }

    /// The node coordinating `transactional_id`: the leader of its
    /// `__transaction_state` partition (`abs(hash(id)) % n`, Kafka's rule).
    ///
    /// A node that does not hear a majority answers none (the client asks
    /// again, elsewhere).
    pub fn coordinator_of(&self, transactional_id: &str) -> Option<NodeAddress> {
        if !self.cluster.hears_majority() {
            return None;
        }
        let m = self
            .cluster
            .member(self.coordinating_node(transactional_id)?)?;
        Some(NodeAddress {
            node_id: i32::try_from(m.id.0).ok()?,
            host: m.host.clone(),
            port: m.port,
        })
    }

    /// InitProducerId with a transactional id: a new producer id (from the
    /// controller's blocks) or the next epoch of the id's producer.
    pub async fn init_producer_id(
        &self,
        transactional_id: String,
        timeout_ms: i32,
        expected: Option<ProducerIdAndEpoch>,
    ) -> std::result::Result<ProducerIdAndEpoch, TxnError> {
        let needs = self
            .lock()
            .coordinator
            .needs_producer_id(&transactional_id, expected);
        let new_producer_id = if needs {
            match self.producer_ids.next().await {
                Ok(id) => Some(id),
                Err(error) => {
                    tracing::warn!(%error, "no producer id for a transactional producer");
                    // Retriable: the client asks again.
                    return Err(TxnError::ConcurrentTransactions);
                }
            }
        } else {
            None
        };
        let request = TxnRequest::InitProducerId(InitProducerId {
            transactional_id,
            timeout_ms,
            expected,
            new_producer_id,
        });
        match self.call(request).await {
            Answer::InitProducerId(result) => result,
            other => Err(unexpected(other)),
        }
    }

    /// AddOffsetsToTxn: the `__consumer_offsets` partition of `group_id`
    /// joins the transaction (answered once durable).
    pub async fn add_offsets(
        &self,
        transactional_id: String,
        producer_id: i64,
        epoch: i16,
        group_id: String,
    ) -> std::result::Result<(), TxnError> {
        let request = TxnRequest::AddOffsets(AddOffsets {
            transactional_id,
            producer_id,
            epoch,
            group_id,
            offsets_partitions: self.groups.offsets_partitions(),
        });
        match self.call(request).await {
            Answer::AddOffsets(result) => result,
            other => Err(unexpected(other)),
        }
    }

    /// EndTxn: answered once the Prepare state is durable; the markers
    /// follow.
    pub async fn end_txn(&self, request: EndTxn) -> std::result::Result<(), TxnError> {
        match self.call(TxnRequest::EndTxn(request)).await {
            Answer::EndTxn(result) => result,
            other => Err(unexpected(other)),
        }
    }

    /// The node leading `transactional_id`'s `__transaction_state`
    /// partition, as this node knows it.
    pub(super) fn coordinating_node(&self, transactional_id: &str) -> Option<NodeId> {
        let index = super::types::state_partition_for(transactional_id, self.state_partitions);
        let p = self.partitions.get(index.0 as usize)?;
        Some(self.cluster.leadership(p.group, p.local.as_deref())?.leader)
    }

    /// DescribeTransactions for one transactional id, from the
    /// acknowledged view (no effects).
    pub fn describe(
        &self,
        transactional_id: &str,
    ) -> std::result::Result<TxnDescription, TxnError> {
        self.lock().coordinator.describe(transactional_id)
    }

    /// ListTransactions over the `__transaction_state` partitions this node
    /// leads, from the acknowledged view (no effects).
    pub fn list(&self, filter: &ListFilter) -> std::result::Result<Vec<TxnListing>, TxnError> {
        self.lock().coordinator.list(filter, now_ms_unsigned())
    }

    /// Hands one request to the coordinator and waits for its answer.
    async fn call(&self, request: TxnRequest) -> Answer {
        let mut answers = self.call_all(vec![request]).await;
        match answers.pop() {
            Some(answer) => answer,
            None => unreachable!("one answer per request"),
        }
    }

    /// Hands every request to the coordinator at once (in order, under one
    /// lock), then waits for all their answers: a batch takes as long as its
    /// slowest request, not the sum. One answer per request, in order.
    pub(super) async fn call_all(&self, requests: Vec<TxnRequest>) -> Vec<Answer> {
        let mut waiting = Vec::with_capacity(requests.len());
        {
            let mut host = self.lock();
            for request in requests {
                let failed = failed_answer(&request);
                let (tx, rx) = oneshot::channel();
                host.next_token += 1;
                let token = RequestToken(host.next_token);
                host.waiting.insert(token, tx);
                host.coordinator.handle(token, request, now_ms_unsigned());
                waiting.push((rx, failed));
            }
            self.drain(&mut host);
        }
        let mut answers = Vec::with_capacity(waiting.len());
        for (rx, failed) in waiting {
            answers.push(match rx.await {
                Ok(reply) => reply.answer,
                // The service is going away.
                Err(_) => failed,
            });
        }
        answers
    }

    /// Shutdown: every `__transaction_state` partition flushes and closes its log.
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
    /// requests, proposals to their partitions' queues, marker writes to
    /// tasks of their own.
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
                } = proposal;
                let queued = Queued {
                    id,
                    entry,
                    compacts,
                    producer: None,
                };
                let queue = self.proposers.get(&partition.0);
                if queue.is_none_or(|q| q.send(queued).is_err()) {
                    host.coordinator.on_proposal_failed(id);
                }
            }
            for markers in ready.markers {
                tokio::spawn(super::markers::write_markers(self.me.clone(), markers));
            }
        }
    }
}

impl SettlesProposals for TxnService {
    type ProposalId = ProposalId;
    type Partition = StatePartition;

    fn settle(&self, id: ProposalId, outcome: std::result::Result<i64, HelixError>) {
        let mut host = self.lock();
        if outcome.is_ok() {
            host.coordinator.on_acknowledged(id);
        } else {
            host.coordinator.on_proposal_failed(id);
        }
        self.drain(&mut host);
    }
}

/// An answer of another kind than the request's: a bug in the coordinator,
/// answered as Kafka answers an IllegalStateException.
pub(super) fn unexpected(answer: Answer) -> TxnError {
    tracing::error!(
        ?answer,
        "the transaction coordinator answered another kind of request"
    );
    TxnError::IllegalTransition {
        from: super::state::TxnState::Empty,
        to: super::state::TxnState::Empty,
    }
}

/// What `request` is answered if the service goes away before the
/// coordinator answers it.
fn failed_answer(request: &TxnRequest) -> Answer {
    let error = TxnError::NotCoordinator;
    match request {
        TxnRequest::InitProducerId(_) => Answer::InitProducerId(Err(error)),
        TxnRequest::AddPartitions(_) => Answer::AddPartitions(Err(error)),
        TxnRequest::VerifyPartitions(_) => Answer::VerifyPartitions(Err(error)),
        TxnRequest::AddOffsets(_) => Answer::AddOffsets(Err(error)),
        TxnRequest::EndTxn(_) => Answer::EndTxn(Err(error)),
    }
}

/// The id `__transaction_state` shows in Metadata: the same on every node.
fn internal_topic_id() -> uuid::Uuid {
    uuid::Uuid::from_u128(u128::from(STATE_RAFT_GROUPS) << 64 | 1)
}

impl MarkerHost for TxnService {
    fn markers_written(&self, markers: &MarkerWrite) {
        let mut host = self.lock();
        host.coordinator.on_markers_written(
            markers.partition,
            &markers.transactional_id,
            markers.producer_id,
            markers.epoch,
            now_ms_unsigned(),
        );
        self.drain(&mut host);
    }

    /// Whether this node still coordinates `partition` at `epoch` (its
    /// local replica leads in that term): markers of a deposed coordinator
    /// stop.
    fn still_coordinates(&self, partition: StatePartition, epoch: i32) -> bool {
        self.partitions
            .get(partition.0 as usize)
            .and_then(|p| p.local.as_ref())
            .is_some_and(|p| {
                let l = p.leadership();
                l.role == Role::Leader && i32::try_from(l.term.0).unwrap_or(i32::MAX) == epoch
            })
    }

    /// Through the local replica when it leads (or no leader is known and it
    /// may be elected here), else through the leader's node.
    ///
    /// A partition this node does not know is gone only once its topic
    /// table is current: right after a restart it may not know the topic
    /// yet, and skipping the marker then would leave the transaction open
    /// on that partition for ever.
    fn route(&self, tp: &TopicPartition) -> Option<Route> {
        let found = self.topics.get(&tp.topic).and_then(|topic| {
            let index = usize::try_from(tp.partition).ok()?;
            topic.partitions.get(index).cloned()
        });
        let Some(p) = found else {
            return (!self.topics.current()).then_some(Route::Unknown);
        };
        if let Some(local) = &p.local
            && local.leadership().role == Role::Leader
        {
            return Some(Route::Local(local.clone()));
        }
        let leader = self.cluster.leadership(p.group, p.local.as_deref());
        Some(match (leader, self.link.link()) {
            (Some(l), Some(link)) if l.leader != self.cluster.me => Route::Remote(l.leader, link),
            _ => Route::Unknown,
        })
    }
}

impl TxnService {
    /// A peer's marker for `tp` ([`peer`]): written only if this node
    /// leads the partition.
    pub(super) async fn write_local_marker(
        &self,
        tp: &TopicPartition,
        marker: Marker,
    ) -> Result<()> {
        let topic = self
            .topics
            .get(&tp.topic)
            .ok_or(HelixError::UnknownTopicOrPartition)?;
        let partition = topic.local(tp.partition)?.clone();
        drop(topic);
        partition.write_marker(marker).await.map(|_| ())
    }
}

impl LeaderLoaded for TxnService {
    type Id = StatePartition;

    /// Rebuilds a partition's view from its acknowledged log and serves it
    /// at the replica's current term (the coordinator epoch markers carry).
    fn load(&self, id: StatePartition, partition: &Partition) -> Result<()> {
        let term = partition.leadership().term.0;
        let epoch = i32::try_from(term).unwrap_or(i32::MAX);
        let mut host = self.lock();
        host.coordinator.begin_load(id);
        let end = partition.high_watermark().0;
        let records = internal::for_each_value(partition, 0, end, |offset, value| {
            if let Err(error) = host.coordinator.replay(id, &value) {
                tracing::warn!(partition = %id, offset, %error, "skipping a transaction record");
            }
            Ok(())
        });
        if let Err(e) = records {
            host.coordinator.unload(id);
            self.drain(&mut host);
            return Err(e);
        }
        host.coordinator.finish_load(id, epoch);
        self.drain(&mut host);
        tracing::info!(partition = %id, epoch, end, "coordinating the partition's transactions");
        Ok(())
    }

    fn unload(&self, id: StatePartition) {
        let mut host = self.lock();
        host.coordinator.unload(id);
        self.drain(&mut host);
        tracing::info!(partition = %id, "no longer coordinating the partition's transactions");
    }
}

async fn tick(service: Weak<TxnService>) {
    let mut interval = tokio::time::interval(TICK_INTERVAL);
    loop {
        interval.tick().await;
        let Some(service) = service.upgrade() else {
            return;
        };
        let mut host = service.lock();
        host.coordinator.tick(now_ms_unsigned());
        service.drain(&mut host);
    }
}
