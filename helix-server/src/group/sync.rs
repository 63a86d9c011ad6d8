//! SyncGroup, Heartbeat and LeaveGroup: the member side of a generation.
//! The leader's assignment is proposed as the group's record; every
//! member's SyncGroup is answered once that record is acknowledged.

use std::collections::BTreeMap;

use bytes::Bytes;
use kafka_protocol::messages::leave_group_response::MemberResponse;
use kafka_protocol::messages::{
    HeartbeatRequest, LeaveGroupRequest, LeaveGroupResponse, SyncGroupRequest,
};

use super::classic::GroupState;
use super::coordinator::Coordinator;
use super::error::{GroupError, NONE};
use super::record::Record;
use super::response::{Effects, GroupResponse, OnAcknowledged, str_bytes};
use super::types::{CoordinatorPartition, ReplyTo};

fn ms(value: i32) -> u64 {
    u64::try_from(value).unwrap_or(0)
}

impl Coordinator {
    pub(super) fn sync_group(&mut self, reply: ReplyTo, request: SyncGroupRequest, now_ms: u64) {
        let partition = self.partition_for(&request.group_id.0);
        let mut out = Effects::default();
        if let Err(error) = self.try_sync(reply, request, now_ms, &mut out) {
            out.sync_error(reply, error.code());
        }
        self.flush(partition, out);
    }

    fn try_sync(
        &mut self,
        reply: ReplyTo,
        request: SyncGroupRequest,
        now_ms: u64,
        out: &mut Effects,
    ) -> Result<(), GroupError> {
        let max_assignment = self.config.max_member_metadata_bytes;
        let (_, shard) = self.shard_of(&request.group_id.0)?;
        let group = shard
            .groups
            .get_mut(request.group_id.0.as_str())
            .ok_or(GroupError::UnknownMemberId)?;
        if group.state == GroupState::Dead {
            return Err(GroupError::CoordinatorNotAvailable);
        }
        let member_id = request.member_id.to_string();
        group.validate_member(&member_id, request.group_instance_id.as_deref())?;
        if request.generation_id != group.generation {
            return Err(GroupError::IllegalGeneration);
        }
        let type_differs = request
            .protocol_type
            .as_ref()
            .is_some_and(|t| Some(t.as_str()) != group.protocol_type.as_deref());
        let name_differs = request
            .protocol_name
            .as_ref()
            .is_some_and(|n| Some(n.as_str()) != group.protocol_name.as_deref());
        if type_differs || name_differs {
            return Err(GroupError::InconsistentGroupProtocol);
        }
        if request
            .assignments
            .iter()
            .any(|a| a.assignment.len() > max_assignment)
        {
            return Err(GroupError::InvalidRequest);
        }
        match group.state {
            GroupState::Empty | GroupState::Dead => Err(GroupError::UnknownMemberId),
            GroupState::PreparingRebalance => Err(GroupError::RebalanceInProgress),
            GroupState::Stable => {
                group.pending_sync.remove(&member_id);
                let protocol_type = group.protocol_type.clone().unwrap_or_default();
                let protocol_name = group.protocol_name.clone().unwrap_or_default();
                let Some(member) = group.members.get_mut(&member_id) else {
                    return Err(GroupError::UnknownMemberId);
                };
                member.heartbeat_deadline_ms = now_ms.saturating_add(ms(member.session_timeout_ms));
                out.sync(
                    reply,
                    NONE,
                    Some((&protocol_type, &protocol_name)),
                    member.assignment.clone(),
                );
                Ok(())
            }
            GroupState::CompletingRebalance => {
                group.pending_sync.remove(&member_id);
                let Some(member) = group.members.get_mut(&member_id) else {
                    return Err(GroupError::UnknownMemberId);
                };
                if let Some(previous) = member.awaiting_sync.replace(reply) {
                    out.sync_error(previous, GroupError::RebalanceInProgress.code());
                }
                let is_leader = group.leader.as_deref() == Some(member_id.as_str());
                if is_leader && group.assignment_in_flight.is_none() {
                    let mut assignments: BTreeMap<String, Bytes> = group
                        .members
                        .keys()
                        .map(|id| (id.clone(), Bytes::new()))
                        .collect();
                    for assignment in &request.assignments {
                        if let Some(slot) = assignments.get_mut(assignment.member_id.as_str()) {
                            *slot = assignment.assignment.clone();
                        }
                    }
                    let mut record = group.to_record(now_ms);
                    for member in &mut record.members {
                        member.assignment = assignments
                            .get(&member.member_id)
                            .cloned()
                            .unwrap_or_default();
                    }
                    group.assignment_in_flight = Some((group.generation, assignments));
                    let waiter = OnAcknowledged::Assignment {
                        group: group.id.clone(),
                        generation: group.generation,
                    };
                    out.propose(vec![Record::Group(record)], waiter);
                }
                Ok(())
            }
        }
    }

