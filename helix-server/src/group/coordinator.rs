//! The coordinator as a deterministic state machine, etcd-raft style: the
//! host feeds requests (with their negotiated version and a token), time
//! (`tick(now_ms)`), proposal outcomes and replayed entries; it collects
//! replies and proposals with [`Coordinator::take_ready`]. No I/O, no
//! clock, no threads.
//!
//! Each coordinator partition is a [`HostedPartition`] that is absent (another node
//! coordinates it: NOT_COORDINATOR), loading (COORDINATOR_LOAD_IN_PROGRESS)
//! or active. Its view (offsets, stored group records) changes only when a
//! record is acknowledged or replayed.

use std::collections::BTreeMap;

use kafka_protocol::messages::{
    DeleteGroupsRequest, DescribeGroupsRequest, HeartbeatRequest, JoinGroupRequest,
    LeaveGroupRequest, ListGroupsRequest, OffsetCommitRequest, OffsetDeleteRequest,
    OffsetFetchRequest, SyncGroupRequest, TxnOffsetCommitRequest,
};

use super::GroupConfig;
use super::classic::ClassicGroup;
use super::error::GroupError;
use super::record::{OffsetRecord, Record, encode_entry};
use super::response::{Effects, OnAcknowledged, PendingProposal, Proposal, Ready};
use super::types::LoggedEntry;
use super::types::{
    ClientInfo, CoordinatorPartition, ProposalId, ReplyTo, RequestToken, TxnProducer,
    coordinator_partition_for,
};
use crate::replica::internal_drain::SnapshotDrain;

/// A request of one of the coordinator's APIs, as decoded by the broker.
#[derive(Debug, Clone)]
pub enum GroupRequest {
    JoinGroup(JoinGroupRequest),
    SyncGroup(SyncGroupRequest),
    Heartbeat(HeartbeatRequest),
    LeaveGroup(LeaveGroupRequest),
    OffsetCommit(OffsetCommitRequest),
    OffsetFetch(OffsetFetchRequest),
    ListGroups(ListGroupsRequest),
    DescribeGroups(DescribeGroupsRequest),
    DeleteGroups(DeleteGroupsRequest),
    OffsetDelete(OffsetDeleteRequest),
    TxnOffsetCommit(TxnOffsetCommitRequest),
}

/// One coordinator partition hosted on this node.
#[derive(Debug)]
pub struct HostedPartition {
    /// Replaying the partition's log: requests get COORDINATOR_LOAD_IN_PROGRESS.
    pub loading: bool,
    /// The leadership epoch (Raft term) this shard was loaded for; part of
    /// every member id it hands out, so ids never repeat across failovers.
    pub epoch: u64,
    next_member: u64,
    pub groups: BTreeMap<String, ClassicGroup>,
    /// An offset-expiry proposal is outstanding: do not propose another.
    pub retention_in_flight: bool,
    /// Records acknowledged or replayed since the last snapshot entry.
    pub records_since_snapshot: u64,
    pub snapshot_in_flight: bool,
    /// Proposals waiting behind a due snapshot until those in flight are
    /// settled, so a steady stream of commits cannot keep the log from ever
    /// being snapshotted.
    drain: SnapshotDrain<PendingProposal>,
    /// The log offset after the last entry applied (acknowledged, replayed
    /// or read back): the host reads markers on from here.
    pub next_offset: i64,
}

impl HostedPartition {
    fn new() -> Self {
        Self {
            loading: true,
            epoch: 0,
            next_member: 0,
            groups: BTreeMap::new(),
            retention_in_flight: false,
            records_since_snapshot: 0,
            snapshot_in_flight: false,
            drain: SnapshotDrain::default(),
            next_offset: 0,
        }
    }

    /// A member id unique within the partition's history: client id (cut
    /// to 64 bytes), the leadership epoch and a counter.
    pub fn new_member_id(&mut self, client_id: &str) -> String {
        let mut cut = client_id.len().min(64);
        while !client_id.is_char_boundary(cut) {
            cut -= 1;
        }
        self.next_member += 1;
        format!(
            "{}-{:x}-{:x}",
            &client_id[..cut],
            self.epoch,
            self.next_member
        )
    }

