//! A partition replica: its WAL (helix-wal), its Raft group (helix-raft),
//! its batcher, and the handle the Kafka front end uses ([`Partition`]).
//!
//! [`recover`] opens a replica from its directory (blocking file I/O, on any
//! thread; many recover at once); the replica host then moves its Raft group
//! and [`state::PartitionState`] into the shard thread that drives them, and
//! runs its batcher. Connections talk to a partition only through
//! [`Partition`]: produce requests go in through the batcher's channel;
//! reads go straight to the WAL reader, bounded by the high watermark (the
//! acknowledged offset) that the shard publishes, with the leadership.

pub mod aborted_index;
pub mod active_producer;
mod answers;
pub mod apply;
pub mod batch;
pub mod compaction;
pub mod entry;
pub mod internal;
pub mod internal_drain;
pub mod internal_queue;
pub mod learner;
pub mod links;
pub mod markers;
pub mod producers;
mod published;
pub mod raft;
mod reads;
pub mod recompress;
pub mod records;
pub mod refused;
pub mod scan;
pub mod state;
pub mod txn_index;
#[cfg(test)]
mod txn_index_tests;
#[cfg(test)]
pub(crate) mod txn_tests;
pub mod verification;

use std::path::Path;
use std::sync::{Arc, Mutex, RwLock};

use helix_raft::{GroupId, HardState, NodeId, RaftGroup, Role, Term};
use helix_wal::{LogConfig, LogReader, PartitionLog};
use tokio::sync::{mpsc, oneshot, watch};

use crate::batcher::{BatchLimits, Batcher, PartitionCommand, PendingProduce};
use crate::error::{HelixError, Result};
use crate::offset::Offset;
pub use published::{FollowerProgress, Published, QuorumProgress};
use raft::{GroupSpec, HardStateFile};
use scan::MaxTimestamp;
use state::PartitionState;

/// Requests queued to one partition's batcher before senders wait. The
/// node-wide backpressure limit is what really bounds memory.
const COMMAND_QUEUE: usize = 4096;

/// How a replica is opened.
#[derive(Debug, Clone)]
pub struct PartitionSettings {
    pub spec: GroupSpec,
    pub batch: BatchLimits,
    pub log: LogConfig,
    /// `producer.id.expiration.ms`, measured on log time (ADR 0022).
    pub producer_id_expiration_ms: i64,
    /// Where the node stands: whether this replica may have lost what it
    /// reported durable and starts as a learner (ADR 0018).
    pub standing: Arc<dyn learner::LearnerAtOpen>,
    /// The node's peer connections: a lease ends when a majority is no
    /// longer connected.
    pub links: Arc<links::PeerLinks>,
}

/// The role, term and leader of a replica's group, as last published.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Leadership {
    pub role: Role,
    pub term: Term,
    pub leader: Option<NodeId>,
    /// A leader serves once an entry of its own term is acknowledged (its
    /// no-op): from then on its high watermark covers everything its
    /// predecessors acknowledged. Before, it could tell a consumer less than
    /// was already read.
    pub serving: bool,
}

impl Default for Leadership {
    fn default() -> Self {
        Leadership {
            role: Role::Follower,
            term: Term(0),
            leader: None,
            serving: false,
        }
    }
}

/// A recovered replica, not yet handed to a shard.
pub struct Recovered {
    pub group: RaftGroup,
    pub state: PartitionState,
    pub batcher: Batcher,
    pub partition: Arc<Partition>,
}

/// The shared handle of one partition replica.
#[derive(Debug)]
pub struct Partition {
    pub index: i32,
    pub group: GroupId,
    /// The group's voters, preferred leader first.
    voters: Vec<NodeId>,
    commands: mpsc::Sender<PartitionCommand>,
    published: Arc<Published>,
    links: Arc<links::PeerLinks>,
}

