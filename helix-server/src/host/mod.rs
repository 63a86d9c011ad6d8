//! The replica host: every partition replica this node holds (topic
//! partitions, coordinator partitions, the controller's group 0), leader or
//! follower, driven as MultiRaft.
//!
//! Groups are sharded over a fixed set of shard threads (one per core by
//! default), each owning a `helix_raft::MultiRaft` and the groups' apply
//! state: no lock is shared on the write path and a group's inputs are
//! handled in order by one thread. One timer ticks every shard. A shard
//! sends its outgoing messages through the [`Outbox`] (the peer transport),
//! one batch per destination node per round, so heartbeats between two
//! nodes are coalesced. Fsyncs (fsync durability) run on one syncer thread
//! shared by the shards (a group commit across every log of the node).
//!
//! Contract:
//! - [`ReplicaHost::install`] takes a replica recovered by
//!   `replica::recover` (blocking I/O, done by the caller on any thread)
//!   and starts serving it; the returned `Arc<Partition>` is the handle the
//!   Kafka front end uses. Closing goes through the handle
//!   (`Partition::begin_close`), in order with its other work.
//! - [`ReplicaHost::deliver`] takes message batches from peers (decoded).
//! - [`ReplicaHost::campaign`] starts a new partition's election on its
//!   preferred leader; [`ReplicaHost::peer_lost`] has the followers of a
//!   node whose connection broke campaign at once; [`ReplicaHost::step_down`]
//!   hands every led group over at shutdown (balancing runs in the shards).

mod catch_up;
mod input;
mod isr;
mod payload;
mod shard;
mod syncer;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use helix_raft::{GroupId, MessageBatch, NodeId};
use tokio::sync::{mpsc, oneshot};

use crate::batcher::{Batcher, PartitionCommand, Work};
use crate::error::{HelixError, Result};
use crate::replica::links::PeerLinks;
use crate::replica::{Partition, Recovered};
use input::ShardInput;
pub use shard::PAYLOAD_RAFT;
use shard::{Shard, ShardContext};
use syncer::Syncer;

pub use crate::transport::Lane;

/// Where shards send what they say to other nodes. Never blocks; a payload
/// that cannot be queued is dropped (Raft retries).
pub trait Outbox: Send + Sync + 'static {
    fn send(&self, to: NodeId, lane: Lane, payload: Bytes) -> bool;
}

/// Inputs waiting for one shard before senders wait (work) or inputs are
/// dropped (ticks, peer messages: Raft recovers from either).
const SHARD_QUEUE: usize = 8192;

/// How the host runs.
#[derive(Debug, Clone)]
pub struct HostSettings {
    pub node: NodeId,
    /// Shard threads (default: one per core).
    pub shards: usize,
    /// Length of a Raft tick.
    pub tick: Duration,
    /// The group committer every log of the node shares (fsync durability).
    pub sync_group: helix_wal::SyncGroup,
    /// A follower that has not caught up for this long leaves the ISR.
    pub replica_lag: Duration,
    /// How often led groups are handed back to their preferred leaders
    /// (None: never).
    pub balance_every: Option<Duration>,
}

/// The node's replicas.
pub struct ReplicaHost {
    node: NodeId,
    shards: Vec<mpsc::Sender<ShardInput>>,
    /// Per shard: a tick is queued and not yet taken.
    ticks_pending: Vec<Arc<AtomicBool>>,
    threads: Mutex<Vec<std::thread::JoinHandle<()>>>,
    syncer: Syncer,
    /// Every replica being served, by group.
    replicas: Arc<Mutex<HashMap<GroupId, Arc<Partition>>>>,
    /// Bumped by the shards on every leadership or ISR change.
    changes: Arc<AtomicU64>,
    /// Peer connections that broke, until heard from again (the transport
    /// marks them; replicas read them for their lease).
    links: Arc<PeerLinks>,
}

impl std::fmt::Debug for ReplicaHost {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReplicaHost")
            .field("node", &self.node)
            .field("shards", &self.shards.len())
            .finish()
    }
}

