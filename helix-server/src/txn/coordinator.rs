//! The transaction coordinator as a deterministic state machine, in the
//! shape of `group::Coordinator`: the host feeds requests (with a token),
//! time (`tick(now_ms)`), proposal outcomes, marker completions and
//! replayed entries; it collects answers, proposals and marker writes with
//! [`Coordinator::take_ready`]. No I/O, no clock, no threads: time enters
//! only as an argument and leaves only inside proposed records, so replicas
//! replaying the log never consult a clock.
//!
//! Each `__transaction_state` partition is a [`HostedPartition`] that is
//! absent (NOT_COORDINATOR), loading (COORDINATOR_LOAD_IN_PROGRESS) or
//! active. Its view (every transactional id's metadata) changes only when a
//! record is acknowledged or replayed; while a transactional id has a
//! proposal in flight it is "pending" and other requests for it are answered
//! CONCURRENT_TRANSACTIONS (Kafka's `pendingState`).
//!
//! A partition with nothing in flight and `snapshot_after_records`
//! acknowledged records since its last snapshot (and at least as many as
//! it has transactional ids) proposes its whole view as one
//! [`Record::Snapshot`]; the host deletes the log before it once it is
//! acknowledged. A snapshot due while proposals are in flight drains the
//! partition first: later proposals wait behind it
//! (`replica::internal_drain`, as the group coordinator does). The
//! decision reads only the coordinator's state.

use std::collections::BTreeMap;

use super::error::TxnError;
use super::metadata::TxnMetadata;
use super::record::{MAX_STRING_BYTES, Record, decode_entry, encode_entry};
use super::request::TxnRequest;
use super::response::{Answer, Effects, MarkerWrite, OnAcknowledged, Proposal, Ready, Reply};
use super::state::TxnState;
use super::types::{ProposalId, RequestToken, StatePartition, state_partition_for};
use crate::config::TxnConfig;
use crate::replica::internal_drain::SnapshotDrain;

/// One `__transaction_state` partition hosted on this node.
#[derive(Debug)]
pub struct HostedPartition {
    /// Replaying the partition's log: requests get COORDINATOR_LOAD_IN_PROGRESS.
    pub(super) loading: bool,
    /// The leadership epoch this partition was loaded for (Kafka's
    /// coordinator epoch), carried by every marker it asks for.
    pub(super) coordinator_epoch: i32,
    /// The view: every transactional id's last acknowledged metadata.
    pub(super) transactions: BTreeMap<String, TxnMetadata>,
    /// Transactional ids with a proposal in flight, and which.
    pub(super) pending: BTreeMap<String, ProposalId>,
    /// Records acknowledged or replayed since the last snapshot (or since
    /// the log's start): the log a reload would replay beyond the view.
    pub(super) records_since_snapshot: u64,
    /// A snapshot of this partition is proposed and not yet settled.
    snapshot_in_flight: bool,
    /// Proposals (numbered, their ids pending) waiting behind a due
    /// snapshot until those in flight are settled, so a steady stream of
    /// transactions cannot keep the log from ever being snapshotted.
    drain: SnapshotDrain<(Proposal, InFlight)>,
}

impl HostedPartition {
    fn new() -> Self {
        Self {
            loading: true,
            coordinator_epoch: 0,
            transactions: BTreeMap::new(),
            pending: BTreeMap::new(),
            records_since_snapshot: 0,
            snapshot_in_flight: false,
            drain: SnapshotDrain::default(),
        }
    }

    /// Applies a durable record to the view. A snapshot replaces it whole:
    /// the log before a snapshot may be gone, and what it held is in it.
    fn apply(&mut self, record: Record) {
        self.records_since_snapshot = self.records_since_snapshot.saturating_add(1);
        match record {
            Record::Metadata {
                transactional_id,
                metadata,
            } if metadata.state != TxnState::Dead => {
                self.transactions.insert(transactional_id, metadata);
            }
            Record::Metadata {
                transactional_id, ..
            }
            | Record::Tombstone { transactional_id } => {
                self.transactions.remove(&transactional_id);
            }
            Record::Snapshot { transactions } => {
                self.transactions = transactions;
                self.records_since_snapshot = 0;
            }
        }
    }

