//! The coordinator's host inside the broker: owns the [`Coordinator`]
//! behind a mutex (never held across an await), turns its proposals into
//! record batches produced through each coordinator partition's batcher
//! and one-voter Raft group (the same path as Produce, acks=all), reports
//! acknowledgements in log order, drives `tick` from the wall clock, and
//! replays every coordinator partition's log when the broker opens.
//!
//! Coordinator partitions live in `<data-dir>/groups/<n>`, outside the topic
//! table: clients never see them in Metadata.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use bytes::{Bytes, BytesMut};
use helix_wal::{Durability, FileBudget, LogConfig, SyncGroup};
use kafka_protocol::messages::ResponseKind;
use kafka_protocol::records::{
    Compression, Record as KafkaRecord, RecordBatchDecoder, RecordBatchEncoder,
    RecordEncodeOptions, TimestampType,
};
use tokio::sync::{mpsc, oneshot};

use super::coordinator::Coordinator;
use super::response::{Proposal, Reply};
use super::types::{ClientInfo, CoordinatorPartition, ProposalId, RequestToken};
use super::wire::{GroupCall, NodeAddress, find_coordinator};
use crate::batcher::{Backpressure, BatchLimits, PendingProduce, ProduceOutcome};
use crate::config::{Config, WriteDurability};
use crate::error::{HelixError, Result};
use crate::partition::raft::GroupSpec;
use crate::partition::{Partition, PartitionSettings, batch};
use crate::replica::ReplicaHost;
use helix_raft::GroupId;

/// How often deadlines are checked. Session timeouts are seconds long; a
/// member expires at most this much late.
const TICK_INTERVAL: Duration = Duration::from_millis(100);
/// How long a coordinator proposal waits for produce backpressure room.
const PROPOSAL_ROOM_TIMEOUT: Duration = Duration::from_secs(30);
/// Bytes read per step while replaying a coordinator partition.
const REPLAY_READ_BYTES: usize = 1 << 20;
/// Segment size of a coordinator partition's WAL: group records are small.
const COORDINATOR_SEGMENT_BYTES: u64 = 64 << 20;
/// Raft group ids of coordinator partitions ("HELIXG" in the high bytes;
/// topic partitions take theirs from random topic ids).
const COORDINATOR_RAFT_GROUPS: u64 = 0x4845_4c49_5847_0000;

/// Refuses to open a data dir whose coordinator partitions were created with
/// another `coordinator_partitions`: group ids would hash elsewhere and
/// their groups and offsets would silently vanish.
fn check_partition_count(data_dir: &std::path::Path, count: u32) -> Result<()> {
    let entries = match std::fs::read_dir(data_dir.join("groups")) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(HelixError::Config(format!("cannot list groups/: {e}"))),
    };
    let existing = entries
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .count();
    if existing != 0 && existing != count as usize {
        return Err(HelixError::Config(format!(
            "the data dir holds {existing} coordinator partitions; \
             group_coordinator_partitions is {count} (it cannot change)"
        )));
    }
    Ok(())
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// The coordinator and the requests waiting for its replies.
#[derive(Debug)]
struct Host {
    coordinator: Coordinator,
    waiting: HashMap<RequestToken, oneshot::Sender<Reply>>,
    next_token: u64,
}

/// The broker's group service.
#[derive(Debug)]
pub struct GroupService {
    host: Mutex<Host>,
    /// One ordered proposal queue per coordinator partition.
    proposers: Vec<mpsc::UnboundedSender<Proposal>>,
    partitions: Vec<Arc<Partition>>,
    node: NodeAddress,
}