    /// The whole durable view as records: replaying them alone rebuilds it.
    pub fn snapshot(&self) -> Vec<Record> {
        let mut records = Vec::new();
        for group in self.groups.values() {
            if let Some(stored) = &group.stored {
                records.push(Record::Group(stored.clone()));
            }
            for ((topic, partition), committed) in &group.offsets {
                records.push(Record::Offset(OffsetRecord {
                    group: group.id.clone(),
                    topic: topic.clone(),
                    partition: *partition,
                    offset: committed.offset,
                    leader_epoch: committed.leader_epoch,
                    metadata: committed.metadata.clone(),
                    commit_timestamp_ms: committed.commit_timestamp_ms,
                    expire_timestamp_ms: committed.expire_timestamp_ms,
                }));
            }
        }
        records
    }

    /// Applies a durable record to the view.
    pub fn apply(&mut self, record: &Record, now_ms: u64) {
        self.records_since_snapshot = self.records_since_snapshot.saturating_add(1);
        let name = record.group();
        let group = self
            .groups
            .entry(name.to_owned())
            .or_insert_with(|| ClassicGroup::new(name, now_ms));
        group.apply(record);
        let forgotten = matches!(record, Record::GroupTombstone { .. })
            && group.members.is_empty()
            && group.pending_members.is_empty();
        if forgotten {
            self.groups.remove(name);
        }
    }
}

/// A proposal on its way through Raft.
#[derive(Debug)]
struct InFlight {
    partition: CoordinatorPartition,
    records: Vec<Record>,
    producer: Option<TxnProducer>,
    waiter: OnAcknowledged,
}

/// A DeleteGroups request waiting for its groups' tombstones (`admin.rs`
/// answers it once none is outstanding).
#[derive(Debug)]
pub struct DeleteBatch {
    pub(super) reply: ReplyTo,
    pub(super) results: Vec<kafka_protocol::messages::delete_groups_response::DeletableGroupResult>,
    pub(super) outstanding: usize,
}

/// The group coordinator of one node.
#[derive(Debug)]
pub struct Coordinator {
    pub(super) config: GroupConfig,
    pub(super) shards: BTreeMap<CoordinatorPartition, HostedPartition>,
    in_flight: BTreeMap<ProposalId, InFlight>,
    pub(super) delete_batches: BTreeMap<u64, DeleteBatch>,
    pub(super) next_batch: u64,
    next_proposal: u64,
    next_retention_check_ms: u64,
    ready: Ready,
}

impl Coordinator {
    pub fn new(config: GroupConfig) -> Self {
        Self {
            config,
            shards: BTreeMap::new(),
            in_flight: BTreeMap::new(),
            delete_batches: BTreeMap::new(),
            next_batch: 0,
            next_proposal: 0,
            next_retention_check_ms: 0,
            ready: Ready::default(),
        }
    }

    /// The coordinator partition that owns `group_id` (FindCoordinator
    /// answers with the leader of this partition).
    pub fn partition_for(&self, group_id: &str) -> CoordinatorPartition {
        coordinator_partition_for(group_id, self.config.coordinator_partitions)
    }

    /// Everything produced since the last call.
    pub fn take_ready(&mut self) -> Ready {
        std::mem::take(&mut self.ready)
    }

    /// Starts (re)building a partition's view: on becoming its leader, after
    /// a restart, or after a Raft truncation removed entries it had applied.
    /// Whatever the partition had in memory is dropped and its waiting
    /// requests are answered NOT_COORDINATOR.
    pub fn begin_load(&mut self, partition: CoordinatorPartition) {
        self.unload(partition);
        self.shards.insert(partition, HostedPartition::new());
    }

    /// Replays one entry of a loading partition's log, in log order.
    /// A garbage entry is refused whole and changes nothing.
    #[cfg(test)]
    pub fn replay(
        &mut self,
        partition: CoordinatorPartition,
        entry: &[u8],
        now_ms: u64,
    ) -> Result<(), GroupError> {
        let at = self.shards.get(&partition).map_or(0, |s| s.next_offset);
        let logged = LoggedEntry::Records {
            entry,
            producer: None,
        };
        self.replay_at(partition, at, logged, now_ms)
    }

