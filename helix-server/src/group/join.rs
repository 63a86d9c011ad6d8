//! JoinGroup: validation, member ids (MEMBER_ID_REQUIRED from v4), new
//! and returning members, and static members (`group.instance.id`) that
//! come back under a new member id without a rebalance.

use bytes::Bytes;
use kafka_protocol::messages::JoinGroupRequest;

use super::classic::{ClassicGroup, GroupState, Member};
use super::coordinator::Coordinator;
use super::error::GroupError;
use super::record::Record;
use super::response::{Effects, JoinAnswer, OnAcknowledged, StaticRejoin};
use super::types::{ClientInfo, CoordinatorPartition, ReplyTo};

/// Longest protocol type, protocol name, member id or instance id taken,
/// in bytes. Kafka's non-compact strings stop at 32,767; compact ones do
/// not, so this bounds memory and keeps records' `u16` strings valid.
pub const MAX_NAME_BYTES: usize = 32_767;

/// A JoinGroup after validation, in the coordinator's own types.
struct Join {
    reply: ReplyTo,
    member_id: String,
    instance_id: Option<String>,
    client: ClientInfo,
    session_timeout_ms: i32,
    rebalance_timeout_ms: i32,
    protocol_type: String,
    protocols: Vec<(String, Bytes)>,
}

impl Coordinator {
    pub(super) fn join_group(
        &mut self,
        reply: ReplyTo,
        client: &ClientInfo,
        request: JoinGroupRequest,
        now_ms: u64,
    ) {
        let member_id = request.member_id.to_string();
        let partition = self.partition_for(&request.group_id.0);
        let mut out = Effects::default();
        if let Err(error) = self.try_join(reply, client, request, now_ms, &mut out) {
            out.join_error(reply, error.code(), &member_id);
        }
        self.flush(partition, out);
    }

    fn try_join(
        &mut self,
        reply: ReplyTo,
        client: &ClientInfo,
        request: JoinGroupRequest,
        now_ms: u64,
        out: &mut Effects,
    ) -> Result<(), GroupError> {
        let config = self.config.clone();
        let group_id = request.group_id.0.to_string();
        let (_, shard) = self.shard_of(&group_id)?;
        if request.session_timeout_ms < config.min_session_timeout_ms
            || request.session_timeout_ms > config.max_session_timeout_ms
        {
            return Err(GroupError::InvalidSessionTimeout);
        }
        let metadata_bytes: usize = request
            .protocols
            .iter()
            .map(|p| p.metadata.len() + p.name.len())
            .sum();
        let names = [&request.protocol_type, &request.member_id]
            .into_iter()
            .chain(request.group_instance_id.as_ref())
            .chain(request.protocols.iter().map(|p| &p.name));
        if metadata_bytes > config.max_member_metadata_bytes
            || names.into_iter().any(|name| name.len() > MAX_NAME_BYTES)
            || request.rebalance_timeout_ms < -1
        {
            return Err(GroupError::InvalidRequest);
        }
        // v0 has no rebalance timeout: Kafka uses the session timeout.
        let rebalance_timeout_ms = match request.rebalance_timeout_ms {
            -1 => request.session_timeout_ms,
            value => value,
        };
        let join = Join {
            reply,
            member_id: request.member_id.to_string(),
            instance_id: request.group_instance_id.as_ref().map(|id| id.to_string()),
            client: client.clone(),
            session_timeout_ms: request.session_timeout_ms,
            rebalance_timeout_ms,
            protocol_type: request.protocol_type.to_string(),
            protocols: request
                .protocols
                .iter()
                .map(|p| (p.name.to_string(), p.metadata.clone()))
                .collect(),
        };
        let exists = shard.groups.contains_key(&group_id);
        if !exists && !join.member_id.is_empty() {
            return Err(GroupError::UnknownMemberId);
        }
        if !exists && (join.protocol_type.is_empty() || join.protocols.is_empty()) {
            // Refused before the group exists, so nothing changes.
            return Err(GroupError::InconsistentGroupProtocol);
        }
        let new_id = join
            .member_id
            .is_empty()
            .then(|| shard.new_member_id(&join.client.client_id));
        let group = shard
            .groups
            .entry(group_id.clone())
            .or_insert_with(|| ClassicGroup::new(&group_id, now_ms));
        if group.state == GroupState::Dead {
            return Err(GroupError::CoordinatorNotAvailable);
        }
        if !group.supports(&join.protocol_type, &join.protocols) {
            return Err(GroupError::InconsistentGroupProtocol);
        }
        match new_id {
            Some(new_id) => join_unknown(group, join, new_id, &config, now_ms, out)?,
            None => join_known(group, join, &config, now_ms, out)?,
        }
        Ok(())
    }