/// Opens the replica stored in `dir` (WAL in `dir/wal`, Raft vote in
/// `dir`): recovers the log, rebuilds the state derived from it and
/// restores the Raft group. Blocking file I/O, no tokio.
pub fn recover(
    dir: &Path,
    topic: &str,
    index: i32,
    settings: PartitionSettings,
) -> Result<Recovered> {
    std::fs::create_dir_all(dir)?;
    let wal_dir = dir.join("wal");
    let hard_state_file = HardStateFile::new(dir);
    let has_state = hard_state_file.exists();
    let mut hard_state = hard_state_file.load()?;
    let page_cache_mark = learner::replica_mark(dir);
    if !hard_state.learner
        && let Some(why) = settings.standing.learner_at_open(
            dir,
            has_state,
            page_cache_mark.as_deref(),
            settings.log.durability,
            &settings.spec.voters,
        )
    {
        // Stored before anything else happens: a crash before the replica
        // is restored leaves it a learner.
        hard_state.learner = true;
        hard_state_file.store(hard_state)?;
        tracing::info!(
            topic,
            index,
            group = settings.spec.group.0,
            reason = why,
            "replica may have lost what it reported durable: it rejoins its group as a learner (no vote, no candidacy) until the leader has restored it"
        );
    }
    if page_cache_mark.is_some() {
        // Decided, and the vote says so: the mark has done its work.
        learner::clear_replica_mark(dir)?;
    }
    // Damage inside flushed data (in the active segment's checkpointed
    // range, or a sealed segment that does not hold what its metadata
    // claims) is refused, never cut (ADR 0001).
    let rejoin = |damage, hard_state: &mut HardState| {
        learner::rejoin(
            dir,
            topic,
            index,
            &settings,
            damage,
            &hard_state_file,
            hard_state,
        )
    };
    let opened = match learner::marked(dir) {
        Some(found_on_read) if settings.spec.voters.len() > 1 => Err(found_on_read),
        _ => PartitionLog::open(&wal_dir, settings.log.clone()),
    };
    let (log, recovery) = match opened {
        Ok((log, recovery)) => match recovery.damaged.first() {
            None => (log, recovery),
            Some(d) => {
                let damage = helix_wal::WalError::Corrupt {
                    file: d.file.clone(),
                    position: d.position,
                    reason: d.reason.clone(),
                };
                drop(log);
                rejoin(damage, &mut hard_state)?
            }
        },
        Err(damage @ helix_wal::WalError::Corrupt { .. }) => rejoin(damage, &mut hard_state)?,
        Err(e) => return Err(e.into()),
    };
    let snapshot = scan::Snapshot::load(dir);
    let acknowledged_hint = snapshot.as_ref().map_or(0, |s| s.acknowledged_offset);
    // A state carried by a log restart, saved before its entry was
    // reached, is adopted when it is (`state/restart.rs`).
    let (snapshot, carried) = match snapshot {
        Some(s) if s.carried_ahead_of(&log) => (None, Some(s)),
        s => (s.and_then(|s| s.describes(&log)), None),
    };
    let txn_dir = txn_index::dir_of(dir);
    let (mut producers, max_ts) = scan::rebuild(
        &log.reader(),
        recovery.next_offset,
        snapshot,
        Some(&txn_dir),
    )?;
    producers.set_expiration(settings.producer_id_expiration_ms);
    let group = raft::restore_group(&settings.spec, hard_state, &log)?;
    // What consumers may read until the group acknowledges more: for one
    // voter its whole WAL (its own durable log is a majority); otherwise
    // what was known acknowledged when the last snapshot was taken.
    let high_watermark = if settings.spec.voters.len() == 1 {
        recovery.next_offset
    } else {
        acknowledged_hint.clamp(recovery.log_start_offset, recovery.next_offset)
    };
    if recovery.next_offset > 0 || recovery.scanned_bytes > 0 {
        let last = recovery.last_position.unwrap_or_default();
        tracing::info!(
            topic,
            index,
            group = settings.spec.group.0,
            term = group.term().0,
            last_term = last.term,
            last_index = last.index,
            next_offset = recovery.next_offset,
            log_start_offset = recovery.log_start_offset,
            high_watermark,
            reverified_bytes = recovery.scanned_bytes,
            "replica recovered"
        );
    }
    let published = Arc::new(Published {
        reader: RwLock::new(log.reader()),
        high_watermark: watch::channel(Offset(high_watermark)).0,
        // Transactions ended but not known acknowledged are not known
        // here: the scan counts them ended (a restart forgets which).
        first_unstable: std::sync::atomic::AtomicI64::new(
            producers.first_unstable().unwrap_or(i64::MAX),
        ),
        aborted: RwLock::new(txn_index::AbortedView {
            dir: txn_dir,
            index: producers.aborted_index().clone(),
        }),
        ongoing: RwLock::new(producers.ongoing()),
        max_timestamp: Mutex::new(max_ts),
        leadership: watch::channel(Leadership::default()).0,
        isr: Mutex::new(Vec::new()),
        caught_up: std::sync::atomic::AtomicBool::new(false),
        damaged: std::sync::OnceLock::new(),
        lease_until: std::sync::atomic::AtomicU64::new(0),
        synced_since_start: std::sync::atomic::AtomicBool::new(false),
        refused: Mutex::new(refused::Refused::default()),
        quorum: Mutex::new(None),
        verifications: Mutex::new(verification::VerificationGuards::default()),
    });
    let (tx, rx) = mpsc::channel(COMMAND_QUEUE);
    let mut state = PartitionState::new(
        dir.to_path_buf(),
        log,
        hard_state_file,
        producers,
        published.clone(),
    );
    if let Some(s) = carried {
        state.carry(s);
    }
    Ok(Recovered {
        group,
        state,
        batcher: Batcher::new(rx, settings.batch),
        partition: Arc::new(Partition {
            index,
            group: settings.spec.group,
            voters: settings.spec.voters.clone(),
            commands: tx,
            published,
            links: settings.links.clone(),
        }),
    })
}