    /// Replays the entry at log offset `at` of a loading partition, in log
    /// order: records (pending ones for a transactional batch) or a marker.
    pub fn replay_at(
        &mut self,
        partition: CoordinatorPartition,
        at: i64,
        logged: LoggedEntry<'_>,
        now_ms: u64,
    ) -> Result<(), GroupError> {
        let shard = self
            .shards
            .get_mut(&partition)
            .filter(|s| s.loading)
            .ok_or(GroupError::NotCoordinator)?;
        let result = shard.apply_logged(at, logged, now_ms);
        // A refused entry still takes its place in the log.
        shard.next_offset = shard.next_offset.max(at.saturating_add(1));
        result
    }

    /// Ends loading: live group state is rebuilt from the stored records
    /// and the partition serves requests for leadership `epoch`.
    #[cfg(test)]
    pub fn finish_load(&mut self, partition: CoordinatorPartition, epoch: u64, now_ms: u64) {
        self.finish_load_at(partition, epoch, None, now_ms);
    }

    /// [`Self::finish_load`] for a log replayed up to offset `end`.
    pub fn finish_load_at(
        &mut self,
        partition: CoordinatorPartition,
        epoch: u64,
        end: Option<i64>,
        now_ms: u64,
    ) {
        if let Some(shard) = self.shards.get_mut(&partition) {
            if let Some(end) = end {
                shard.next_offset = shard.next_offset.max(end);
            }
            shard.loading = false;
            shard.epoch = epoch;
            for group in shard.groups.values_mut() {
                group.restore(now_ms);
            }
        }
    }

    /// Stops coordinating a partition (leadership lost, shutdown): every
    /// waiting request is answered NOT_COORDINATOR.
    pub fn unload(&mut self, partition: CoordinatorPartition) {
        let failed: Vec<ProposalId> = self
            .in_flight
            .iter()
            .filter(|(_, f)| f.partition == partition)
            .map(|(id, _)| *id)
            .collect();
        for id in failed {
            self.on_proposal_failed(id, 0);
        }
        let held = self
            .shards
            .get_mut(&partition)
            .map(|s| s.drain.take_held())
            .unwrap_or_default();
        for pending in held {
            self.settle(
                partition,
                pending.waiter,
                Err(GroupError::NotCoordinator),
                0,
            );
        }
        let Some(shard) = self.shards.remove(&partition) else {
            return;
        };
        let mut out = Effects::default();
        let code = GroupError::NotCoordinator.code();
        for group in shard.groups.into_values() {
            for member in group.members.into_values() {
                if let Some(reply) = member.awaiting_join {
                    out.join_error(reply, code, &member.id);
                }
                if let Some(reply) = member.awaiting_sync {
                    out.sync_error(reply, code);
                }
            }
        }
        self.flush(partition, out);
    }

    /// Handles one request. Its reply comes out of [`Self::take_ready`]
    /// now, or later once the records it depends on are acknowledged or
    /// the rebalance it waits for completes.
    pub fn handle(
        &mut self,
        token: RequestToken,
        version: i16,
        client: &ClientInfo,
        request: GroupRequest,
        now_ms: u64,
    ) {
        let reply = ReplyTo { token, version };
        match request {
            GroupRequest::JoinGroup(request) => self.join_group(reply, client, request, now_ms),
            GroupRequest::SyncGroup(request) => self.sync_group(reply, request, now_ms),
            GroupRequest::Heartbeat(request) => self.heartbeat(reply, request, now_ms),
            GroupRequest::LeaveGroup(request) => self.leave_group(reply, request, now_ms),
            GroupRequest::OffsetCommit(request) => self.offset_commit(reply, request, now_ms),
            GroupRequest::OffsetFetch(request) => self.offset_fetch(reply, request),
            GroupRequest::ListGroups(request) => self.list_groups(reply, request),
            GroupRequest::DescribeGroups(request) => self.describe_groups(reply, request),
            GroupRequest::DeleteGroups(request) => self.delete_groups(reply, request, now_ms),
            GroupRequest::OffsetDelete(request) => self.offset_delete(reply, request, now_ms),
            GroupRequest::TxnOffsetCommit(request) => {
                self.txn_offset_commit(reply, request, now_ms)
            }
        }
    }

    /// The proposal is durable on a majority: apply its records to the view
    /// and answer what waited for it.
    #[cfg(test)]
    pub fn on_acknowledged(&mut self, id: ProposalId, now_ms: u64) {
        self.on_appended(id, None, now_ms);
    }

