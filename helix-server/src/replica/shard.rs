//! One shard: a thread that owns a `MultiRaft` and the apply state of its
//! groups, and does what their `Ready`s ask, in the order docs/raft.md
//! gives: persist votes, truncate, append to the WAL, report durability,
//! send, serve catch-up, answer up to the acknowledged index.
//!
//! A round takes every queued input (up to a bound), then drives the groups
//! until none has anything left to do, so a burst of inputs costs one
//! round: one message per destination node and lane, one fsync request.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use helix_raft::{GroupId, LogIndex, MessageBatch, MultiRaft, NodeId, RaftGroup, encode_batch};
use tokio::sync::{mpsc, oneshot};

use super::catch_up::CatchUps;
use super::isr::{CaughtUp, IsrTracker};
use super::payload::{MAX_PAYLOAD_BYTES, split_to_fit};
use super::syncer::Syncer;
use super::{Lane, Outbox};
use crate::batcher::Work;
use crate::error::{HelixError, Result};
use crate::partition::Published;
use crate::partition::raft::HardStateFile;
use crate::partition::state::PartitionState;

/// Inputs handled before the groups are driven (a bound on a round).
const MAX_INPUTS_PER_ROUND: usize = 1024;

/// Kind byte in front of a Raft message batch on the peer transport.
pub const PAYLOAD_RAFT: u8 = 1;

/// What a shard is asked to do.
pub enum ShardInput {
    Tick,
    Install {
        group: Box<RaftGroup>,
        state: Box<PartitionState>,
        /// Where the shard publishes the replica's leader lease.
        published: Arc<Published>,
        reply: oneshot::Sender<Result<()>>,
    },
    Work(GroupId, Work),
    Peer(MessageBatch),
    Campaign(GroupId),
    /// The connection to this node broke (its process likely died).
    PeerLost(NodeId),
    /// Graceful shutdown: hand every led group to its best follower.
    StepDownAll,
    /// The syncer finished a round asked for by this shard.
    Synced,
    /// The Raft status of every group of the shard (metrics).
    Observe(oneshot::Sender<Vec<(GroupId, helix_raft::Status)>>),
    Stop,
}

pub struct Shard {
    index: usize,
    multi: MultiRaft,
    states: HashMap<GroupId, PartitionState>,
    /// Each group's published view, for its leader lease.
    published: HashMap<GroupId, Arc<Published>>,
    outbox: Arc<dyn Outbox>,
    syncer: Syncer,
    /// This shard's own queue, for the syncer's answers.
    me: mpsc::Sender<ShardInput>,
    catch_ups: CatchUps,
    /// Groups with appends waiting for the next fsync round (fsync
    /// durability).
    awaiting_sync: BTreeSet<GroupId>,
    /// Groups whose appends the round in flight covers (None: no round in
    /// flight). Appends made while a round runs wait for the next one: the
    /// round may have passed their log already.
    in_round: Option<BTreeSet<GroupId>>,
    /// Groups whose role, term or leader may have changed this round.
    touched: BTreeSet<GroupId>,
    ticked: bool,
    /// Ticks seen, the clock of ISR bookkeeping.
    ticks: u64,
    /// ISR of the groups this node leads.
    isr: HashMap<GroupId, IsrTracker>,
    /// Whether each replica is caught up (`/ready`).
    caught_up: HashMap<GroupId, CaughtUp>,
    /// Ticks a follower may go without catching up and stay in the ISR.
    isr_lag_ticks: u64,
    /// Bumped on every leadership or ISR change (the gossip sends then).
    changes: Arc<AtomicU64>,
    /// Every this many ticks, led groups whose preferred leader is another
    /// caught-up node hand leadership back to it (None: never).
    balance_every: Option<u64>,
    /// A balancing round is under way: a few groups are handed back every
    /// [`BALANCE_STEP_TICKS`] until none is left to move.
    balancing: bool,
    /// Hand-backs started: (term at the start, tick). Still leading in that
    /// term a balancing step later means the preferred replica did not take
    /// over (it stood down after finding damage, ADR 0016): the group is
    /// left alone for [`HANDBACK_RETRY_ROUNDS`] balancing intervals.
    handbacks: HashMap<GroupId, (helix_raft::Term, u64)>,
    tick_pending: Arc<AtomicBool>,
    /// Length of a tick: leases are published as deadlines on the host's
    /// clock.
    tick: std::time::Duration,
}