    /// Whether the partition should snapshot now: loaded, no snapshot
    /// already on its way, enough records since the last one, and a log
    /// since then at least as long as the view (so a snapshot at most
    /// doubles what is written). The caller checks nothing else is in
    /// flight: only then is everything before the snapshot in the view.
    fn wants_snapshot(&self, threshold: u64) -> bool {
        !self.loading
            && !self.snapshot_in_flight
            && self.records_since_snapshot >= threshold.max(1)
            && self.records_since_snapshot >= self.transactions.len() as u64
    }

    /// The markers a transaction in a Prepare state is owed.
    fn markers_for(
        &self,
        partition: StatePartition,
        transactional_id: &str,
        metadata: &TxnMetadata,
    ) -> MarkerWrite {
        MarkerWrite {
            partition,
            transactional_id: transactional_id.to_owned(),
            producer_id: metadata.producer_id,
            epoch: metadata.epoch,
            commit: metadata.state == TxnState::PrepareCommit,
            coordinator_epoch: self.coordinator_epoch,
            partitions: metadata.partitions.iter().cloned().collect(),
        }
    }
}

/// A proposal on its way through Raft.
#[derive(Debug)]
struct InFlight {
    partition: StatePartition,
    record: Record,
    waiter: OnAcknowledged,
}

/// The transaction coordinator of one node.
#[derive(Debug)]
pub struct Coordinator {
    pub(super) config: TxnConfig,
    pub(super) partitions: BTreeMap<StatePartition, HostedPartition>,
    in_flight: BTreeMap<ProposalId, InFlight>,
    next_proposal: u64,
    next_abort_check_ms: u64,
    next_expiry_check_ms: u64,
    ready: Ready,
}

/// Milliseconds as Kafka stores them.
pub(super) fn millis(now_ms: u64) -> i64 {
    i64::try_from(now_ms).unwrap_or(i64::MAX)
}

impl Coordinator {
    pub fn new(config: TxnConfig) -> Self {
        Self {
            config,
            partitions: BTreeMap::new(),
            in_flight: BTreeMap::new(),
            next_proposal: 0,
            next_abort_check_ms: 0,
            next_expiry_check_ms: 0,
            ready: Ready::default(),
        }
    }

    /// The `__transaction_state` partition that owns `transactional_id`
    /// (FindCoordinator answers with its leader).
    pub fn partition_for(&self, transactional_id: &str) -> StatePartition {
        state_partition_for(transactional_id, self.config.state_partitions)
    }

    /// Everything produced since the last call.
    pub fn take_ready(&mut self) -> Ready {
        std::mem::take(&mut self.ready)
    }

    /// A transactional id's acknowledged metadata, if this node holds it.
    #[cfg(test)]
    pub fn transaction(&self, transactional_id: &str) -> Option<&TxnMetadata> {
        let partition = self.partition_for(transactional_id);
        self.partitions
            .get(&partition)?
            .transactions
            .get(transactional_id)
    }

    /// A hosted partition's view (acknowledged metadata by transactional id).
    #[cfg(test)]
    pub fn view(&self, partition: StatePartition) -> Option<&BTreeMap<String, TxnMetadata>> {
        self.partitions.get(&partition).map(|p| &p.transactions)
    }

    /// Starts (re)building a partition's view: on becoming its leader, after
    /// a restart, or after a Raft truncation removed entries it had applied.
    /// Whatever the partition had in memory is dropped and its waiting
    /// requests are answered NOT_COORDINATOR.
    pub fn begin_load(&mut self, partition: StatePartition) {
        self.unload(partition);
        self.partitions.insert(partition, HostedPartition::new());
    }

    /// Replays one entry of a loading partition's log, in log order. A
    /// garbage entry is refused whole and changes nothing.
    pub fn replay(&mut self, partition: StatePartition, entry: &[u8]) -> Result<(), TxnError> {
        let shard = self
            .partitions
            .get_mut(&partition)
            .filter(|shard| shard.loading)
            .ok_or(TxnError::NotCoordinator)?;
        for record in decode_entry(entry)? {
            shard.apply(record);
        }
        Ok(())
    }

