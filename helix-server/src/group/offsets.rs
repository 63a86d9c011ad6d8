//! OffsetCommit, OffsetFetch, OffsetDelete and offset retention. A commit
//! is answered only once its records are acknowledged; a fetch reads only
//! acknowledged offsets; never-committed partitions answer offset -1.

use std::collections::BTreeSet;

use kafka_protocol::messages::offset_commit_response::{
    OffsetCommitResponsePartition, OffsetCommitResponseTopic,
};
use kafka_protocol::messages::offset_delete_response::{
    OffsetDeleteResponsePartition, OffsetDeleteResponseTopic,
};
use kafka_protocol::messages::offset_fetch_response::{
    OffsetFetchResponseGroup, OffsetFetchResponsePartition, OffsetFetchResponsePartitions,
    OffsetFetchResponseTopic, OffsetFetchResponseTopics,
};
use kafka_protocol::messages::{
    ConsumerProtocolSubscription, OffsetCommitRequest, OffsetCommitResponse, OffsetDeleteRequest,
    OffsetDeleteResponse, OffsetFetchRequest, OffsetFetchResponse, TopicName,
};
use kafka_protocol::protocol::Decodable;

use super::classic::{ClassicGroup, CommittedOffset, GroupState};
use super::coordinator::Coordinator;
use super::error::{GroupError, NONE};
use super::record::{OffsetRecord, Record};
use super::response::{Effects, GroupResponse, OnAcknowledged, str_bytes};
use super::types::ReplyTo;

/// Longest topic name Kafka allows.
pub(super) const MAX_TOPIC_NAME_BYTES: usize = 249;
/// Kafka's INVALID_TOPIC_EXCEPTION.
pub(super) const INVALID_TOPIC: i16 = 17;

/// Which committed offsets to answer for one group: all, or these.
type Wanted = Option<Vec<(String, Vec<i32>)>>;
type Answer = Vec<(String, Vec<(i32, Option<CommittedOffset>)>)>;

impl Coordinator {
    pub(super) fn offset_commit(
        &mut self,
        reply: ReplyTo,
        request: OffsetCommitRequest,
        now_ms: u64,
    ) {
        let partition = self.partition_for(&request.group_id.0);
        let mut out = Effects::default();
        let verdict = self.validate_commit(&request, now_ms);
        let max_metadata = self.config.max_offset_metadata_bytes;
        let mut records = Vec::new();
        let mut response = OffsetCommitResponse::default();
        for topic in &request.topics {
            let mut answered = OffsetCommitResponseTopic::default().with_name(topic.name.clone());
            for p in &topic.partitions {
                let metadata_len = p.committed_metadata.as_ref().map_or(0, |m| m.len());
                let code = match verdict {
                    Err(error) => error.code(),
                    Ok(())
                        if topic.name.0.is_empty() || topic.name.0.len() > MAX_TOPIC_NAME_BYTES =>
                    {
                        INVALID_TOPIC
                    }
                    Ok(()) if metadata_len > max_metadata => {
                        GroupError::OffsetMetadataTooLarge.code()
                    }
                    Ok(()) => {
                        // v2–v4 may ask for an explicit retention.
                        let retention = (reply.version <= 4 && request.retention_time_ms >= 0)
                            .then(|| now_ms.saturating_add(request.retention_time_ms as u64));
                        records.push(Record::Offset(OffsetRecord {
                            group: request.group_id.0.to_string(),
                            topic: topic.name.0.to_string(),
                            partition: p.partition_index,
                            offset: p.committed_offset,
                            leader_epoch: p.committed_leader_epoch,
                            metadata: p.committed_metadata.as_ref().map(|m| m.to_string()),
                            commit_timestamp_ms: now_ms,
                            expire_timestamp_ms: retention,
                        }));
                        NONE
                    }
                };
                answered.partitions.push(
                    OffsetCommitResponsePartition::default()
                        .with_partition_index(p.partition_index)
                        .with_error_code(code),
                );
            }
            response.topics.push(answered);
        }
        out.reply_after(records, reply, GroupResponse::OffsetCommit(response));
        self.flush(partition, out);
    }