/// Leader balancing hands back at most this many groups per shard at a
/// time: each hand-over sends that partition's clients to another node, and
/// dozens at once stalled produce for about 2 s under load.
const BALANCE_BATCH: usize = 2;
/// Ticks between two steps of a balancing round (0.5 s by default).
const BALANCE_STEP_TICKS: u64 = 10;
/// Balancing intervals a group is left alone after a hand-back that did not
/// happen (each failed attempt holds its produce for an election timeout).
const HANDBACK_RETRY_ROUNDS: u64 = 3;

/// What a shard shares with the host.
pub struct ShardContext {
    pub node: NodeId,
    pub outbox: Arc<dyn Outbox>,
    pub syncer: Syncer,
    pub isr_lag_ticks: u64,
    pub changes: Arc<AtomicU64>,
    pub balance_every: Option<u64>,
    /// Set by the timer when it queues a tick, cleared when the tick is
    /// taken (at most one tick queued).
    pub tick_pending: Arc<AtomicBool>,
    /// Length of a tick.
    pub tick: std::time::Duration,
}

impl Shard {
    pub fn new(index: usize, cx: ShardContext, me: mpsc::Sender<ShardInput>) -> Shard {
        Shard {
            index,
            multi: MultiRaft::new(cx.node),
            states: HashMap::new(),
            published: HashMap::new(),
            outbox: cx.outbox,
            syncer: cx.syncer,
            me,
            catch_ups: CatchUps::default(),
            awaiting_sync: BTreeSet::new(),
            in_round: None,
            touched: BTreeSet::new(),
            ticked: false,
            ticks: 0,
            isr: HashMap::new(),
            caught_up: HashMap::new(),
            isr_lag_ticks: cx.isr_lag_ticks,
            changes: cx.changes,
            balance_every: cx.balance_every,
            balancing: false,
            handbacks: HashMap::new(),
            tick_pending: cx.tick_pending,
            tick: cx.tick,
        }
    }

    /// The shard's loop, until `Stop` or every sender is gone.
    pub fn run(mut self, mut rx: mpsc::Receiver<ShardInput>) {
        let _span = tracing::info_span!("shard", index = self.index).entered();
        let m = crate::metrics::metrics();
        while let Some(input) = rx.blocking_recv() {
            let started = std::time::Instant::now();
            if !self.handle(input) {
                break;
            }
            for _ in 0..MAX_INPUTS_PER_ROUND {
                match rx.try_recv() {
                    Ok(input) => {
                        if !self.handle(input) {
                            return self.stop();
                        }
                    }
                    Err(_) => break,
                }
            }
            self.drive();
            m.busy(crate::metrics::Pool::Shards, started.elapsed());
        }
        self.stop();
    }

    fn stop(&mut self) {
        for (_, mut state) in self.states.drain() {
            state.close();
        }
    }

    /// Takes one input. Returns false on `Stop`.
    fn handle(&mut self, input: ShardInput) -> bool {
        match input {
            ShardInput::Tick => {
                self.tick_pending.store(false, Ordering::Release);
                self.multi.tick();
                self.ticked = true;
                self.ticks += 1;
                if self
                    .balance_every
                    .is_some_and(|every| self.ticks.is_multiple_of(every))
                {
                    self.balancing = true;
                }
                if self.balancing && self.ticks.is_multiple_of(BALANCE_STEP_TICKS) {
                    self.balancing = self.restore_preferred_leaders(BALANCE_BATCH);
                }
                for (id, state) in &mut self.states {
                    if let Some(g) = self.multi.group_mut(*id) {
                        if state.stand_down_if_damaged(g) {
                            self.touched.insert(*id);
                        }
                        // Proposals the in-memory log had no room for.
                        if state.retry_held(g) {
                            self.touched.insert(*id);
                        }
                    }
                }
            }
            ShardInput::StepDownAll => self.step_down_all(),
            ShardInput::Install {
                group,
                state,
                published,
                reply,
            } => {
                let id = group.group();
                let mut state = *state;
                // Published before the handle is returned: a one-voter
                // group is leader already, and a produce sent right after
                // must find it so.
                state.leadership(&group);
                published.publish_lease(group.lease_ticks_left(), self.tick);
                let result = self.multi.insert_group(*group).map_err(HelixError::from);
                if result.is_ok() {
                    self.states.insert(id, state);
                    self.published.insert(id, published);
                    self.touched.insert(id);
                }
                let _ = reply.send(result);
            }
            ShardInput::Work(id, work) => {
                let (Some(group), Some(state)) =
                    (self.multi.group_mut(id), self.states.get_mut(&id))
                else {
                    return true; // gone: dropping the work answers its waiters
                };
                if !state.work(group, work) {
                    self.remove(id);
                }
                self.touched.insert(id);
            }
            ShardInput::Peer(batch) => {
                self.touched.extend(batch.messages.iter().map(|m| m.group));
                if let Err(e) = self.multi.step_batch(batch) {
                    tracing::warn!(error = %e, "undeliverable peer batch");
                }
            }
            ShardInput::Campaign(id) => {
                if let Some(g) = self.multi.group_mut(id) {
                    g.campaign();
                    self.touched.insert(id);
                }
            }
            ShardInput::PeerLost(node) => {
                let acted = self.multi.peer_lost(node);
                self.touched.extend(acted);
            }
            ShardInput::Synced => {
                for id in self.in_round.take().unwrap_or_default() {
                    self.report_durable(id, None);
                }
            }
            ShardInput::Observe(reply) => {
                let _ = reply.send(
                    self.multi
                        .groups()
                        .map(|g| (g.group(), g.status()))
                        .collect(),
                );
            }
            ShardInput::Stop => return false,
        }
        true
    }

