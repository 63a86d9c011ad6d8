//! ListGroups, DescribeGroups and DeleteGroups: what `kafka-consumer-groups`
//! and the AdminClient read and change. A deletion is answered once its
//! tombstones are acknowledged; an active group is refused NON_EMPTY_GROUP.

use kafka_protocol::messages::delete_groups_response::DeletableGroupResult;
use kafka_protocol::messages::describe_groups_response::{DescribedGroup, DescribedGroupMember};
use kafka_protocol::messages::list_groups_response::ListedGroup;
use kafka_protocol::messages::{
    DeleteGroupsRequest, DeleteGroupsResponse, DescribeGroupsRequest, DescribeGroupsResponse,
    GroupId, ListGroupsRequest, ListGroupsResponse,
};

use super::classic::GroupState;
use super::coordinator::{Coordinator, DeleteBatch};
use super::error::{GroupError, NONE};
use super::record::Record;
use super::response::{Effects, GroupResponse, OnAcknowledged, str_bytes};
use super::types::{CoordinatorPartition, ReplyTo};

/// Every classic-group group type Helix has.
const GROUP_TYPE: &str = "classic";
/// DescribeGroups v3+ answers Kafka's `Integer.MIN_VALUE` here; the
/// operations asked for are the authorizer's, filled in by the Kafka
/// front end (`kafka::authorize::operations`).
const OPERATIONS_OMITTED: i32 = i32::MIN;

impl Coordinator {
    pub(super) fn list_groups(&mut self, reply: ReplyTo, request: ListGroupsRequest) {
        let mut response = ListGroupsResponse::default();
        let states: Vec<String> = request
            .states_filter
            .iter()
            .map(|s| s.to_lowercase())
            .collect();
        let types: Vec<String> = request
            .types_filter
            .iter()
            .map(|s| s.to_lowercase())
            .collect();
        let type_matches = types.is_empty() || types.iter().any(|t| t == GROUP_TYPE);
        for shard in self.shards.values() {
            if shard.loading {
                response.error_code = GroupError::LoadInProgress.code();
                continue;
            }
            let groups = shard
                .groups
                .values()
                .filter(|g| g.state != GroupState::Dead);
            for group in groups.filter(|_| type_matches) {
                let state = group.state.name();
                if !states.is_empty() && !states.iter().any(|s| *s == state.to_lowercase()) {
                    continue;
                }
                let mut listed = ListedGroup::default()
                    .with_group_id(GroupId(str_bytes(&group.id)))
                    .with_protocol_type(str_bytes(group.protocol_type.as_deref().unwrap_or("")));
                if reply.version >= 4 {
                    listed.group_state = str_bytes(state);
                }
                if reply.version >= 5 {
                    listed.group_type = str_bytes(GROUP_TYPE);
                }
                response.groups.push(listed);
            }
        }
        let mut out = Effects::default();
        out.reply(reply, GroupResponse::ListGroups(response));
        self.ready_replies(out);
    }

    pub(super) fn describe_groups(&mut self, reply: ReplyTo, request: DescribeGroupsRequest) {
        let version = reply.version;
        let mut response = DescribeGroupsResponse::default();
        for group_id in &request.groups {
            let mut described = DescribedGroup::default().with_group_id(group_id.clone());
            if version >= 3 {
                described.authorized_operations = OPERATIONS_OMITTED;
            }
            let found = self.shard_of(&group_id.0).map(|(_, shard)| {
                shard
                    .groups
                    .get(group_id.0.as_str())
                    .filter(|g| g.state != GroupState::Dead)
                    .cloned()
            });
            match found {
                Err(error) => described.error_code = error.code(),
                Ok(None) if version >= 6 => {
                    described.error_code = GroupError::GroupIdNotFound.code();
                    described.error_message = Some(str_bytes("Group not found."));
                    described.group_state = str_bytes(GroupState::Dead.name());
                }
                Ok(None) => described.group_state = str_bytes(GroupState::Dead.name()),
                Ok(Some(group)) => {
                    let stable = group.state == GroupState::Stable;
                    let protocol = group.protocol_name.clone().unwrap_or_default();
                    described.group_state = str_bytes(group.state.name());
                    described.protocol_type =
                        str_bytes(group.protocol_type.as_deref().unwrap_or(""));
                    described.protocol_data = str_bytes(if stable { &protocol } else { "" });
                    described.members = group
                        .members
                        .values()
                        .map(|m| {
                            let mut member = DescribedGroupMember::default()
                                .with_member_id(str_bytes(&m.id))
                                .with_client_id(str_bytes(&m.client_id))
                                .with_client_host(str_bytes(&m.client_host));
                            if version >= 4 {
                                member.group_instance_id = m.instance_id.as_deref().map(str_bytes);
                            }
                            if stable {
                                member.member_metadata = m.metadata(&protocol);
                                member.member_assignment = m.assignment.clone();
                            }
                            member
                        })
                        .collect();
                }
            }
            response.groups.push(described);
        }
        let mut out = Effects::default();
        out.reply(reply, GroupResponse::DescribeGroups(response));
        self.ready_replies(out);
    }