    /// Whether the committer may commit for the group now (Kafka's rules:
    /// a simple commit with generation -1 needs an empty group, a member's
    /// commit needs its current generation outside the sync phase).
    fn validate_commit(
        &mut self,
        request: &OffsetCommitRequest,
        now_ms: u64,
    ) -> Result<(), GroupError> {
        let group_id = request.group_id.0.as_str();
        let (_, shard) = self.shard_of(group_id)?;
        let generation = request.generation_id_or_member_epoch;
        let member_id = request.member_id.as_str();
        let instance_id = request.group_instance_id.as_deref();
        let Some(group) = shard.groups.get_mut(group_id) else {
            if generation < 0 {
                // Offsets without group management create an Empty group.
                shard
                    .groups
                    .insert(group_id.to_owned(), ClassicGroup::new(group_id, now_ms));
                return Ok(());
            }
            return Err(GroupError::IllegalGeneration);
        };
        if group.state == GroupState::Dead {
            return Err(GroupError::CoordinatorNotAvailable);
        }
        if generation < 0 && member_id.is_empty() && instance_id.is_none() {
            return if group.members.is_empty() {
                Ok(())
            } else {
                Err(GroupError::UnknownMemberId)
            };
        }
        group.validate_member(member_id, instance_id)?;
        if generation != group.generation {
            return Err(GroupError::IllegalGeneration);
        }
        if group.state == GroupState::CompletingRebalance {
            return Err(GroupError::RebalanceInProgress);
        }
        if let Some(member) = group.members.get_mut(member_id) {
            let session = u64::try_from(member.session_timeout_ms).unwrap_or(0);
            member.heartbeat_deadline_ms = now_ms.saturating_add(session);
        }
        Ok(())
    }

    pub(super) fn offset_fetch(&mut self, reply: ReplyTo, request: OffsetFetchRequest) {
        let version = reply.version;
        // v7+: a partition a transaction holds pending is UNSTABLE_OFFSET_COMMIT.
        let require_stable = version >= 7 && request.require_stable;
        let mut response = OffsetFetchResponse::default();
        if version >= 8 {
            for group in &request.groups {
                let unstable = self.unstable(&group.group_id.0, require_stable);
                let wanted: Wanted = group.topics.as_ref().map(|topics| {
                    topics
                        .iter()
                        .map(|t| (t.name.0.to_string(), t.partition_indexes.clone()))
                        .collect()
                });
                let (error, answer) = match self.read_offsets(&group.group_id.0, wanted) {
                    Ok(answer) => (NONE, answer),
                    Err(error) => (error.code(), Vec::new()),
                };
                let topics = answer
                    .into_iter()
                    .map(|(topic, partitions)| {
                        let partitions = partitions
                            .into_iter()
                            .map(|(index, committed)| {
                                let held = unstable(&topic, index);
                                let committed = committed.filter(|_| !held);
                                let (offset, epoch, metadata) = committed_fields(committed);
                                OffsetFetchResponsePartitions::default()
                                    .with_partition_index(index)
                                    .with_committed_offset(offset)
                                    .with_committed_leader_epoch(epoch)
                                    .with_metadata(Some(str_bytes(&metadata)))
                                    .with_error_code(unstable_code(held))
                            })
                            .collect();
                        OffsetFetchResponseTopics::default()
                            .with_name(TopicName(str_bytes(&topic)))
                            .with_partitions(partitions)
                    })
                    .collect();
                response.groups.push(
                    OffsetFetchResponseGroup::default()
                        .with_group_id(group.group_id.clone())
                        .with_topics(topics)
                        .with_error_code(error),
                );
            }
        } else {
            let wanted: Wanted = match &request.topics {
                Some(topics) => Some(
                    topics
                        .iter()
                        .map(|t| (t.name.0.to_string(), t.partition_indexes.clone()))
                        .collect(),
                ),
                // v1 cannot ask for "all"; a null list there reads nothing.
                None if version < 2 => Some(Vec::new()),
                None => None,
            };
            let unstable = self.unstable(&request.group_id.0, require_stable);
            let (error, answer) = match self.read_offsets(&request.group_id.0, wanted.clone()) {
                Ok(answer) => (NONE, answer),
                // v1 has no top-level error: it goes on every partition.
                Err(error) if version < 2 => (error.code(), no_offsets(wanted.unwrap_or_default())),
                Err(error) => (error.code(), Vec::new()),
            };
            if version >= 2 {
                response.error_code = error;
            }
            response.topics = answer
                .into_iter()
                .map(|(topic, partitions)| {
                    let partitions = partitions
                        .into_iter()
                        .map(|(index, committed)| {
                            let held = unstable(&topic, index);
                            let committed = committed.filter(|_| !held);
                            let (offset, epoch, metadata) = committed_fields(committed);
                            let code = match version {
                                ..2 => error,
                                _ => unstable_code(held),
                            };
                            let mut answered = OffsetFetchResponsePartition::default()
                                .with_partition_index(index)
                                .with_committed_offset(offset)
                                .with_metadata(Some(str_bytes(&metadata)))
                                .with_error_code(code);
                            if version >= 5 {
                                answered.committed_leader_epoch = epoch;
                            }
                            answered
                        })
                        .collect();
                    OffsetFetchResponseTopic::default()
                        .with_name(TopicName(str_bytes(&topic)))
                        .with_partitions(partitions)
                })
                .collect();
        }
        let mut out = Effects::default();
        out.reply(reply, GroupResponse::OffsetFetch(response));
        self.ready_replies(out);
    }