    /// Ends loading: the partition serves requests as coordinator epoch
    /// `coordinator_epoch`, and every transaction found in a Prepare state
    /// has its markers asked for again (the previous coordinator may have
    /// died before writing them all; writing one twice is harmless).
    pub fn finish_load(&mut self, partition: StatePartition, coordinator_epoch: i32) {
        let Some(shard) = self.partitions.get_mut(&partition) else {
            return;
        };
        shard.loading = false;
        shard.coordinator_epoch = coordinator_epoch;
        for (transactional_id, metadata) in &shard.transactions {
            if metadata.state.is_prepare() {
                let markers = shard.markers_for(partition, transactional_id, metadata);
                self.ready.markers.push(markers);
            }
        }
    }

    /// Stops coordinating a partition (leadership lost, shutdown): every
    /// request waiting for one of its proposals is answered NOT_COORDINATOR.
    pub fn unload(&mut self, partition: StatePartition) {
        let failed: Vec<ProposalId> = self
            .in_flight
            .iter()
            .filter(|(_, f)| f.partition == partition)
            .map(|(id, _)| *id)
            .collect();
        let held = self
            .partitions
            .remove(&partition)
            .map(|mut shard| shard.drain.take_held())
            .unwrap_or_default();
        for id in failed {
            self.on_proposal_failed(id);
        }
        for (_, flight) in held {
            self.fail_waiter(flight.waiter);
        }
    }

    /// Handles one request. Its answer comes out of [`Self::take_ready`]
    /// now, or once the record it depends on is acknowledged.
    pub fn handle(&mut self, token: RequestToken, request: TxnRequest, now_ms: u64) {
        let now = millis(now_ms);
        match request {
            TxnRequest::InitProducerId(request) => self.init_producer_id(token, request, now),
            TxnRequest::AddPartitions(request) => self.add_partitions(token, request, now),
            TxnRequest::VerifyPartitions(request) => self.verify_partitions(token, request),
            TxnRequest::AddOffsets(request) => self.add_offsets(token, request, now),
            TxnRequest::EndTxn(request) => self.end_txn(token, request, now),
        }
    }

    /// The proposal is durable on a majority: its record joins the view,
    /// what waited for it is answered, and a transaction it moved to a
    /// Prepare state asks for its markers.
    pub fn on_acknowledged(&mut self, id: ProposalId) {
        let Some(flight) = self.in_flight.remove(&id) else {
            return;
        };
        let Some(shard) = self.partitions.get_mut(&flight.partition) else {
            return;
        };
        let transactional_id = flight.record.transactional_id().map(str::to_owned);
        match &transactional_id {
            Some(tid) if shard.pending.get(tid) == Some(&id) => {
                shard.pending.remove(tid);
            }
            Some(_) => {}
            None => shard.snapshot_in_flight = false,
        }
        shard.apply(flight.record);
        if let OnAcknowledged::Reply { token, answer } = flight.waiter {
            self.ready.replies.push(Reply { token, answer });
        }
        if let Some(tid) = &transactional_id {
            self.owe_markers(flight.partition, tid);
        }
        self.maybe_snapshot(flight.partition);
    }

    /// The proposal will never be acknowledged (leadership lost, log
    /// truncated): the view is unchanged and its waiter is answered
    /// NOT_COORDINATOR. A transaction still in a Prepare state (its
    /// completion failed) asks for its markers again.
    pub fn on_proposal_failed(&mut self, id: ProposalId) {
        let Some(flight) = self.in_flight.remove(&id) else {
            return;
        };
        let InFlight {
            partition,
            record,
            waiter,
        } = flight;
        self.fail_waiter(waiter);
        let Some(shard) = self.partitions.get_mut(&partition) else {
            return;
        };
        match record.transactional_id() {
            Some(tid) => {
                if shard.pending.get(tid) == Some(&id) {
                    shard.pending.remove(tid);
                }
                self.owe_markers(partition, tid);
            }
            // Not written: tried again at the next tick, not at once (the
            // replica may be losing its leadership, failing every append).
            None => shard.snapshot_in_flight = false,
        }
        // A drain waiting for this proposal ends now.
        if self
            .partitions
            .get(&partition)
            .is_some_and(|s| s.drain.is_draining())
        {
            self.maybe_snapshot(partition);
        }
    }

    /// A proposal that will never be acknowledged: whoever waits for it
    /// is answered NOT_COORDINATOR.
    fn fail_waiter(&mut self, waiter: OnAcknowledged) {
        if let OnAcknowledged::Reply { token, answer } = waiter {
            let answer = answer.into_failed(TxnError::NotCoordinator);
            self.ready.replies.push(Reply { token, answer });
        }
    }