    /// [`Self::on_acknowledged`] for a proposal stored at log offset `at`
    /// (`None`: right after what the view holds).
    pub fn on_appended(&mut self, id: ProposalId, at: Option<i64>, now_ms: u64) {
        let Some(flight) = self.in_flight.remove(&id) else {
            return;
        };
        let Some(shard) = self.shards.get_mut(&flight.partition) else {
            return;
        };
        let at = at.unwrap_or(shard.next_offset);
        shard.next_offset = shard.next_offset.max(at.saturating_add(1));
        let producer = flight.producer.map(|p| p.producer_id);
        shard.apply_records(&flight.records, producer, at, now_ms);
        self.settle(flight.partition, flight.waiter, Ok(()), now_ms);
        self.end_drain(flight.partition);
    }

    /// A draining partition whose last proposal in flight just settled
    /// takes its snapshot now (or gives up on it) and lets what waited go.
    fn end_drain(&mut self, partition: CoordinatorPartition) {
        let draining = self
            .shards
            .get(&partition)
            .is_some_and(|s| s.drain.is_draining());
        if draining && !self.has_in_flight(partition) {
            self.snapshot_partitions();
        }
    }

    /// Whether a proposal of `partition` awaits its outcome (its place in
    /// the log is not known yet).
    pub fn has_in_flight(&self, partition: CoordinatorPartition) -> bool {
        self.in_flight.values().any(|f| f.partition == partition)
    }

    /// The proposal will never be acknowledged (leadership lost, log
    /// truncated): nothing is applied and its waiters are answered.
    pub fn on_proposal_failed(&mut self, id: ProposalId, now_ms: u64) {
        self.on_proposal_refused(id, GroupError::NotCoordinator, now_ms);
    }

    /// [`Self::on_proposal_failed`] with the partition leader's reason,
    /// answered as is (a TxnOffsetCommit of a fenced epoch is
    /// INVALID_PRODUCER_EPOCH, as Kafka answers its append error).
    pub fn on_proposal_refused(&mut self, id: ProposalId, error: GroupError, now_ms: u64) {
        if let Some(flight) = self.in_flight.remove(&id) {
            self.settle(flight.partition, flight.waiter, Err(error), now_ms);
            self.end_drain(flight.partition);
        }
    }

    fn settle(
        &mut self,
        partition: CoordinatorPartition,
        waiter: OnAcknowledged,
        result: Result<(), GroupError>,
        now_ms: u64,
    ) {
        let mut out = Effects::default();
        match waiter {
            OnAcknowledged::Nothing => {}
            OnAcknowledged::Retention => {
                if let Some(shard) = self.shards.get_mut(&partition) {
                    shard.retention_in_flight = false;
                }
            }
            OnAcknowledged::Snapshot => {
                if let Some(shard) = self.shards.get_mut(&partition) {
                    shard.snapshot_in_flight = false;
                    // Acknowledged: the log now starts over from it. Failed:
                    // try again at the next tick.
                    shard.records_since_snapshot = match result {
                        Ok(()) => 0,
                        Err(_) => u64::MAX,
                    };
                }
            }
            OnAcknowledged::Response {
                reply,
                mut response,
            } => {
                if let Err(error) = result {
                    response.fail_validated(error.code());
                }
                out.reply(reply, response);
            }
            OnAcknowledged::Assignment { group, generation } => {
                self.assignment_settled(partition, &group, generation, result, now_ms, &mut out);
            }
            OnAcknowledged::StaticRejoin(rejoin) => {
                self.static_rejoin_settled(partition, &rejoin, result, now_ms, &mut out);
            }
            OnAcknowledged::GroupDeleted {
                batch,
                index,
                group,
            } => {
                self.group_delete_settled(partition, batch, index, &group, result, &mut out);
            }
        }
        self.flush(partition, out);
    }

    /// Drives time: session and rebalance timeouts, the initial rebalance
    /// delay, and offset retention.
    pub fn tick(&mut self, now_ms: u64) {
        let mut outboxes = Vec::new();
        for (&partition, shard) in self.shards.iter_mut().filter(|(_, s)| !s.loading) {
            let mut out = Effects::default();
            for group in shard.groups.values_mut() {
                group.on_tick(&self.config, now_ms, &mut out);
            }
            outboxes.push((partition, out));
        }
        for (partition, out) in outboxes {
            self.flush(partition, out);
        }
        self.snapshot_partitions();
        if now_ms >= self.next_retention_check_ms {
            self.next_retention_check_ms =
                now_ms.saturating_add(self.config.offsets_retention_check_interval_ms);
            self.expire_offsets(now_ms);
        }
    }