    /// Which partitions of the group a transaction holds pending, as a
    /// test (always false unless `require_stable`): Kafka answers them
    /// UNSTABLE_OFFSET_COMMIT instead of the last committed offset.
    fn unstable(
        &mut self,
        group_id: &str,
        require_stable: bool,
    ) -> impl Fn(&str, i32) -> bool + use<> {
        let held: BTreeSet<(String, i32)> = match self.shard_of(group_id) {
            Ok((_, shard)) if require_stable => shard
                .groups
                .get(group_id)
                .map(|g| {
                    g.pending_txn
                        .values()
                        .flat_map(|o| o.keys().cloned())
                        .collect()
                })
                .unwrap_or_default(),
            _ => BTreeSet::new(),
        };
        move |topic, partition| held.contains(&(topic.to_owned(), partition))
    }

    /// Acknowledged offsets of a group: the wanted partitions (-1 where
    /// none was committed), or every committed one.
    fn read_offsets(&mut self, group_id: &str, wanted: Wanted) -> Result<Answer, GroupError> {
        let (_, shard) = self.shard_of(group_id)?;
        let group = shard
            .groups
            .get(group_id)
            .filter(|g| g.state != GroupState::Dead);
        let Some(wanted) = wanted else {
            let mut answer: Answer = Vec::new();
            for ((topic, partition), committed) in group.map(|g| &g.offsets).into_iter().flatten() {
                match answer.last_mut() {
                    Some((last, partitions)) if last == topic => {
                        partitions.push((*partition, Some(committed.clone())))
                    }
                    _ => answer.push((topic.clone(), vec![(*partition, Some(committed.clone()))])),
                }
            }
            return Ok(answer);
        };
        Ok(wanted
            .into_iter()
            .map(|(topic, partitions)| {
                let found = partitions
                    .into_iter()
                    .map(|p| {
                        (
                            p,
                            group.and_then(|g| g.offsets.get(&(topic.clone(), p)).cloned()),
                        )
                    })
                    .collect();
                (topic, found)
            })
            .collect())
    }

    pub(super) fn offset_delete(
        &mut self,
        reply: ReplyTo,
        request: OffsetDeleteRequest,
        _now_ms: u64,
    ) {
        let partition = self.partition_for(&request.group_id.0);
        let mut out = Effects::default();
        let mut response = OffsetDeleteResponse::default();
        let mut records = Vec::new();
        match self.offset_delete_scope(&request.group_id.0) {
            Err(error) => response.error_code = error.code(),
            Ok(subscribed) => {
                for topic in &request.topics {
                    let blocked = subscribed
                        .as_ref()
                        .is_none_or(|s| s.contains(topic.name.0.as_str()));
                    let partitions = topic
                        .partitions
                        .iter()
                        .map(|p| {
                            let code = if blocked {
                                GroupError::GroupSubscribedToTopic.code()
                            } else {
                                records.push(Record::OffsetTombstone {
                                    group: request.group_id.0.to_string(),
                                    topic: topic.name.0.to_string(),
                                    partition: p.partition_index,
                                });
                                NONE
                            };
                            OffsetDeleteResponsePartition::default()
                                .with_partition_index(p.partition_index)
                                .with_error_code(code)
                        })
                        .collect();
                    response.topics.push(
                        OffsetDeleteResponseTopic::default()
                            .with_name(topic.name.clone())
                            .with_partitions(partitions),
                    );
                }
            }
        }
        out.reply_after(records, reply, GroupResponse::OffsetDelete(response));
        self.flush(partition, out);
    }