    /// The record of a replaced static member is acknowledged (or failed):
    /// answer its JoinGroup with the unchanged generation.
    pub(super) fn static_rejoin_settled(
        &mut self,
        partition: CoordinatorPartition,
        rejoin: &StaticRejoin,
        result: Result<(), GroupError>,
        now_ms: u64,
        out: &mut Effects,
    ) {
        let config = self.config.clone();
        let (member_id, generation) = (rejoin.member_id.as_str(), rejoin.generation);
        let group = self
            .shards
            .get_mut(&partition)
            .and_then(|s| s.groups.get_mut(&rejoin.group));
        let Some(group) = group else {
            return;
        };
        let Some(member) = group.members.get_mut(member_id) else {
            return;
        };
        let Some(reply) = member.awaiting_join.take() else {
            return;
        };
        member.heartbeat_deadline_ms =
            now_ms.saturating_add(u64::try_from(member.session_timeout_ms).unwrap_or(0));
        if let Err(error) = result {
            out.join_error(reply, error.code(), member_id);
            group.remove_member_and_rebalance(member_id, error.code(), &config, now_ms, out);
            return;
        }
        if group.generation != generation || group.state != GroupState::Stable {
            // A rebalance started meanwhile: the member joins it instead.
            member.awaiting_join = Some(reply);
            group.try_complete_join(now_ms, out);
            return;
        }
        let is_leader = group.leader.as_deref() == Some(member_id);
        let skip_assignment = is_leader && reply.version >= 9;
        let members = if skip_assignment {
            group.member_subscriptions()
        } else {
            Vec::new()
        };
        out.join(
            reply,
            JoinAnswer {
                error_code: 0,
                generation,
                protocol_type: group.protocol_type.clone(),
                protocol_name: group.protocol_name.clone(),
                leader: group.leader.clone().unwrap_or_default(),
                member_id: member_id.to_owned(),
                skip_assignment,
                members,
            },
        );
    }
}

fn join_unknown(
    group: &mut ClassicGroup,
    join: Join,
    new_id: String,
    config: &super::GroupConfig,
    now_ms: u64,
    out: &mut Effects,
) -> Result<(), GroupError> {
    if let Some(old_id) = join
        .instance_id
        .as_ref()
        .and_then(|i| group.static_members.get(i))
        .cloned()
    {
        replace_static_member(group, join, &old_id, new_id, config, now_ms, out);
        return Ok(());
    }
    if group.members.len() + group.pending_members.len() >= config.max_group_size {
        return Err(GroupError::GroupMaxSizeReached);
    }
    if join.instance_id.is_none() && join.reply.version >= 4 {
        // KIP-394: the member must come back with this id before it counts.
        let deadline = now_ms.saturating_add(u64::try_from(join.session_timeout_ms).unwrap_or(0));
        group.pending_members.insert(new_id.clone(), deadline);
        out.join_error(join.reply, GroupError::MemberIdRequired.code(), &new_id);
        return Ok(());
    }
    add_member_and_rebalance(group, join, new_id, config, now_ms, out);
    Ok(())
}

fn join_known(
    group: &mut ClassicGroup,
    join: Join,
    config: &super::GroupConfig,
    now_ms: u64,
    out: &mut Effects,
) -> Result<(), GroupError> {
    if group.pending_members.remove(&join.member_id).is_some() {
        let member_id = join.member_id.clone();
        add_member_and_rebalance(group, join, member_id, config, now_ms, out);
        return Ok(());
    }
    group.validate_member(&join.member_id, join.instance_id.as_deref())?;
    let Some(member) = group.members.get_mut(&join.member_id) else {
        return Err(GroupError::UnknownMemberId);
    };
    let unchanged = member.protocols == join.protocols;
    let is_leader = group.leader.as_deref() == Some(join.member_id.as_str());
    match group.state {
        GroupState::Empty | GroupState::Dead => Err(GroupError::UnknownMemberId),
        GroupState::CompletingRebalance | GroupState::Stable
            if unchanged && (!is_leader || group.state == GroupState::CompletingRebalance) =>
        {
            // The member lost our answer: send the current generation again.
            member.heartbeat_deadline_ms =
                now_ms.saturating_add(u64::try_from(member.session_timeout_ms).unwrap_or(0));
            let members = if is_leader {
                group.member_subscriptions()
            } else {
                Vec::new()
            };
            out.join(
                join.reply,
                JoinAnswer {
                    error_code: 0,
                    generation: group.generation,
                    protocol_type: group.protocol_type.clone(),
                    protocol_name: group.protocol_name.clone(),
                    leader: group.leader.clone().unwrap_or_default(),
                    member_id: join.member_id.clone(),
                    skip_assignment: false,
                    members,
                },
            );
            Ok(())
        }
        GroupState::PreparingRebalance | GroupState::CompletingRebalance | GroupState::Stable => {
            update_member(member, &join, out);
            group.rebalance_or_try_join(config, now_ms, out);
            Ok(())
        }
    }
}