    /// Tells a group how far its WAL is durable; `applied` (when known)
    /// caps the report at what this round appended.
    fn report_durable(&mut self, id: GroupId, applied: Option<LogIndex>) {
        let Some(state) = self.states.get(&id) else {
            return;
        };
        let durable = match applied {
            Some(last) => state.durable_index().min(last),
            None => state.durable_index(),
        };
        if let Err(e) = self.multi.durable_to(id, durable) {
            tracing::error!(group = id.0, error = %e, "durable report refused");
        }
    }

    /// Drives every group until none has work left.
    fn drive(&mut self) {
        loop {
            self.catch_ups.pump(&mut self.multi, &self.states);
            if !self.multi.has_ready() {
                break;
            }
            self.round();
        }
        self.publish_leadership();
        if !self.awaiting_sync.is_empty()
            && self.in_round.is_none()
            && self.syncer.request(self.me.clone())
        {
            self.in_round = Some(std::mem::take(&mut self.awaiting_sync));
        }
    }

    fn round(&mut self) {
        let mut ready = self.multi.ready();
        let mut failed: Vec<(GroupId, HelixError)> = Vec::new();
        // 1. Votes first, durable in one flush for the whole round: nothing
        // that depends on them leaves before.
        let votes: Vec<(GroupId, &HardStateFile, helix_raft::HardState)> = ready
            .groups
            .iter()
            .filter_map(|(id, rd)| {
                let hs = rd.hard_state?;
                Some((*id, &self.states.get(id)?.hard_state, hs))
            })
            .collect();
        if !votes.is_empty() {
            let stored = HardStateFile::store_all(votes.iter().map(|(_, f, hs)| (*f, *hs)));
            if let Err(e) = stored {
                // Which vote failed is unknown: none of them may be relied on.
                tracing::error!(error = %e, "cannot persist Raft votes");
                for (id, _, _) in &votes {
                    failed.push((
                        *id,
                        HelixError::CorruptState(format!("vote not persisted: {e}")),
                    ));
                }
            }
        }
        // 2-3. Truncate, append, report what is durable.
        for (id, rd) in &mut ready.groups {
            self.touched.insert(*id);
            if failed.iter().any(|(f, _)| f == id) {
                continue;
            }
            let Some(state) = self.states.get_mut(id) else {
                continue;
            };
            let entries = std::mem::take(&mut rd.to_apply);
            let applied = match rd.truncate_wal_after {
                Some(after) => state.truncate(after).and_then(|()| state.apply(entries)),
                None => state.apply(entries),
            };
            match applied {
                Ok(Some(last)) if state.fsync() => {
                    self.awaiting_sync.insert(*id);
                    let _ = last;
                }
                Ok(Some(last)) => self.report_durable(*id, Some(last)),
                Ok(None) => {}
                Err(e) => failed.push((*id, e)),
            }
        }
        // 4. Send (messages of a failed group stay home).
        let failed_ids: Vec<GroupId> = failed.iter().map(|(id, _)| *id).collect();
        for batch in ready.batches {
            let (control, data) = keep(batch, &failed_ids).split_by_channel();
            self.send(control, Lane::Control);
            self.send(data, Lane::Data);
        }
        for batch in ready.catch_up_batches {
            self.send(keep(batch, &failed_ids), Lane::CatchUp);
        }
        // 5-6. Serve catch-up; answer what is acknowledged.
        for (id, rd) in ready.groups {
            if failed_ids.contains(&id) {
                continue;
            }
            for req in rd.catch_up {
                self.catch_ups.start(id, req, self.states.get(&id));
            }
            if let (Some(ack), Some(state)) = (rd.acknowledged, self.states.get_mut(&id)) {
                state.acknowledged(ack);
            }
        }
        for (id, err) in failed {
            tracing::error!(group = id.0, error = %err, "replica stopped: its log or vote cannot be written");
            crate::metrics::Metrics::count(&crate::metrics::metrics().counters.stopped_replicas, 1);
            if let Some(state) = self.states.get_mut(&id) {
                state.fail_all(&err);
            }
            self.remove(id);
        }
    }