    /// Topics whose offsets may not be deleted: `Some(empty)` for an empty
    /// group, the members' subscriptions for an active consumer group,
    /// `None` (everything) when those cannot be read.
    fn offset_delete_scope(
        &mut self,
        group_id: &str,
    ) -> Result<Option<BTreeSet<String>>, GroupError> {
        let (_, shard) = self.shard_of(group_id)?;
        let group = shard
            .groups
            .get(group_id)
            .filter(|g| g.state != GroupState::Dead)
            .ok_or(GroupError::GroupIdNotFound)?;
        if group.members.is_empty() {
            return Ok(Some(BTreeSet::new()));
        }
        if group.protocol_type.as_deref() != Some("consumer") {
            return Err(GroupError::NonEmptyGroup);
        }
        let mut topics = BTreeSet::new();
        for member in group.members.values() {
            let metadata = match &group.protocol_name {
                Some(name) => member.metadata(name),
                None => member
                    .protocols
                    .first()
                    .map(|(_, m)| m.clone())
                    .unwrap_or_default(),
            };
            let Some(subscription) = decode_subscription(metadata) else {
                return Ok(None);
            };
            topics.extend(subscription.topics.iter().map(|t| t.to_string()));
        }
        Ok(Some(topics))
    }

    /// Proposes tombstones for offsets past their retention: explicit
    /// expiry always, otherwise only in an Empty group, counted from when
    /// the group became empty or the commit, whichever is later
    /// (`offsets.retention.minutes`). An Empty group left without offsets
    /// is removed too, as Kafka's periodic cleanup does.
    pub(super) fn expire_offsets(&mut self, now_ms: u64) {
        let retention = self.config.offsets_retention_ms;
        let mut outboxes = Vec::new();
        for (&partition, shard) in self
            .shards
            .iter_mut()
            .filter(|(_, s)| !s.loading && !s.retention_in_flight)
        {
            let mut records = Vec::new();
            for group in shard
                .groups
                .values()
                .filter(|g| g.state != GroupState::Dead)
            {
                let empty = group.state == GroupState::Empty
                    && group.members.is_empty()
                    && group.pending_members.is_empty();
                let mut expired = 0;
                for ((topic, index), committed) in &group.offsets {
                    let due = match committed.expire_timestamp_ms {
                        Some(at) => now_ms >= at,
                        None => {
                            empty
                                && now_ms
                                    >= committed
                                        .commit_timestamp_ms
                                        .max(group.state_since_ms)
                                        .saturating_add(retention)
                        }
                    };
                    if due {
                        expired += 1;
                        records.push(Record::OffsetTombstone {
                            group: group.id.clone(),
                            topic: topic.clone(),
                            partition: *index,
                        });
                    }
                }
                // A group whose transaction holds offsets stays for its marker.
                if empty && expired == group.offsets.len() && group.pending_txn.is_empty() {
                    records.push(Record::GroupTombstone {
                        group: group.id.clone(),
                    });
                }
            }
            if !records.is_empty() {
                shard.retention_in_flight = true;
                let mut out = Effects::default();
                out.propose(records, OnAcknowledged::Retention);
                outboxes.push((partition, out));
            }
        }
        for (partition, out) in outboxes {
            self.flush(partition, out);
        }
    }
}

fn decode_subscription(metadata: bytes::Bytes) -> Option<ConsumerProtocolSubscription> {
    let mut buf = metadata;
    if buf.len() < 2 {
        return None;
    }
    let version = i16::from_be_bytes([buf[0], buf[1]]);
    bytes::Buf::advance(&mut buf, 2);
    ConsumerProtocolSubscription::decode(&mut buf, version.clamp(0, 3)).ok()
}

fn unstable_code(held: bool) -> i16 {
    if held {
        GroupError::UnstableOffsetCommit.code()
    } else {
        NONE
    }
}

fn committed_fields(committed: Option<CommittedOffset>) -> (i64, i32, String) {
    match committed {
        Some(c) => (c.offset, c.leader_epoch, c.metadata.unwrap_or_default()),
        None => (-1, -1, String::new()),
    }
}

fn no_offsets(wanted: Vec<(String, Vec<i32>)>) -> Answer {
    wanted
        .into_iter()
        .map(|(topic, partitions)| (topic, partitions.into_iter().map(|p| (p, None)).collect()))
        .collect()
}