    /// Proposes `partition`'s view as one snapshot if it
    /// [wants one](HostedPartition::wants_snapshot) and none of its
    /// proposals is in flight; if some are, later proposals wait behind
    /// the snapshot until they are settled. What waited follows it.
    fn maybe_snapshot(&mut self, partition: StatePartition) {
        let threshold = self.config.snapshot_after_records;
        let busy = self.in_flight.values().any(|f| f.partition == partition);
        let Some(shard) = self.partitions.get_mut(&partition) else {
            return;
        };
        let due = shard.wants_snapshot(threshold);
        let (now, released) = shard.drain.decide(due, busy);
        if now {
            shard.snapshot_in_flight = true;
            let record = Record::Snapshot {
                transactions: shard.transactions.clone(),
            };
            let mut out = Effects::default();
            out.propose(record, OnAcknowledged::Nothing);
            self.flush(partition, out);
        }
        for (proposal, flight) in released {
            self.emit(proposal, flight);
        }
    }

    /// Asks for the markers of `transactional_id` if it is in a Prepare
    /// state with nothing in flight. A Prepare state with no partition
    /// needs no marker: it completes at once.
    fn owe_markers(&mut self, partition: StatePartition, transactional_id: &str) {
        let Some(shard) = self.partitions.get(&partition) else {
            return;
        };
        if shard.loading || shard.pending.contains_key(transactional_id) {
            return;
        }
        let Some(metadata) = shard.transactions.get(transactional_id) else {
            return;
        };
        if !metadata.state.is_prepare() {
            return;
        }
        if metadata.partitions.is_empty() {
            if let Ok(next) = metadata.complete(metadata.last_update_ms) {
                let record = Record::Metadata {
                    transactional_id: transactional_id.to_owned(),
                    metadata: next,
                };
                let mut out = Effects::default();
                out.propose(record, OnAcknowledged::Nothing);
                self.flush(partition, out);
            }
            return;
        }
        let markers = shard.markers_for(partition, transactional_id, metadata);
        self.ready.markers.push(markers);
    }

    /// Moves proposals into the ready output, numbering them and marking
    /// their transactional ids pending; a draining partition's wait behind
    /// its snapshot (pending all the same).
    pub(super) fn flush(&mut self, partition: StatePartition, out: Effects) {
        for pending in out.proposals {
            let Some(shard) = self.partitions.get_mut(&partition) else {
                self.fail_waiter(pending.waiter);
                continue;
            };
            self.next_proposal += 1;
            let id = ProposalId(self.next_proposal);
            let transactional_id = pending.record.transactional_id();
            if let Some(tid) = transactional_id {
                shard.pending.insert(tid.to_owned(), id);
            }
            let proposal = Proposal {
                id,
                partition,
                entry: encode_entry(std::slice::from_ref(&pending.record)),
                compacts: transactional_id.is_none(),
            };
            let flight = InFlight {
                partition,
                record: pending.record,
                waiter: pending.waiter,
            };
            if let Some((proposal, flight)) = shard.drain.pass((proposal, flight)) {
                self.emit(proposal, flight);
            }
        }
    }

    /// Puts a numbered proposal in the ready output: it is in flight.
    fn emit(&mut self, proposal: Proposal, flight: InFlight) {
        self.in_flight.insert(proposal.id, flight);
        self.ready.proposals.push(proposal);
    }

    /// Answers a request at once.
    pub(super) fn answer(&mut self, token: RequestToken, answer: Answer) {
        self.ready.replies.push(Reply { token, answer });
    }

    /// The active partition of a transactional id, or why it cannot be
    /// served here.
    pub(super) fn active(
        &mut self,
        transactional_id: &str,
    ) -> Result<(StatePartition, &mut HostedPartition), TxnError> {
        if transactional_id.is_empty() || transactional_id.len() > MAX_STRING_BYTES {
            return Err(TxnError::InvalidRequest);
        }
        let partition = self.partition_for(transactional_id);
        let shard = self
            .partitions
            .get_mut(&partition)
            .ok_or(TxnError::NotCoordinator)?;
        if shard.loading {
            return Err(TxnError::LoadInProgress);
        }
        Ok((partition, shard))
    }