    pub(super) fn delete_groups(
        &mut self,
        reply: ReplyTo,
        request: DeleteGroupsRequest,
        _now_ms: u64,
    ) {
        self.next_batch += 1;
        let batch = self.next_batch;
        let mut results = Vec::with_capacity(request.groups_names.len());
        let mut outboxes = Vec::new();
        for (index, group_id) in request.groups_names.iter().enumerate() {
            let result = self.start_group_delete(&group_id.0, batch, index);
            let code = match result {
                Ok((partition, out)) => {
                    outboxes.push((partition, out));
                    NONE
                }
                Err(error) => error.code(),
            };
            results.push(
                DeletableGroupResult::default()
                    .with_group_id(group_id.clone())
                    .with_error_code(code),
            );
        }
        let outstanding = outboxes.len();
        self.delete_batches.insert(
            batch,
            DeleteBatch {
                reply,
                results,
                outstanding,
            },
        );
        for (partition, out) in outboxes {
            self.flush(partition, out);
        }
        self.finish_delete_batch(batch);
    }

    /// Marks an empty group Dead and proposes its tombstones.
    fn start_group_delete(
        &mut self,
        group_id: &str,
        batch: u64,
        index: usize,
    ) -> Result<(CoordinatorPartition, Effects), GroupError> {
        let (partition, shard) = self.shard_of(group_id)?;
        let group = shard
            .groups
            .get_mut(group_id)
            .ok_or(GroupError::GroupIdNotFound)?;
        match group.state {
            GroupState::Dead => return Err(GroupError::GroupIdNotFound),
            GroupState::Empty if group.members.is_empty() && group.pending_members.is_empty() => {}
            _ => return Err(GroupError::NonEmptyGroup),
        }
        group.state = GroupState::Dead;
        let mut records: Vec<Record> = group
            .offsets
            .keys()
            .map(|(topic, partition)| Record::OffsetTombstone {
                group: group_id.to_owned(),
                topic: topic.clone(),
                partition: *partition,
            })
            .collect();
        records.push(Record::GroupTombstone {
            group: group_id.to_owned(),
        });
        let mut out = Effects::default();
        out.propose(
            records,
            OnAcknowledged::GroupDeleted {
                batch,
                index,
                group: group_id.to_owned(),
            },
        );
        Ok((partition, out))
    }

    /// One group's tombstones were acknowledged or failed.
    pub(super) fn group_delete_settled(
        &mut self,
        partition: CoordinatorPartition,
        batch: u64,
        index: usize,
        group_id: &str,
        result: Result<(), GroupError>,
        _out: &mut Effects,
    ) {
        if let Err(error) = result {
            // Not deleted after all: the group is back to Empty.
            let group = self
                .shards
                .get_mut(&partition)
                .and_then(|s| s.groups.get_mut(group_id));
            if let Some(group) = group.filter(|g| g.state == GroupState::Dead) {
                group.state = GroupState::Empty;
            }
            if let Some(slot) = self
                .delete_batches
                .get_mut(&batch)
                .and_then(|b| b.results.get_mut(index))
            {
                slot.error_code = error.code();
            }
        }
        if let Some(pending) = self.delete_batches.get_mut(&batch) {
            pending.outstanding = pending.outstanding.saturating_sub(1);
        }
        self.finish_delete_batch(batch);
    }

    fn finish_delete_batch(&mut self, batch: u64) {
        if self
            .delete_batches
            .get(&batch)
            .is_some_and(|b| b.outstanding == 0)
            && let Some(done) = self.delete_batches.remove(&batch)
        {
            let response = DeleteGroupsResponse::default().with_results(done.results);
            let mut out = Effects::default();
            out.reply(done.reply, GroupResponse::DeleteGroups(response));
            self.ready_replies(out);
        }
    }
}