    /// The leader's assignment is acknowledged: the group becomes Stable and
    /// every waiting SyncGroup gets its member's assignment. On failure the
    /// waiting members are told and the group rebalances.
    pub(super) fn assignment_settled(
        &mut self,
        partition: CoordinatorPartition,
        group_id: &str,
        generation: i32,
        result: Result<(), GroupError>,
        now_ms: u64,
        out: &mut Effects,
    ) {
        let config = self.config.clone();
        let Some(group) = self
            .shards
            .get_mut(&partition)
            .and_then(|s| s.groups.get_mut(group_id))
        else {
            return;
        };
        // Only the current generation's own assignment settles it: an
        // older generation's acknowledgement that arrives late must leave
        // the current one in flight.
        let current = group.state == GroupState::CompletingRebalance
            && group.generation == generation
            && group
                .assignment_in_flight
                .as_ref()
                .is_some_and(|(g, _)| *g == generation);
        if !current {
            return;
        }
        let Some((_, assignments)) = group.assignment_in_flight.take() else {
            return;
        };
        if let Err(error) = result {
            for member in group.members.values_mut() {
                if let Some(reply) = member.awaiting_sync.take() {
                    out.sync_error(reply, error.code());
                }
            }
            group.prepare_rebalance(&config, now_ms, out);
            return;
        }
        group.transition(GroupState::Stable, now_ms);
        let protocol_type = group.protocol_type.clone().unwrap_or_default();
        let protocol_name = group.protocol_name.clone().unwrap_or_default();
        for member in group.members.values_mut() {
            member.assignment = assignments.get(&member.id).cloned().unwrap_or_default();
            if let Some(reply) = member.awaiting_sync.take() {
                member.heartbeat_deadline_ms = now_ms.saturating_add(ms(member.session_timeout_ms));
                out.sync(
                    reply,
                    NONE,
                    Some((&protocol_type, &protocol_name)),
                    member.assignment.clone(),
                );
            }
        }
    }

    pub(super) fn heartbeat(&mut self, reply: ReplyTo, request: HeartbeatRequest, now_ms: u64) {
        let partition = self.partition_for(&request.group_id.0);
        let result = self.try_heartbeat(request, now_ms);
        let mut out = Effects::default();
        out.heartbeat(reply, super::error::code_of(result));
        self.flush(partition, out);
    }

    fn try_heartbeat(&mut self, request: HeartbeatRequest, now_ms: u64) -> Result<(), GroupError> {
        let (_, shard) = self.shard_of(&request.group_id.0)?;
        let group = shard
            .groups
            .get_mut(request.group_id.0.as_str())
            .ok_or(GroupError::UnknownMemberId)?;
        if group.state == GroupState::Dead {
            return Err(GroupError::CoordinatorNotAvailable);
        }
        group.validate_member(&request.member_id, request.group_instance_id.as_deref())?;
        if request.generation_id != group.generation {
            return Err(GroupError::IllegalGeneration);
        }
        let state = group.state;
        let Some(member) = group.members.get_mut(request.member_id.as_str()) else {
            return Err(GroupError::UnknownMemberId);
        };
        member.heartbeat_deadline_ms = now_ms.saturating_add(ms(member.session_timeout_ms));
        match state {
            GroupState::PreparingRebalance => Err(GroupError::RebalanceInProgress),
            GroupState::Empty | GroupState::Dead => Err(GroupError::UnknownMemberId),
            GroupState::CompletingRebalance | GroupState::Stable => Ok(()),
        }
    }