impl Partition {
    /// Queues a validated produce request.
    pub async fn produce(&self, p: PendingProduce) -> Result<()> {
        if let Some(why) = self.published.damaged.get() {
            return Err(HelixError::DamagedReplica(why.clone()));
        }
        self.commands
            .send(PartitionCommand::Produce(p))
            .await
            .map_err(|_| HelixError::ShuttingDown)
    }

    /// Moves the log start offset to `before` (DeleteRecords).
    pub async fn delete_records(&self, before: Offset) -> Result<Offset> {
        let (reply, rx) = oneshot::channel();
        self.commands
            .send(PartitionCommand::DeleteRecords {
                before: before.0,
                reply,
            })
            .await
            .map_err(|_| HelixError::ShuttingDown)?;
        rx.await.map_err(|_| HelixError::ShuttingDown)?.map(Offset)
    }

    /// Asks the replica to apply retention (fire and forget).
    pub fn retention(&self, now_ms: i64) {
        let _ = self
            .commands
            .try_send(PartitionCommand::Retention { now_ms });
    }

    /// Asks the replica to stop after what is queued before this call,
    /// flushing and closing the log; the receiver fires once it has. Lets a
    /// caller close many partitions at once.
    pub async fn begin_close(&self) -> Option<oneshot::Receiver<()>> {
        let (reply, rx) = oneshot::channel();
        self.commands
            .send(PartitionCommand::Close { reply })
            .await
            .ok()?;
        Some(rx)
    }

    /// The acknowledged end: what consumers may read, exclusive.
    pub fn high_watermark(&self) -> Offset {
        *self.published.high_watermark.borrow()
    }

    /// A receiver that changes whenever the high watermark moves.
    pub fn watch_high_watermark(&self) -> watch::Receiver<Offset> {
        self.published.high_watermark.subscribe()
    }

