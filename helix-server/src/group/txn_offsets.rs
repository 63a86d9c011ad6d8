//! Offsets committed inside a transaction (TxnOffsetCommit, KIP-98/447)
//! and the markers that end them, as Kafka 3.9's `GroupMetadata` keeps
//! them (`pendingTransactionalOffsetCommits`).
//!
//! A TxnOffsetCommit's records are appended to the group's partition as a
//! transactional batch of the producer. Once acknowledged (or replayed)
//! they are *pending*: OffsetFetch does not answer them, and with
//! `require_stable` it answers UNSTABLE_OFFSET_COMMIT for their partitions.
//! The transaction coordinator's marker in the same partition ends them:
//! COMMIT makes them the committed offsets, ABORT drops them. Everything
//! here is applied in log order from the log alone (acknowledged entries,
//! markers read back by the host, replay), so a new leader rebuilds the
//! same pending and committed offsets.
//!
//! Kafka's rule when both kinds touch one partition: a pending offset
//! becomes the committed one only if no commit appended after it got there
//! first (`completePendingTxnOffsetCommit`, `olderThan`). So a plain
//! OffsetCommit applied after a pending offset supersedes it, and a
//! transaction committing supersedes other producers' pending offsets
//! appended before its own.

use kafka_protocol::messages::txn_offset_commit_response::{
    TxnOffsetCommitResponsePartition, TxnOffsetCommitResponseTopic,
};
use kafka_protocol::messages::{TxnOffsetCommitRequest, TxnOffsetCommitResponse};

use super::classic::{ClassicGroup, CommittedOffset, GroupState};
use super::coordinator::{Coordinator, HostedPartition};
use super::error::{GroupError, NONE};
use super::offsets::{INVALID_TOPIC, MAX_TOPIC_NAME_BYTES};
use super::record::{OffsetRecord, Record, decode_entry};
use super::response::{Effects, GroupResponse, OnAcknowledged};
use super::types::{CoordinatorPartition, LoggedEntry, ReplyTo, TxnProducer};

use super::classic::PendingOffset;

impl ClassicGroup {
    /// A plain commit of `key` was applied: every pending offset of it
    /// (appended before) loses to it.
    pub fn supersede_pending(&mut self, key: &(String, i32)) {
        for offsets in self.pending_txn.values_mut() {
            if let Some(pending) = offsets.get_mut(key) {
                pending.superseded = true;
            }
        }
    }

    fn add_pending(&mut self, producer_id: i64, record: &OffsetRecord, at: i64) {
        let pending = PendingOffset {
            committed: CommittedOffset::from(record),
            at,
            superseded: false,
        };
        self.pending_txn
            .entry(producer_id)
            .or_default()
            .insert((record.topic.clone(), record.partition), pending);
    }

    /// The producer's transaction ended: its pending offsets become the
    /// committed ones (commit) or are dropped (abort).
    fn complete_txn(&mut self, producer_id: i64, commit: bool) {
        let Some(offsets) = self.pending_txn.remove(&producer_id) else {
            return;
        };
        if !commit {
            return;
        }
        for (key, pending) in offsets {
            if pending.superseded {
                continue;
            }
            for others in self.pending_txn.values_mut() {
                if let Some(other) = others.get_mut(&key)
                    && other.at < pending.at
                {
                    other.superseded = true;
                }
            }
            self.offsets.insert(key, pending.committed);
        }
    }
}

impl From<&OffsetRecord> for CommittedOffset {
    fn from(record: &OffsetRecord) -> Self {
        CommittedOffset {
            offset: record.offset,
            leader_epoch: record.leader_epoch,
            metadata: record.metadata.clone(),
            commit_timestamp_ms: record.commit_timestamp_ms,
            expire_timestamp_ms: record.expire_timestamp_ms,
        }
    }
}

impl HostedPartition {
    /// Applies one logged entry at log offset `at`, in log order.
    pub(super) fn apply_logged(
        &mut self,
        at: i64,
        logged: LoggedEntry<'_>,
        now_ms: u64,
    ) -> Result<(), GroupError> {
        self.next_offset = self.next_offset.max(at.saturating_add(1));
        match logged {
            LoggedEntry::Records { entry, producer } => {
                let records = decode_entry(entry)?;
                self.apply_records(&records, producer, at, now_ms);
            }
            LoggedEntry::Marker {
                producer_id,
                commit,
            } => self.apply_marker(producer_id, commit),
        }
        Ok(())
    }

    /// Applies durable records at log offset `at`: committed ones, or
    /// pending ones of the transactional `producer`.
    pub(super) fn apply_records(
        &mut self,
        records: &[Record],
        producer: Option<i64>,
        at: i64,
        now_ms: u64,
    ) {
        let Some(producer_id) = producer else {
            for record in records {
                self.apply(record, now_ms);
            }
            return;
        };
        for record in records {
            // A transaction carries offsets only; anything else in a
            // transactional batch is not this coordinator's and is skipped.
            let Record::Offset(offset) = record else {
                continue;
            };
            self.records_since_snapshot = self.records_since_snapshot.saturating_add(1);
            self.groups
                .entry(offset.group.clone())
                .or_insert_with(|| ClassicGroup::new(&offset.group, now_ms))
                .add_pending(producer_id, offset, at);
        }
    }

    /// A marker of `producer_id` ends its transaction in every group of the
    /// partition; a producer with nothing pending here changes nothing.
    fn apply_marker(&mut self, producer_id: i64, commit: bool) {
        for group in self.groups.values_mut() {
            group.complete_txn(producer_id, commit);
        }
    }