    pub(super) fn leave_group(&mut self, reply: ReplyTo, request: LeaveGroupRequest, now_ms: u64) {
        let partition = self.partition_for(&request.group_id.0);
        let mut out = Effects::default();
        // v0–v2 name one member; v3+ a batch of identities.
        let identities: Vec<(String, Option<String>)> = if reply.version >= 3 {
            request
                .members
                .iter()
                .map(|m| {
                    (
                        m.member_id.to_string(),
                        m.group_instance_id.as_ref().map(|i| i.to_string()),
                    )
                })
                .collect()
        } else {
            vec![(request.member_id.to_string(), None)]
        };
        let outcome = self.try_leave(&request.group_id.0, &identities, now_ms, &mut out);
        let mut response = LeaveGroupResponse::default();
        match (outcome, reply.version >= 3) {
            (Err(error), _) => response.error_code = error.code(),
            (Ok(codes), false) => response.error_code = codes.first().copied().unwrap_or(NONE),
            (Ok(codes), true) => {
                response.members = identities
                    .iter()
                    .zip(codes)
                    .map(|((member_id, instance_id), code)| {
                        MemberResponse::default()
                            .with_member_id(str_bytes(member_id))
                            .with_group_instance_id(instance_id.as_deref().map(str_bytes))
                            .with_error_code(code)
                    })
                    .collect();
            }
        }
        out.reply(reply, GroupResponse::LeaveGroup(response));
        self.flush(partition, out);
    }

    /// Removes each identity it can; one code per identity.
    fn try_leave(
        &mut self,
        group_id: &str,
        identities: &[(String, Option<String>)],
        now_ms: u64,
        out: &mut Effects,
    ) -> Result<Vec<i16>, GroupError> {
        let config = self.config.clone();
        let (_, shard) = self.shard_of(group_id)?;
        let Some(group) = shard.groups.get_mut(group_id) else {
            // As Kafka: an unknown group answers each member UNKNOWN_MEMBER_ID.
            return Ok(vec![GroupError::UnknownMemberId.code(); identities.len()]);
        };
        if group.state == GroupState::Dead {
            return Err(GroupError::CoordinatorNotAvailable);
        }
        let mut codes = Vec::with_capacity(identities.len());
        let mut removed = false;
        for (member_id, instance_id) in identities {
            let resolved = match instance_id {
                Some(instance) => match group.static_members.get(instance) {
                    Some(holder) if member_id.is_empty() || holder == member_id => {
                        Ok(holder.clone())
                    }
                    Some(_) => Err(GroupError::FencedInstanceId),
                    None => Err(GroupError::UnknownMemberId),
                },
                None => Ok(member_id.clone()),
            };
            let code = match resolved {
                Err(error) => error.code(),
                Ok(id) if group.pending_members.remove(&id).is_some() => {
                    removed = true;
                    NONE
                }
                Ok(id) if group.members.contains_key(&id) => {
                    group.remove_member(&id, GroupError::UnknownMemberId.code(), out);
                    removed = true;
                    NONE
                }
                Ok(_) => GroupError::UnknownMemberId.code(),
            };
            codes.push(code);
        }
        if removed {
            match group.state {
                GroupState::Stable | GroupState::CompletingRebalance => {
                    group.prepare_rebalance(&config, now_ms, out)
                }
                GroupState::PreparingRebalance => group.try_complete_join(now_ms, out),
                GroupState::Empty | GroupState::Dead => {}
            }
        }
        Ok(codes)
    }
}