impl ReplicaHost {
    /// Starts the shard threads and the tick timer (needs a tokio runtime).
    pub fn start(settings: HostSettings, outbox: Arc<dyn Outbox>) -> Result<Arc<ReplicaHost>> {
        let count = settings.shards.max(1);
        let syncer = Syncer::start(settings.sync_group.clone())?;
        let mut senders = Vec::with_capacity(count);
        let mut ticks_pending = Vec::with_capacity(count);
        let mut threads = Vec::with_capacity(count);
        let changes = Arc::new(AtomicU64::new(0));
        let tick_ms = settings.tick.as_millis().max(1) as u64;
        let isr_lag_ticks = (settings.replica_lag.as_millis() as u64).div_ceil(tick_ms);
        let balance_every = settings
            .balance_every
            .map(|d| (d.as_millis() as u64).div_ceil(tick_ms).max(1));
        for i in 0..count {
            let (tx, rx) = mpsc::channel(SHARD_QUEUE);
            let tick_pending = Arc::new(AtomicBool::new(false));
            let cx = ShardContext {
                tick_pending: tick_pending.clone(),
                node: settings.node,
                outbox: outbox.clone(),
                syncer: syncer.clone(),
                isr_lag_ticks,
                changes: changes.clone(),
                balance_every,
                tick: settings.tick,
            };
            let shard = Shard::new(i, cx, tx.clone());
            let thread = std::thread::Builder::new()
                .name(format!("helix-shard-{i}"))
                .spawn(move || shard.run(rx))
                .map_err(|e| HelixError::Config(format!("cannot start a shard thread: {e}")))?;
            senders.push(tx);
            ticks_pending.push(tick_pending);
            threads.push(thread);
        }
        let host = Arc::new(ReplicaHost {
            node: settings.node,
            shards: senders,
            ticks_pending,
            threads: Mutex::new(threads),
            syncer,
            replicas: Arc::new(Mutex::new(HashMap::new())),
            changes,
            links: Arc::new(PeerLinks::new(settings.node)),
        });
        tokio::spawn(tick(Arc::downgrade(&host), settings.tick));
        Ok(host)
    }

    fn shard_of(&self, group: GroupId) -> &mpsc::Sender<ShardInput> {
        &self.shards[shard_index(group, self.shards.len())]
    }

    /// Starts serving a recovered replica; returns its handle.
    pub async fn install(&self, recovered: Recovered) -> Result<Arc<Partition>> {
        let Recovered {
            group,
            state,
            batcher,
            partition,
        } = recovered;
        let id = partition.group;
        let shard = self.shard_of(id).clone();
        let (reply, installed) = oneshot::channel();
        shard
            .send(ShardInput::Install {
                group: Box::new(group),
                state: Box::new(state),
                published: partition.published(),
                reply,
            })
            .await
            .map_err(|_| HelixError::ShuttingDown)?;
        installed.await.map_err(|_| HelixError::ShuttingDown)??;
        self.lock_replicas().insert(id, partition.clone());
        let registry = Arc::downgrade(&self.replicas);
        tokio::spawn(async move {
            forward(batcher, id, shard).await;
            if let Some(r) = registry.upgrade() {
                r.lock().unwrap_or_else(|p| p.into_inner()).remove(&id);
            }
        });
        Ok(partition)
    }

    /// Every replica this node serves.
    pub fn replicas(&self) -> Vec<Arc<Partition>> {
        self.lock_replicas().values().cloned().collect()
    }

    /// The Raft status of every group this node holds. A shard that does
    /// not answer within `within` (a long round) is left out.
    pub async fn observe(&self, within: Duration) -> Vec<(GroupId, helix_raft::Status)> {
        let mut asked = Vec::with_capacity(self.shards.len());
        for s in &self.shards {
            let (reply, answer) = oneshot::channel();
            if s.try_send(ShardInput::Observe(reply)).is_ok() {
                asked.push(answer);
            }
        }
        let mut out = Vec::new();
        let deadline = tokio::time::Instant::now() + within;
        for answer in asked {
            if let Ok(Ok(groups)) = tokio::time::timeout_at(deadline, answer).await {
                out.extend(groups);
            }
        }
        out
    }

    /// A counter that moves whenever a replica's leadership or ISR changes.
    pub fn leadership_changes(&self) -> u64 {
        self.changes.load(Ordering::Relaxed)
    }

    fn lock_replicas(&self) -> std::sync::MutexGuard<'_, HashMap<GroupId, Arc<Partition>>> {
        self.replicas.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Message batches from a peer: split by shard and queued. Dropped when a
    /// shard's queue is full (Raft resends).
    pub fn deliver(&self, batch: MessageBatch) {
        if batch.to != self.node {
            tracing::warn!(
                to = batch.to.0,
                "a peer sent messages meant for another node"
            );
            return;
        }
        let mut per_shard: Vec<Vec<helix_raft::Message>> = vec![Vec::new(); self.shards.len()];
        for m in batch.messages {
            per_shard[shard_index(m.group, self.shards.len())].push(m);
        }
        for (shard, messages) in self.shards.iter().zip(per_shard) {
            if messages.is_empty() {
                continue;
            }
            let part = MessageBatch {
                from: batch.from,
                to: batch.to,
                messages,
            };
            if shard.try_send(ShardInput::Peer(part)).is_err() {
                crate::metrics::Metrics::count(&crate::metrics::metrics().counters.peer_drops, 1);
            }
        }
    }