    /// Whether any transaction holds offsets pending in this partition (a
    /// snapshot waits until none does: it holds committed state only).
    pub(super) fn any_pending(&self) -> bool {
        self.groups.values().any(|g| !g.pending_txn.is_empty())
    }
}

impl Coordinator {
    /// TxnOffsetCommit: validated as Kafka's `handleTxnCommitOffsets`
    /// (a missing group is created Empty; v3+ member, instance and
    /// generation checks), then its offsets are proposed as a
    /// transactional entry of the producer and answered once durable.
    pub(super) fn txn_offset_commit(
        &mut self,
        reply: ReplyTo,
        request: TxnOffsetCommitRequest,
        now_ms: u64,
    ) {
        let partition = self.partition_for(&request.group_id.0);
        let verdict = self.validate_txn_commit(&request, now_ms);
        let max_metadata = self.config.max_offset_metadata_bytes;
        let mut records = Vec::new();
        let mut response = TxnOffsetCommitResponse::default();
        for topic in &request.topics {
            let mut answered =
                TxnOffsetCommitResponseTopic::default().with_name(topic.name.clone());
            for p in &topic.partitions {
                let metadata_len = p.committed_metadata.as_ref().map_or(0, |m| m.len());
                let code = match verdict {
                    Err(error) => txn_commit_code(error, reply.version),
                    Ok(())
                        if topic.name.0.is_empty() || topic.name.0.len() > MAX_TOPIC_NAME_BYTES =>
                    {
                        INVALID_TOPIC
                    }
                    Ok(()) if metadata_len > max_metadata => {
                        GroupError::OffsetMetadataTooLarge.code()
                    }
                    Ok(()) => {
                        records.push(Record::Offset(OffsetRecord {
                            group: request.group_id.0.to_string(),
                            topic: topic.name.0.to_string(),
                            partition: p.partition_index,
                            offset: p.committed_offset,
                            leader_epoch: p.committed_leader_epoch,
                            metadata: p.committed_metadata.as_ref().map(|m| m.to_string()),
                            commit_timestamp_ms: now_ms,
                            expire_timestamp_ms: None,
                        }));
                        NONE
                    }
                };
                answered.partitions.push(
                    TxnOffsetCommitResponsePartition::default()
                        .with_partition_index(p.partition_index)
                        .with_error_code(code),
                );
            }
            response.topics.push(answered);
        }
        let response = GroupResponse::TxnOffsetCommit(response);
        let mut out = Effects::default();
        if records.is_empty() {
            out.reply(reply, response);
        } else {
            let producer = TxnProducer {
                producer_id: request.producer_id.0,
                epoch: request.producer_epoch,
            };
            out.propose_for(
                records,
                Some(producer),
                OnAcknowledged::Response { reply, response },
            );
        }
        self.flush(partition, out);
    }

    /// Kafka's `validateOffsetCommit` with `isTransactional`: no
    /// REBALANCE_IN_PROGRESS, and a non-member may commit into a non-empty
    /// group (v0-v2 carry no member).
    fn validate_txn_commit(
        &mut self,
        request: &TxnOffsetCommitRequest,
        now_ms: u64,
    ) -> Result<(), GroupError> {
        let group_id = request.group_id.0.as_str();
        let (_, shard) = self.shard_of(group_id)?;
        if request.producer_id.0 < 0 || request.producer_epoch < 0 {
            return Err(GroupError::InvalidRequest);
        }
        let generation = request.generation_id;
        let member_id = request.member_id.as_str();
        let instance_id = request.group_instance_id.as_deref();
        let group = shard
            .groups
            .entry(group_id.to_owned())
            .or_insert_with(|| ClassicGroup::new(group_id, now_ms));
        if group.state == GroupState::Dead {
            return Err(GroupError::CoordinatorNotAvailable);
        }
        if generation < 0 && group.state == GroupState::Empty {
            return Ok(());
        }
        if generation >= 0 || !member_id.is_empty() || instance_id.is_some() {
            group.validate_member(member_id, instance_id)?;
            if generation != group.generation {
                return Err(GroupError::IllegalGeneration);
            }
        }
        Ok(())
    }

    /// Applies one entry read back from a coordinator partition's log at
    /// offset `at`, while the partition is served: markers the transaction
    /// coordinator wrote, and any entry of this node not yet applied.
    pub fn apply_logged(
        &mut self,
        partition: CoordinatorPartition,
        at: i64,
        logged: LoggedEntry<'_>,
        now_ms: u64,
    ) -> Result<(), GroupError> {
        let shard = self
            .shards
            .get_mut(&partition)
            .filter(|s| !s.loading)
            .ok_or(GroupError::NotCoordinator)?;
        shard.apply_logged(at, logged, now_ms)
    }

    /// The log offset after the last entry a served partition's view
    /// holds: where the host reads on for markers.
    pub fn log_position(&self, partition: CoordinatorPartition) -> Option<i64> {
        self.shards
            .get(&partition)
            .filter(|s| !s.loading)
            .map(|s| s.next_offset)
    }
}

/// TxnOffsetCommit's code for `error` at `version`: before v2 a client
/// does not know COORDINATOR_LOAD_IN_PROGRESS (Kafka answers
/// COORDINATOR_NOT_AVAILABLE, KAFKA-7296).
fn txn_commit_code(error: GroupError, version: i16) -> i16 {
    match error {
        GroupError::LoadInProgress if version < 2 => GroupError::CoordinatorNotAvailable.code(),
        other => other.code(),
    }
}