impl GroupService {
    /// Opens every coordinator partition, replays it, and starts the tasks
    /// that propose, acknowledge and tick.
    /// `sync_group` and `file_budget` are the ones every log of the node
    /// shares.
    pub async fn open(
        config: &Config,
        backpressure: &Backpressure,
        host: &ReplicaHost,
        sync_group: SyncGroup,
        file_budget: FileBudget,
    ) -> Result<Arc<GroupService>> {
        let group_config = config.groups.clone();
        check_partition_count(&config.data_dir, group_config.coordinator_partitions)?;
        let count = group_config.coordinator_partitions;
        let mut coordinator = Coordinator::new(group_config);
        // No retention: these logs are the groups' state (Kafka compacts
        // them instead; Helix does not compact yet, docs/groups.md).
        let log = LogConfig {
            segment_bytes: COORDINATOR_SEGMENT_BYTES,
            durability: match config.write_durability {
                WriteDurability::ReplicationOnly => Durability::ReplicationOnly,
                WriteDurability::Fsync => Durability::Fsync,
            },
            sync_group: Some(sync_group),
            file_budget: Some(file_budget),
            ..LogConfig::default()
        };
        let now = now_ms();
        let mut partitions = Vec::with_capacity(count as usize);
        let node = crate::broker::node_id(config)?;
        for index in 0..count {
            let settings = PartitionSettings {
                spec: GroupSpec {
                    node,
                    group: GroupId(COORDINATOR_RAFT_GROUPS | u64::from(index)),
                    voters: vec![node],
                    raft: crate::broker::raft_settings(config),
                },
                batch: BatchLimits {
                    linger: config.batch_linger,
                    max_bytes: config.batch_max_bytes,
                    max_requests: config.batch_max_requests,
                },
                log: log.clone(),
            };
            let dir = config.data_dir.join("groups").join(index.to_string());
            let recovered = tokio::task::block_in_place(|| {
                crate::partition::recover(&dir, "__consumer_offsets", index as i32, settings)
            })?;
            let partition = host.install(recovered).await?;
            let id = CoordinatorPartition(index);
            coordinator.begin_load(id);
            replay(&mut coordinator, id, &partition, now)?;
            coordinator.finish_load(
                id,
                u64::try_from(partition.leader_epoch()).unwrap_or(0),
                now,
            );
            partitions.push(partition);
        }
        let node = NodeAddress::parse(config.node_id, &config.advertised).ok_or_else(|| {
            HelixError::Config(format!(
                "advertised address {} is not HOST:PORT",
                config.advertised
            ))
        })?;
        let mut proposers = Vec::with_capacity(partitions.len());
        let mut queues = Vec::with_capacity(partitions.len());
        for partition in &partitions {
            let (tx, rx) = mpsc::unbounded_channel();
            proposers.push(tx);
            queues.push((partition.clone(), rx));
        }
        let host = Host {
            coordinator,
            waiting: HashMap::new(),
            next_token: 0,
        };
        let service = Arc::new(GroupService {
            host: Mutex::new(host),
            proposers,
            partitions,
            node,
        });
        for (partition, rx) in queues {
            tokio::spawn(propose(
                Arc::downgrade(&service),
                partition,
                rx,
                backpressure.clone(),
            ));
        }
        tokio::spawn(tick(Arc::downgrade(&service)));
        Ok(service)
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
                    &request, version, &self.node,
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
                .handle(token, version, &client, request, now_ms());
            self.drain(&mut host);
        }
        let reply = rx.await.map_err(|_| HelixError::ShuttingDown)?;
        Ok(reply.response.into_kind())
    }

    /// Shutdown: every coordinator partition flushes and closes its log.
    pub async fn close(&self) {
        crate::partition::close_all(&self.partitions).await;
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
                let id = proposal.id;
                let queue = self.proposers.get(proposal.partition.0 as usize);
                if queue.is_none_or(|q| q.send(proposal).is_err()) {
                    host.coordinator.on_proposal_failed(id, now_ms());
                }
            }
        }
    }

    fn settle(&self, id: ProposalId, acknowledged: bool) {
        let mut host = self.lock();
        if acknowledged {
            host.coordinator.on_acknowledged(id, now_ms());
        } else {
            host.coordinator.on_proposal_failed(id, now_ms());
        }
        self.drain(&mut host);
    }
}

/// Wraps a coordinator entry as a one-record v2 batch (no producer id, so
/// no idempotence state), the unit the partition's log stores.
fn entry_batch(entry: &Bytes) -> Result<Bytes> {
    let record = KafkaRecord {
        transactional: false,
        control: false,
        delete_horizon: false,
        partition_leader_epoch: -1,
        producer_id: -1,
        producer_epoch: -1,
        timestamp_type: TimestampType::Creation,
        offset: 0,
        sequence: -1,
        timestamp: now_ms() as i64,
        key: None,
        value: Some(entry.clone()),
        headers: Default::default(),
    };
    let mut buf = BytesMut::new();
    let options = RecordEncodeOptions {
        version: 2,
        compression: Compression::None,
    };
    RecordBatchEncoder::encode(&mut buf, [&record], &options)
        .map_err(|e| HelixError::CorruptState(format!("encoding a coordinator batch: {e}")))?;
    Ok(buf.freeze())
}