    /// The role, term and leader last published.
    pub fn leadership(&self) -> Leadership {
        *self.published.leadership.borrow()
    }

    /// Whether this replica leads and holds its lease: a majority of its
    /// group answered within the lease, so it is not cut off (ADR 0019),
    /// and a majority is still connected (the transport's report of a
    /// broken connection counts before the shard has processed it). Only
    /// then does this node name itself leader or serve as one.
    pub fn holds_lease(&self) -> bool {
        self.published.holds_lease() && self.links.reach_majority(&self.voters)
    }

    /// What the shard publishes for this replica (it keeps the lease
    /// current).
    pub(crate) fn published(&self) -> Arc<Published> {
        self.published.clone()
    }

    /// A receiver that changes whenever role, term or leader change.
    pub fn watch_leadership(&self) -> watch::Receiver<Leadership> {
        self.published.leadership.subscribe()
    }

    /// Caught up with its leader, or leading (`/ready`).
    pub fn caught_up(&self) -> bool {
        self.published
            .caught_up
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Whether this replica has, since the process started, applied
    /// everything its leader had committed (see `Published`).
    pub fn synced_since_start(&self) -> bool {
        self.published
            .synced_since_start
            .load(std::sync::atomic::Ordering::Acquire)
    }

    /// Bytes of the log's segment files.
    pub fn size_bytes(&self) -> u64 {
        self.reader().size_bytes()
    }

    /// The in-sync replicas, leader first, while this replica leads.
    pub fn isr(&self) -> Vec<NodeId> {
        self.published
            .isr
            .lock()
            .map(|i| i.clone())
            .unwrap_or_default()
    }

    /// Serves reads and writes only as the leader, and only while it holds
    /// its lease (a leader cut off from its majority refuses at once, not
    /// after check-quorum steps it down); `current_leader_epoch` (KIP-320,
    /// -1 when the client sends none) is checked against the leader epoch
    /// as Kafka does.
    pub fn check_leader(&self, current_leader_epoch: i32) -> Result<()> {
        let l = self.leadership();
        if l.role != Role::Leader || !l.serving || !self.holds_lease() {
            return Err(HelixError::NotLeader);
        }
        let epoch = term_epoch(l.term);
        match current_leader_epoch {
            -1 => Ok(()),
            e if e < epoch => Err(HelixError::FencedLeaderEpoch),
            e if e > epoch => Err(HelixError::UnknownLeaderEpoch),
            _ => Ok(()),
        }
    }

    /// Whether a produce request may be queued here: at the leader holding
    /// its lease, whether or not it can decide yet (until it can, its
    /// replica holds what it is sent, in order: `state/propose.rs`, ADR
    /// 0024). Unlike [`Partition::check_leader`] it does not wait for the
    /// leader's no-op: refusing a request and accepting the next is a
    /// sequence gap to an idempotent producer.
    ///
    /// A refusal is remembered by the producer id of `records` (the
    /// request's record batches as sent): the same producer's next request,
    /// should this replica lead by then, follows a gap it caused
    /// (`refused.rs`).
    pub fn check_writable(&self, records: &[u8]) -> Result<()> {
        if self.leadership().role == Role::Leader && self.holds_lease() {
            return Ok(());
        }
        if let Ok(mut refused) = self.published.refused.lock() {
            refused.note(crate::batcher::Sender::of(records));
        }
        Err(HelixError::NotLeader)
    }

    /// The group's replication as this replica last saw it (the
    /// controller group only; None elsewhere).
    pub fn quorum_progress(&self) -> Option<QuorumProgress> {
        self.published.quorum.lock().ok().and_then(|q| q.clone())
    }

    /// The group's voters (its replicas), preferred leader first.
    pub fn voters(&self) -> &[NodeId] {
        &self.voters
    }

    /// The current leader epoch (= Raft term).
    pub fn leader_epoch(&self) -> i32 {
        term_epoch(self.leadership().term)
    }

    pub fn log_start_offset(&self) -> Offset {
        Offset(self.reader().log_start_offset())
    }

    /// The end of this replica's WAL (Kafka's log end offset).
    pub fn log_end_offset(&self) -> Offset {
        Offset(self.reader().next_offset())
    }

    /// (base offset, timestamp) of the batch with the largest timestamp.
    pub fn max_timestamp(&self) -> MaxTimestamp {
        self.published.max_timestamp.lock().ok().and_then(|m| *m)
    }

    /// Writes a transaction marker (WriteTxnMarkers) through this
    /// partition's Raft group, as its leader decides it (a stale epoch or
    /// coordinator is refused and never stored). Answers the marker's
    /// offset once it is acknowledged.
    pub async fn write_marker(&self, marker: markers::Marker) -> Result<Offset> {
        let (reply, rx) = oneshot::channel();
        self.commands
            .send(PartitionCommand::Marker { marker, reply })
            .await
            .map_err(|_| HelixError::ShuttingDown)?;
        rx.await.map_err(|_| HelixError::ShuttingDown)?.map(Offset)
    }

    /// The producers this replica knows, as of the last entry it applied
    /// (DescribeProducers; any replica answers, as in Kafka).
    pub async fn describe_producers(&self) -> Result<Vec<producers::ActiveProducer>> {
        let (reply, rx) = oneshot::channel();
        self.commands
            .send(PartitionCommand::DescribeProducers { reply })
            .await
            .map_err(|_| HelixError::ShuttingDown)?;
        rx.await.map_err(|_| HelixError::ShuttingDown)
    }

    /// Begins (or joins) the verification of a transactional batch of
    /// `producer_id` with its coordinator (`replica::verification`): the
    /// guard the batch must carry to open a transaction here.
    pub fn begin_verification(&self, producer_id: i64) -> u64 {
        self.published
            .verifications
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .begin(producer_id)
    }

    /// Whether the applied log holds an open transaction of `producer_id`
    /// at `epoch` (Kafka's `hasOngoingTransaction`): a batch continuing it
    /// is appended without asking the coordinator (KIP-890 part 1). Should
    /// a marker end it before the batch is decided, the batch would open a
    /// transaction unverified, and the leader refuses it
    /// (INVALID_TXN_STATE, as Kafka).
    pub fn in_ongoing_txn(&self, producer_id: i64, epoch: i16) -> bool {
        self.published
            .ongoing
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .get(&producer_id)
            == Some(&epoch)
    }

    /// How many transactional batches for this replica were verified with
    /// their coordinator (KIP-890 part 1).
    #[cfg(test)]
    pub fn verifications_asked(&self) -> u64 {
        self.published
            .verifications
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .asked()
    }

    /// The current reader handle (cheap: a clone of an `Arc`).
    pub fn reader(&self) -> LogReader {
        match self.published.reader.read() {
            Ok(r) => r.clone(),
            Err(poisoned) => poisoned.into_inner().clone(),
        }
    }

    /// New retention / segment settings for the log (reopened in order
    /// with the partition's other work).
    pub async fn reconfigure(&self, log: LogConfig) {
        let _ = self
            .commands
            .send(PartitionCommand::Reconfigure { log })
            .await;
    }
}

/// A Raft term as a Kafka leader epoch.
pub fn term_epoch(term: Term) -> i32 {
    i32::try_from(term.0).unwrap_or(i32::MAX)
}

/// Closes partitions concurrently: every close is asked for first, then
/// awaited.
pub async fn close_all(partitions: &[Arc<Partition>]) {
    let mut closing = Vec::with_capacity(partitions.len());
    for p in partitions {
        closing.extend(p.begin_close().await);
    }
    for closed in closing {
        let _ = closed.await;
    }
}