    fn send(&self, batch: MessageBatch, lane: Lane) {
        for part in split_to_fit(batch, MAX_PAYLOAD_BYTES) {
            self.send_payload(part, lane);
        }
    }

    fn send_payload(&self, batch: MessageBatch, lane: Lane) {
        let to = batch.to;
        let body = encode_batch(&batch);
        let mut payload = bytes::BytesMut::with_capacity(1 + body.len());
        payload.extend_from_slice(&[PAYLOAD_RAFT]);
        payload.extend_from_slice(&body);
        if !self.outbox.send(to, lane, payload.freeze()) {
            crate::metrics::Metrics::count(&crate::metrics::metrics().counters.peer_drops, 1);
        }
    }

    /// Publishes role, term and leader of every group that may have changed,
    /// and after a tick the ISR of every group this node leads.
    fn publish_leadership(&mut self) {
        let ticked = std::mem::take(&mut self.ticked);
        let ids: Vec<GroupId> = if ticked {
            self.touched.clear();
            self.states.keys().copied().collect()
        } else {
            std::mem::take(&mut self.touched).into_iter().collect()
        };
        let me = self.multi.node();
        for id in ids {
            let (Some(group), Some(state)) = (self.multi.group(id), self.states.get_mut(&id))
            else {
                continue;
            };
            // A lease that ends is withdrawn before, one that begins is
            // published after, the role: readers never see a lease held
            // by a replica that no longer leads.
            let left = group.lease_ticks_left();
            let lease = (self.published.get(&id), self.tick, &*self.changes);
            if left == 0 {
                publish_lease(lease, id, left, group);
            }
            let changed = state.leadership(group);
            if left > 0 {
                publish_lease(lease, id, left, group);
            }
            if let Some(now) = changed {
                let s = group.status();
                tracing::info!(
                    group = id.0,
                    role = ?now.role,
                    term = now.term.0,
                    leader = ?now.leader.map(|n| n.0),
                    last_index = s.last_index.0,
                    commit = s.commit.0,
                    acknowledged = s.acknowledged.0,
                    "leadership changed"
                );
                self.changes.fetch_add(1, Ordering::Relaxed);
                crate::metrics::Metrics::count(
                    &crate::metrics::metrics().counters.leader_changes,
                    1,
                );
                if now.role != helix_raft::Role::Leader {
                    self.isr.remove(&id);
                }
            }
            if !ticked {
                continue;
            }
            let status = group.status();
            let caught_up =
                self.caught_up
                    .entry(id)
                    .or_default()
                    .tick(self.ticks, &status, self.isr_lag_ticks);
            state.publish_caught_up(caught_up);
            if group.role() == helix_raft::Role::Leader
                && group.config().voters.len() > 1
                && let Some(isr) = self.isr.entry(id).or_default().tick(
                    self.ticks,
                    me,
                    &status,
                    self.isr_lag_ticks,
                )
            {
                tracing::info!(group = id.0, isr = ?isr.iter().map(|n| n.0).collect::<Vec<_>>(), "in-sync replicas changed");
                state.publish_isr(isr);
                self.changes.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    /// Leader balancing (Kafka's auto.leader.rebalance): a group led here
    /// whose preferred leader (first replica) is another node, in the ISR
    /// and fully caught up, is handed back to it; so leadership returns to
    /// where placement spread it once a restarted node has caught up. At
    /// most `batch` groups start a hand-over per call (those already handing
    /// over count); true when more may be waiting.
    fn restore_preferred_leaders(&mut self, batch: usize) -> bool {
        let me = self.multi.node();
        let mut ids: Vec<GroupId> = self.states.keys().copied().collect();
        ids.sort_unstable();
        let mut moving = 0;
        for id in ids {
            if moving == batch {
                return true;
            }
            let Some(g) = self.multi.group_mut(id) else {
                continue;
            };
            let Some(&preferred) = g.config().voters.first() else {
                continue;
            };
            if g.role() != helix_raft::Role::Leader || preferred == me {
                continue;
            }
            let status = g.status();
            if status.transferring_to.is_some() {
                moving += 1;
                continue;
            }
            if let Some(&(term, at)) = self.handbacks.get(&id) {
                let retry_after =
                    HANDBACK_RETRY_ROUNDS.saturating_mul(self.balance_every.unwrap_or(0));
                if term == status.term && self.ticks < at.saturating_add(retry_after) {
                    continue; // it did not take over: leave it be for a while
                }
            }
            let caught_up = status.followers.iter().any(|f| {
                f.node == preferred
                    && f.matched == status.last_index
                    && f.ticks_since_heard <= super::isr::HEARD_WITHIN_TICKS
            });
            let in_sync = self
                .states
                .get(&id)
                .is_some_and(|s| s.isr().contains(&preferred));
            if caught_up && in_sync {
                tracing::info!(
                    group = id.0,
                    to = preferred.0,
                    "handing leadership back to the preferred replica"
                );
                g.transfer_leader(preferred);
                self.handbacks.insert(id, (status.term, self.ticks));
                self.touched.insert(id);
                moving += 1;
            }
        }
        false
    }

    /// Graceful shutdown: every group led here is handed to its most
    /// caught-up follower, so clients see one retriable error, not a timeout.
    fn step_down_all(&mut self) {
        let ids: Vec<GroupId> = self.states.keys().copied().collect();
        for id in ids {
            let Some(g) = self.multi.group_mut(id) else {
                continue;
            };
            if g.role() != helix_raft::Role::Leader {
                continue;
            }
            let status = g.status();
            if let Some(best) = status.followers.iter().max_by_key(|f| (f.matched, f.node)) {
                g.transfer_leader(best.node);
                self.touched.insert(id);
            }
        }
    }

    fn remove(&mut self, id: GroupId) {
        self.multi.remove_group(id);
        self.states.remove(&id);
        if let Some(p) = self.published.remove(&id) {
            p.publish_lease(0, self.tick);
        }
        self.awaiting_sync.remove(&id);
        if let Some(r) = &mut self.in_round {
            r.remove(&id);
        }
        self.catch_ups.forget(id);
        self.isr.remove(&id);
        self.caught_up.remove(&id);
        self.handbacks.remove(&id);
    }
}

/// The batch without the messages of `failed` groups.
fn keep(mut batch: MessageBatch, failed: &[GroupId]) -> MessageBatch {
    if !failed.is_empty() {
        batch.messages.retain(|m| !failed.contains(&m.group));
    }
    batch
}

/// Where a lease is published: the replica's view, the tick length, the
/// gossip's change counter.
type LeaseSink<'a> = (
    Option<&'a Arc<Published>>,
    std::time::Duration,
    &'a AtomicU64,
);

/// Publishes `group`'s leader lease (`ticks_left` ticks of the tick length
/// from now, a deadline on the host's clock); a change of whether it is
/// held is gossiped at once (a leader's report claims the lease), and a
/// lease a leader loses is logged and counted.
fn publish_lease(
    (published, tick, changes): LeaseSink<'_>,
    id: GroupId,
    ticks_left: u32,
    group: &RaftGroup,
) {
    let held = ticks_left > 0;
    if !published.is_some_and(|p| p.publish_lease(ticks_left, tick)) {
        return;
    }
    changes.fetch_add(1, Ordering::Relaxed);
    if !held && group.role() == helix_raft::Role::Leader {
        tracing::info!(
            group = id.0,
            term = group.term().0,
            "leader lease lost: no majority answered within the lease; not naming itself leader"
        );
        crate::metrics::Metrics::count(&crate::metrics::metrics().counters.leader_lease_losses, 1);
    }
}
