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

use helix_raft::{GroupId, LogIndex, MessageBatch, MultiRaft, NodeId, encode_batch};
use tokio::sync::mpsc;

use super::catch_up::CatchUps;
use super::input::ShardInput;
use super::isr::{CaughtUp, IsrTracker};
use super::payload::{MAX_PAYLOAD_BYTES, split_to_fit};
use super::syncer::Syncer;
use super::{Lane, Outbox};
use crate::error::HelixError;
use crate::replica::Published;
use crate::replica::raft::HardStateFile;
use crate::replica::state::PartitionState;

mod leadership;

use leadership::{BALANCE_BATCH, BALANCE_STEP_TICKS};

/// Inputs handled before the groups are driven (a bound on a round).
const MAX_INPUTS_PER_ROUND: usize = 1024;

/// Kind byte in front of a Raft message batch on the peer transport.
pub const PAYLOAD_RAFT: u8 = 1;

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
            ShardInput::HandBack(id) => self.hand_back(id),
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
            let applied = match (rd.restart_wal_at, rd.truncate_wal_after) {
                (Some(at), _) => state
                    .restart(at, &entries)
                    .and_then(|()| state.apply(entries)),
                (None, Some(after)) => state.truncate(after).and_then(|()| state.apply(entries)),
                (None, None) => state.apply(entries),
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
            let Some(state) = self.states.get_mut(&id) else {
                continue;
            };
            if let Some(ack) = rd.acknowledged {
                state.acknowledged(ack);
            }
            // What a new leader held until its predecessors' entries were
            // applied (or a full log held) may be decided now, not a tick
            // later.
            if state.holds_requests()
                && let Some(g) = self.multi.group_mut(id)
            {
                state.retry_held(g);
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