/// Feeds a coordinator partition's acknowledged log to the coordinator.
fn replay(
    coordinator: &mut Coordinator,
    id: CoordinatorPartition,
    partition: &Partition,
    now: u64,
) -> Result<()> {
    let mut from = partition.log_start_offset();
    let end = partition.high_watermark();
    while from < end {
        let mut chunk = partition.read(from, REPLAY_READ_BYTES)?;
        let sets = RecordBatchDecoder::decode_all(&mut chunk)
            .map_err(|e| HelixError::CorruptState(format!("{id}: {e}")))?;
        let before = from;
        for record in sets.into_iter().flat_map(|set| set.records) {
            if record.offset < from {
                continue;
            }
            from = record.offset + 1;
            if let Some(value) = record.value
                && let Err(error) = coordinator.replay(id, &value, now)
            {
                tracing::warn!(partition = %id, offset = record.offset, %error, "skipping a coordinator record");
            }
        }
        if from == before {
            return Err(HelixError::CorruptState(format!(
                "{id}: no progress replaying at offset {from}"
            )));
        }
    }
    Ok(())
}

/// Proposes one partition's entries in order; a second task reports their
/// outcomes in the same order, so the view applies them in log order.
async fn propose(
    service: Weak<GroupService>,
    partition: Arc<Partition>,
    mut proposals: mpsc::UnboundedReceiver<Proposal>,
    backpressure: Backpressure,
) {
    type Outcome = (ProposalId, bool, Option<oneshot::Receiver<ProduceOutcome>>);
    let (done_tx, mut done_rx) = mpsc::unbounded_channel::<Outcome>();
    let reporter = service.clone();
    let log = partition.clone();
    tokio::spawn(async move {
        while let Some((id, compacts, waiting)) = done_rx.recv().await {
            let acknowledged = match waiting {
                Some(rx) => match rx.await {
                    Ok(Ok(ack)) => Some(ack.base_offset),
                    _ => None,
                },
                None => None,
            };
            if let (true, Some(snapshot_offset)) = (compacts, acknowledged) {
                // Everything before the snapshot entry is in it.
                if let Err(error) = log.delete_records(snapshot_offset).await {
                    tracing::warn!(%error, "could not compact a coordinator partition");
                }
            }
            let Some(service) = reporter.upgrade() else {
                return;
            };
            service.settle(id, acknowledged.is_some());
        }
    });
    while let Some(proposal) = proposals.recv().await {
        let waiting = produce(&partition, &backpressure, &proposal.entry).await;
        if let Err(error) = &waiting {
            tracing::warn!(partition = %proposal.partition, %error, "coordinator proposal failed");
        }
        if done_tx
            .send((proposal.id, proposal.compacts, waiting.ok()))
            .is_err()
        {
            return;
        }
    }
}

async fn produce(
    partition: &Partition,
    backpressure: &Backpressure,
    entry: &Bytes,
) -> Result<oneshot::Receiver<ProduceOutcome>> {
    let batch = entry_batch(entry)?;
    let batches: Vec<Bytes> = batch::validate(&batch, i32::MAX)?
        .into_iter()
        .map(|b| b.bytes)
        .collect();
    let room = backpressure
        .acquire(batch.len(), PROPOSAL_ROOM_TIMEOUT)
        .await?;
    let (reply, rx) = oneshot::channel();
    let pending = PendingProduce {
        batches,
        size: batch.len(),
        acks: -1,
        reply: Some(reply),
        enqueued: Instant::now(),
        room,
    };
    partition.produce(pending).await?;
    Ok(rx)
}

async fn tick(service: Weak<GroupService>) {
    let mut interval = tokio::time::interval(TICK_INTERVAL);
    loop {
        interval.tick().await;
        let Some(service) = service.upgrade() else {
            return;
        };
        let mut host = service.lock();
        host.coordinator.tick(now_ms());
        service.drain(&mut host);
    }
}