    /// Drives time: aborts transactions past their timeout (fencing their
    /// producer) every `abort_check_interval_ms`, and forgets expired idle
    /// transactional ids every `expiry_check_interval_ms`. Both only
    /// propose records; nothing changes until they are acknowledged.
    pub fn tick(&mut self, now_ms: u64) {
        if now_ms >= self.next_abort_check_ms {
            self.next_abort_check_ms = now_ms.saturating_add(self.config.abort_check_interval_ms);
            self.abort_timed_out(millis(now_ms));
        }
        if now_ms >= self.next_expiry_check_ms {
            self.next_expiry_check_ms = now_ms.saturating_add(self.config.expiry_check_interval_ms);
            self.expire_idle(millis(now_ms));
        }
        // A partition whose last proposal failed, or that loaded a long
        // log, has no acknowledgement to trigger its snapshot.
        let hosted: Vec<StatePartition> = self.partitions.keys().copied().collect();
        for partition in hosted {
            self.maybe_snapshot(partition);
        }
    }

    /// Kafka's `abortTimedOutTransactions`: an Ongoing transaction started
    /// more than its timeout ago is aborted with the epoch bumped, so the
    /// late producer is fenced.
    fn abort_timed_out(&mut self, now: i64) {
        let mut outboxes = Vec::new();
        for (&partition, shard) in self.partitions.iter().filter(|(_, s)| !s.loading) {
            let mut out = Effects::default();
            for (transactional_id, metadata) in &shard.transactions {
                let expired = metadata.state == TxnState::Ongoing
                    && metadata
                        .start_ms
                        .saturating_add(i64::from(metadata.timeout_ms))
                        < now;
                if !expired || shard.pending.contains_key(transactional_id) {
                    continue;
                }
                if let Ok(next) = metadata.fence_and_abort(now) {
                    let record = Record::Metadata {
                        transactional_id: transactional_id.clone(),
                        metadata: next,
                    };
                    out.propose(record, OnAcknowledged::Nothing);
                }
            }
            outboxes.push((partition, out));
        }
        for (partition, out) in outboxes {
            self.flush(partition, out);
        }
    }

    /// An idle transactional id (Empty, CompleteCommit, CompleteAbort)
    /// untouched for `transactional.id.expiration.ms` is forgotten.
    fn expire_idle(&mut self, now: i64) {
        let expiration =
            i64::try_from(self.config.transactional_id_expiration_ms).unwrap_or(i64::MAX);
        let mut outboxes = Vec::new();
        for (&partition, shard) in self.partitions.iter().filter(|(_, s)| !s.loading) {
            let mut out = Effects::default();
            for (transactional_id, metadata) in &shard.transactions {
                let idle = metadata.last_update_ms.saturating_add(expiration) <= now;
                if !idle || shard.pending.contains_key(transactional_id) {
                    continue;
                }
                // Only the states Kafka lets expire may become Dead.
                if metadata.dead().is_ok() {
                    let record = Record::Tombstone {
                        transactional_id: transactional_id.clone(),
                    };
                    out.propose(record, OnAcknowledged::Nothing);
                }
            }
            outboxes.push((partition, out));
        }
        for (partition, out) in outboxes {
            self.flush(partition, out);
        }
    }

    /// The data partitions of a transaction have their markers: complete
    /// it. A report that no longer matches (another epoch, already
    /// complete, a proposal in flight) is ignored.
    pub fn on_markers_written(
        &mut self,
        partition: StatePartition,
        transactional_id: &str,
        producer_id: i64,
        epoch: i16,
        now_ms: u64,
    ) {
        let Some(shard) = self.partitions.get(&partition) else {
            return;
        };
        if shard.loading || shard.pending.contains_key(transactional_id) {
            return;
        }
        let Some(metadata) = shard.transactions.get(transactional_id) else {
            return;
        };
        if !metadata.state.is_prepare()
            || metadata.producer_id != producer_id
            || metadata.epoch != epoch
        {
            return;
        }
        let Ok(next) = metadata.complete(millis(now_ms)) else {
            return;
        };
        let record = Record::Metadata {
            transactional_id: transactional_id.to_owned(),
            metadata: next,
        };
        let mut out = Effects::default();
        out.propose(record, OnAcknowledged::Nothing);
        self.flush(partition, out);
    }
}