    /// The connection to `node` broke: groups following it campaign soon
    /// (`helix_raft::RaftGroup::peer_lost`) instead of after an election
    /// timeout. Dropped when a shard's queue is full (the timeout remains).
    pub fn peer_lost(&self, node: NodeId) {
        // The transport marked it lost in `links` before it told this
        // host: leases count from then, before any shard hears of it.
        tracing::info!(
            peer = node.0,
            "peer connection lost; its groups' followers campaign soon"
        );
        crate::metrics::Metrics::count(&crate::metrics::metrics().counters.peer_losses, 1);
        for s in &self.shards {
            let _ = s.try_send(ShardInput::PeerLost(node));
        }
    }

    /// The node's peer connections, as every replica it opens sees them.
    pub fn links(&self) -> Arc<PeerLinks> {
        self.links.clone()
    }

    /// Starts an election for `group` now (a new partition's preferred leader).
    pub fn campaign(&self, group: GroupId) {
        let _ = self.shard_of(group).try_send(ShardInput::Campaign(group));
    }

    /// Hands `group`'s leadership to its preferred replica (its first),
    /// when this node leads it and that replica is in sync and caught up
    /// (ElectLeaders, preferred). Dropped when the shard's queue is full.
    pub fn hand_back(&self, group: GroupId) {
        let _ = self.shard_of(group).try_send(ShardInput::HandBack(group));
    }

    /// Graceful shutdown, first step: hands every group this node leads to
    /// a follower, and waits (at most `within`) until it leads none.
    pub async fn step_down(&self, within: Duration) {
        for s in &self.shards {
            let _ = s.send(ShardInput::StepDownAll).await;
        }
        let deadline = tokio::time::Instant::now() + within;
        loop {
            let leading = self
                .replicas()
                .iter()
                .filter(|p| p.leadership().role == helix_raft::Role::Leader)
                .filter(|p| p.voters().len() > 1)
                .count();
            if leading == 0 {
                return;
            }
            if tokio::time::Instant::now() >= deadline {
                tracing::warn!(leading, "still leading some groups at shutdown");
                return;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Stops the shard threads (every partition closed first by the caller).
    pub fn stop(&self) {
        for s in &self.shards {
            let _ = s.try_send(ShardInput::Stop);
        }
        let threads = std::mem::take(&mut *self.threads.lock().unwrap_or_else(|p| p.into_inner()));
        for t in threads {
            let _ = t.join();
        }
        self.syncer.stop();
    }
}

/// The shard of a group. Group ids of topic partitions are random in their
/// high bits and sequential in the low ones: mixed before the remainder.
fn shard_index(group: GroupId, shards: usize) -> usize {
    let mixed = group.0.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 32;
    (mixed % shards as u64) as usize
}

/// Moves a partition's batches (and its control commands, in order) from its
/// batcher to its shard, until the partition closes.
async fn forward(mut batcher: Batcher, group: GroupId, shard: mpsc::Sender<ShardInput>) {
    while let Some(work) = batcher.next().await {
        let closing = matches!(work, Work::Control(PartitionCommand::Close { .. }));
        if shard.send(ShardInput::Work(group, work)).await.is_err() || closing {
            return;
        }
    }
}

/// One timer for every shard. A shard gets at most one tick queued: a
/// tick that finds the last one not yet taken (or the queue full) is
/// skipped. A shard that fell behind its queue for a second must not then
/// take twenty ticks in a row ahead of the heartbeats queued behind them:
/// every follower it holds would time out at once and start an election
/// (seen under load: dozens of elections after each busy second). Time
/// running slow for a busy shard only delays its elections.
async fn tick(host: std::sync::Weak<ReplicaHost>, every: Duration) {
    let mut interval = tokio::time::interval(every);
    interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        interval.tick().await;
        let Some(host) = host.upgrade() else { return };
        for (s, pending) in host.shards.iter().zip(&host.ticks_pending) {
            if pending.swap(true, Ordering::AcqRel) {
                continue;
            }
            if s.try_send(ShardInput::Tick).is_err() {
                pending.store(false, Ordering::Release);
                if s.is_closed() {
                    return;
                }
            }
        }
    }
}