/// Takes a rejoining member's new protocols and parks its JoinGroup.
fn update_member(member: &mut Member, join: &Join, out: &mut Effects) {
    if let Some(previous) = member.awaiting_join.take() {
        out.join_error(previous, GroupError::RebalanceInProgress.code(), &member.id);
    }
    member.protocols = join.protocols.clone();
    member.rebalance_timeout_ms = join.rebalance_timeout_ms;
    member.session_timeout_ms = join.session_timeout_ms;
    member.awaiting_join = Some(join.reply);
}

fn add_member_and_rebalance(
    group: &mut ClassicGroup,
    join: Join,
    member_id: String,
    config: &super::GroupConfig,
    now_ms: u64,
    out: &mut Effects,
) {
    let member = Member {
        id: member_id,
        instance_id: join.instance_id,
        client_id: join.client.client_id,
        client_host: join.client.client_host,
        rebalance_timeout_ms: join.rebalance_timeout_ms,
        session_timeout_ms: join.session_timeout_ms,
        protocols: join.protocols,
        assignment: Bytes::new(),
        awaiting_join: Some(join.reply),
        awaiting_sync: None,
        is_new: true,
        heartbeat_deadline_ms: now_ms.saturating_add(config.new_member_join_timeout_ms),
    };
    group.add_member(&join.protocol_type, member);
    group.rebalance_or_try_join(config, now_ms, out);
}

/// A static member rejoined without its member id (it restarted): the new
/// id takes over the old one's place and assignment; the old id is fenced.
fn replace_static_member(
    group: &mut ClassicGroup,
    join: Join,
    old_id: &str,
    new_id: String,
    config: &super::GroupConfig,
    now_ms: u64,
    out: &mut Effects,
) {
    let Some(mut member) = group.members.remove(old_id) else {
        return;
    };
    let fenced = GroupError::FencedInstanceId.code();
    if let Some(previous) = member.awaiting_join.take() {
        out.join_error(previous, fenced, old_id);
    }
    if let Some(previous) = member.awaiting_sync.take() {
        out.sync_error(previous, fenced);
    }
    member.protocols = join.protocols.clone();
    member.id = new_id.clone();
    member.client_id = join.client.client_id.clone();
    member.client_host = join.client.client_host.clone();
    member.rebalance_timeout_ms = join.rebalance_timeout_ms;
    member.session_timeout_ms = join.session_timeout_ms;
    member.awaiting_join = Some(join.reply);
    group.members.insert(new_id.clone(), member);
    if let Some(instance) = &join.instance_id {
        group
            .static_members
            .insert(instance.clone(), new_id.clone());
    }
    if group.leader.as_deref() == Some(old_id) {
        group.leader = Some(new_id.clone());
    }
    if group.pending_sync.remove(old_id) {
        group.pending_sync.insert(new_id.clone());
    }
    match group.state {
        GroupState::Stable if group.select_protocol() == group.protocol_name => {
            // Same protocol as the generation it holds an assignment of:
            // persist the new member id, answer once acknowledged.
            let record = Record::Group(group.to_record(now_ms));
            let waiter = OnAcknowledged::StaticRejoin(StaticRejoin {
                group: group.id.clone(),
                member_id: new_id,
                generation: group.generation,
            });
            out.propose(vec![record], waiter);
        }
        GroupState::PreparingRebalance => group.try_complete_join(now_ms, out),
        _ => group.prepare_rebalance(config, now_ms, out),
    }
}

impl ClassicGroup {
    /// Checks that `member_id` belongs to the group and, for a static
    /// member, that it still holds its instance id.
    pub fn validate_member(
        &self,
        member_id: &str,
        instance_id: Option<&str>,
    ) -> Result<(), GroupError> {
        if let Some(instance) = instance_id {
            match self.static_members.get(instance) {
                Some(holder) if holder != member_id => return Err(GroupError::FencedInstanceId),
                Some(_) => {}
                None => return Err(GroupError::UnknownMemberId),
            }
        }
        if self.members.contains_key(member_id) {
            Ok(())
        } else {
            Err(GroupError::UnknownMemberId)
        }
    }
}