    /// Proposes a snapshot entry for every partition that has gathered
    /// enough records since its last one. Only when nothing else of the
    /// partition is in flight: everything before the snapshot in the log is
    /// then in the view, so deleting the log before it loses nothing. A
    /// partition with proposals in flight drains first (`draining`): later
    /// proposals wait behind the snapshot.
    fn snapshot_partitions(&mut self) {
        let threshold = self.config.snapshot_after_records.max(1);
        let busy: std::collections::BTreeSet<CoordinatorPartition> =
            self.in_flight.values().map(|f| f.partition).collect();
        let mut snapshots = Vec::new();
        let mut released = Vec::new();
        for (&partition, shard) in self.shards.iter_mut() {
            // Write amplification stays below 2x: a snapshot is written only
            // once the log since the last one is at least as long as it.
            let live = || -> u64 {
                shard
                    .groups
                    .values()
                    .map(|g| g.offsets.len() as u64 + u64::from(g.stored.is_some()))
                    .sum()
            };
            // Pending transactional offsets wait for a marker further on
            // in the log; a snapshot holds committed state only, so none
            // is taken (and nothing deleted) while any is pending.
            let due = !shard.loading
                && !shard.snapshot_in_flight
                && shard.records_since_snapshot >= threshold
                && !shard.any_pending()
                && shard.records_since_snapshot >= live();
            let (now, held) = shard.drain.decide(due, busy.contains(&partition));
            if now {
                shard.snapshot_in_flight = true;
                shard.records_since_snapshot = 0;
                snapshots.push((partition, shard.snapshot()));
            }
            if !held.is_empty() {
                released.push((partition, held));
            }
        }
        for (partition, records) in snapshots {
            let snapshot = PendingProposal {
                records,
                producer: None,
                waiter: OnAcknowledged::Snapshot,
            };
            self.propose(partition, vec![snapshot]);
        }
        for (partition, held) in released {
            self.propose(partition, held);
        }
    }

    /// Moves an outbox into the ready output, numbering its proposals; a
    /// draining partition's proposals wait behind its snapshot.
    pub(super) fn flush(&mut self, partition: CoordinatorPartition, out: Effects) {
        self.ready.replies.extend(out.replies);
        let proposals = match self.shards.get_mut(&partition) {
            Some(shard) => out
                .proposals
                .into_iter()
                .filter_map(|p| shard.drain.pass(p))
                .collect(),
            None => out.proposals,
        };
        self.propose(partition, proposals);
    }

    /// Numbers `proposals` and puts them in the ready output, in order.
    fn propose(&mut self, partition: CoordinatorPartition, proposals: Vec<PendingProposal>) {
        for pending in proposals {
            self.next_proposal += 1;
            let id = ProposalId(self.next_proposal);
            let entry = encode_entry(&pending.records);
            let compacts = matches!(pending.waiter, OnAcknowledged::Snapshot);
            self.ready.proposals.push(Proposal {
                id,
                partition,
                entry,
                compacts,
                producer: pending.producer,
            });
            self.in_flight.insert(
                id,
                InFlight {
                    partition,
                    records: pending.records,
                    producer: pending.producer,
                    waiter: pending.waiter,
                },
            );
        }
    }

    /// Moves replies that need no proposal into the ready output.
    pub(super) fn ready_replies(&mut self, out: Effects) {
        debug_assert!(out.proposals.is_empty(), "proposals need their partition");
        self.ready.replies.extend(out.replies);
    }

    /// The active shard of a group, or why the group cannot be served here.
    pub(super) fn shard_of(
        &mut self,
        group_id: &str,
    ) -> Result<(CoordinatorPartition, &mut HostedPartition), GroupError> {
        if group_id.is_empty() || group_id.len() > self.config.max_group_id_bytes {
            return Err(GroupError::InvalidGroupId);
        }
        let partition = self.partition_for(group_id);
        let shard = self
            .shards
            .get_mut(&partition)
            .ok_or(GroupError::NotCoordinator)?;
        if shard.loading {
            return Err(GroupError::LoadInProgress);
        }
        Ok((partition, shard))
    }
}
