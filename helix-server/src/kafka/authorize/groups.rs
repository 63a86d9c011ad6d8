//! The group APIs' checks, as `KafkaApis` makes them: JoinGroup,
//! SyncGroup, Heartbeat, LeaveGroup and OffsetCommit need Read on the
//! group (OffsetCommit also Read on each topic); OffsetFetch and
//! DescribeGroups Describe on the group (OffsetFetch shows only topics
//! the principal may Describe); DeleteGroups and OffsetDelete Delete on
//! the group; ListGroups lists every group with Describe on the cluster,
//! else only the groups it may Describe; FindCoordinator needs Describe
//! on the group or the transactional id. Denied: GROUP_AUTHORIZATION_FAILED
//! (a topic: TOPIC_AUTHORIZATION_FAILED).

use kafka_protocol::messages::delete_groups_response::DeletableGroupResult;
use kafka_protocol::messages::describe_groups_response::DescribedGroup;
use kafka_protocol::messages::find_coordinator_response::Coordinator;
use kafka_protocol::messages::offset_commit_response::{
    OffsetCommitResponsePartition, OffsetCommitResponseTopic,
};
use kafka_protocol::messages::offset_delete_response::{
    OffsetDeleteResponsePartition, OffsetDeleteResponseTopic,
};
use kafka_protocol::messages::offset_fetch_response::{
    OffsetFetchResponseGroup, OffsetFetchResponsePartition, OffsetFetchResponseTopic,
};
use kafka_protocol::messages::{
    BrokerId, DeleteGroupsRequest, DescribeGroupsRequest, FindCoordinatorRequest,
    FindCoordinatorResponse, HeartbeatRequest, HeartbeatResponse, JoinGroupRequest,
    JoinGroupResponse, LeaveGroupRequest, LeaveGroupResponse, ListGroupsRequest,
    OffsetCommitRequest, OffsetCommitResponse, OffsetDeleteRequest, OffsetDeleteResponse,
    OffsetFetchRequest, OffsetFetchResponse, RequestKind, ResponseKind, SyncGroupRequest,
    SyncGroupResponse, TopicName,
};
use kafka_protocol::protocol::StrBytes;

use super::{Access, Checked, GROUP_DENIED, TOPIC_DENIED, TXN_ID_DENIED, merge, take_denied};
use crate::acl::Operation;

const KEY_GROUP: i8 = 0;
const KEY_TRANSACTION: i8 = 1;

pub(super) fn find_coordinator(
    access: &Access,
    version: i16,
    mut req: FindCoordinatorRequest,
) -> Checked {
    let denied_code = |key: &str| -> Option<i16> {
        match req.key_type {
            KEY_GROUP if !access.group(Operation::Describe, key) => Some(GROUP_DENIED),
            KEY_TRANSACTION if !access.transactional_id(Operation::Describe, key) => {
                Some(TXN_ID_DENIED)
            }
            _ => None,
        }
    };
    if version < 4 {
        let Some(code) = denied_code(&req.key) else {
            return Checked::Pass(RequestKind::FindCoordinator(req), None);
        };
        let mut resp = FindCoordinatorResponse::default();
        resp.error_code = code;
        resp.node_id = BrokerId(-1);
        resp.port = -1;
        return Checked::Refused(ResponseKind::FindCoordinator(resp));
    }
    let mut results = Vec::new();
    for key in std::mem::take(&mut req.coordinator_keys) {
        match denied_code(&key) {
            None => req.coordinator_keys.push(key),
            Some(code) => {
                let mut c = Coordinator::default();
                c.key = key;
                c.node_id = BrokerId(-1);
                c.port = -1;
                c.error_code = code;
                results.push(c);
            }
        }
    }
    if results.is_empty() {
        return Checked::Pass(RequestKind::FindCoordinator(req), None);
    }
    Checked::Pass(
        RequestKind::FindCoordinator(req),
        merge!(FindCoordinator, |resp| resp.coordinators.extend(results)),
    )
}

pub(super) fn join_group(access: &Access, req: JoinGroupRequest) -> Checked {
    if access.group(Operation::Read, &req.group_id.0) {
        return Checked::Pass(RequestKind::JoinGroup(req), None);
    }
    let mut resp = JoinGroupResponse::default();
    resp.error_code = GROUP_DENIED;
    resp.generation_id = -1;
    // The caller's version decides nullability; an empty name encodes at
    // every version.
    resp.protocol_name = Some(StrBytes::from_static_str(""));
    resp.protocol_type = None;
    Checked::Refused(ResponseKind::JoinGroup(resp))
}

pub(super) fn sync_group(access: &Access, req: SyncGroupRequest) -> Checked {
    if access.group(Operation::Read, &req.group_id.0) {
        return Checked::Pass(RequestKind::SyncGroup(req), None);
    }
    let mut resp = SyncGroupResponse::default();
    resp.error_code = GROUP_DENIED;
    Checked::Refused(ResponseKind::SyncGroup(resp))
}

pub(super) fn heartbeat(access: &Access, req: HeartbeatRequest) -> Checked {
    if access.group(Operation::Read, &req.group_id.0) {
        return Checked::Pass(RequestKind::Heartbeat(req), None);
    }
    let mut resp = HeartbeatResponse::default();
    resp.error_code = GROUP_DENIED;
    Checked::Refused(ResponseKind::Heartbeat(resp))
}

pub(super) fn leave_group(access: &Access, req: LeaveGroupRequest) -> Checked {
    if access.group(Operation::Read, &req.group_id.0) {
        return Checked::Pass(RequestKind::LeaveGroup(req), None);
    }
    let mut resp = LeaveGroupResponse::default();
    resp.error_code = GROUP_DENIED;
    Checked::Refused(ResponseKind::LeaveGroup(resp))
}

fn commit_result(
    name: TopicName,
    partitions: impl Iterator<Item = i32>,
    code: i16,
) -> OffsetCommitResponseTopic {
    let mut t = OffsetCommitResponseTopic::default();
    t.name = name;
    t.partitions = partitions
        .map(|index| {
            let mut p = OffsetCommitResponsePartition::default();
            p.partition_index = index;
            p.error_code = code;
            p
        })
        .collect();
    t
}

pub(super) fn offset_commit(access: &Access, mut req: OffsetCommitRequest) -> Checked {
    if !access.group(Operation::Read, &req.group_id.0) {
        let mut resp = OffsetCommitResponse::default();
        resp.topics = req
            .topics
            .into_iter()
            .map(|t| {
                let indexes = t.partitions.iter().map(|p| p.partition_index);
                commit_result(t.name, indexes, GROUP_DENIED)
            })
            .collect();
        return Checked::Refused(ResponseKind::OffsetCommit(resp));
    }
    let denied = take_denied(&mut req.topics, |t| {
        access.topic(Operation::Read, &t.name.0)
    });
    if denied.is_empty() {
        return Checked::Pass(RequestKind::OffsetCommit(req), None);
    }
    let results: Vec<_> = denied
        .into_iter()
        .map(|t| {
            let indexes = t.partitions.iter().map(|p| p.partition_index);
            commit_result(t.name, indexes, TOPIC_DENIED)
        })
        .collect();
    Checked::Pass(
        RequestKind::OffsetCommit(req),
        merge!(OffsetCommit, |resp| resp.topics.extend(results)),
    )
}

/// OffsetFetch reads only: the request goes on whole and the answer is
/// filtered. A group the principal may not Describe is answered
/// GROUP_AUTHORIZATION_FAILED; a topic it may not Describe is left out of
/// an all-topics answer and answered TOPIC_AUTHORIZATION_FAILED (offset
/// -1) when asked for by name.
pub(super) fn offset_fetch(access: &Access, version: i16, mut req: OffsetFetchRequest) -> Checked {
    if version < 8 {
        if !access.group(Operation::Describe, &req.group_id.0) {
            let mut resp = OffsetFetchResponse::default();
            resp.error_code = GROUP_DENIED;
            if version < 2 {
                // No top-level error before v2: every asked partition.
                resp.topics = req
                    .topics
                    .iter()
                    .flatten()
                    .map(|t| {
                        let mut out = OffsetFetchResponseTopic::default();
                        out.name = t.name.clone();
                        out.partitions = t
                            .partition_indexes
                            .iter()
                            .map(|&i| unauthorized_partition(i, GROUP_DENIED))
                            .collect();
                        out
                    })
                    .collect();
            }
            return Checked::Refused(ResponseKind::OffsetFetch(resp));
        }
        let all = req.topics.is_none();
        let access = access.clone();
        return Checked::Pass(
            RequestKind::OffsetFetch(req),
            merge!(OffsetFetch, |resp| {
                resp.topics.retain_mut(|t| {
                    if access.topic(Operation::Describe, &t.name.0) {
                        return true;
                    }
                    for p in &mut t.partitions {
                        *p = unauthorized_partition(p.partition_index, TOPIC_DENIED);
                    }
                    !all
                });
            }),
        );
    }
    let denied: Vec<_> = take_denied(&mut req.groups, |g| {
        access.group(Operation::Describe, &g.group_id.0)
    })
    .into_iter()
    .map(|g| {
        let mut out = OffsetFetchResponseGroup::default();
        out.group_id = g.group_id;
        out.error_code = GROUP_DENIED;
        out
    })
    .collect();
    let all_topics: Vec<_> = req
        .groups
        .iter()
        .filter(|g| g.topics.is_none())
        .map(|g| g.group_id.clone())
        .collect();
    let access = access.clone();
    Checked::Pass(
        RequestKind::OffsetFetch(req),
        merge!(OffsetFetch, |resp| {
            for g in resp.groups.iter_mut() {
                let all = all_topics.contains(&g.group_id);
                g.topics.retain_mut(|t| {
                    if access.topic(Operation::Describe, &t.name.0) {
                        return true;
                    }
                    for p in &mut t.partitions {
                        p.committed_offset = -1;
                        p.committed_leader_epoch = -1;
                        p.metadata = Some(StrBytes::from_static_str(""));
                        p.error_code = TOPIC_DENIED;
                    }
                    !all
                });
            }
            resp.groups.extend(denied);
        }),
    )
}

fn unauthorized_partition(index: i32, code: i16) -> OffsetFetchResponsePartition {
    let mut p = OffsetFetchResponsePartition::default();
    p.partition_index = index;
    p.committed_offset = -1;
    p.committed_leader_epoch = -1;
    p.metadata = Some(StrBytes::from_static_str(""));
    p.error_code = code;
    p
}

pub(super) fn offset_delete(access: &Access, mut req: OffsetDeleteRequest) -> Checked {
    if !access.group(Operation::Delete, &req.group_id.0) {
        let mut resp = OffsetDeleteResponse::default();
        resp.error_code = GROUP_DENIED;
        return Checked::Refused(ResponseKind::OffsetDelete(resp));
    }
    let denied = take_denied(&mut req.topics, |t| {
        access.topic(Operation::Read, &t.name.0)
    });
    if denied.is_empty() {
        return Checked::Pass(RequestKind::OffsetDelete(req), None);
    }
    let results: Vec<_> = denied
        .into_iter()
        .map(|t| {
            let mut out = OffsetDeleteResponseTopic::default();
            out.name = t.name;
            out.partitions = t
                .partitions
                .iter()
                .map(|p| {
                    let mut r = OffsetDeleteResponsePartition::default();
                    r.partition_index = p.partition_index;
                    r.error_code = TOPIC_DENIED;
                    r
                })
                .collect();
            out
        })
        .collect();
    Checked::Pass(
        RequestKind::OffsetDelete(req),
        merge!(OffsetDelete, |resp| resp.topics.extend(results)),
    )
}

pub(super) fn describe_groups(access: &Access, mut req: DescribeGroupsRequest) -> Checked {
    let denied: Vec<_> = take_denied(&mut req.groups, |g| access.group(Operation::Describe, &g.0))
        .into_iter()
        .map(|g| {
            let mut out = DescribedGroup::default();
            out.group_id = g;
            out.error_code = GROUP_DENIED;
            out
        })
        .collect();
    if denied.is_empty() {
        return Checked::Pass(RequestKind::DescribeGroups(req), None);
    }
    Checked::Pass(
        RequestKind::DescribeGroups(req),
        merge!(DescribeGroups, |resp| resp.groups.extend(denied)),
    )
}

pub(super) fn list_groups(access: &Access, req: ListGroupsRequest) -> Checked {
    if access.allows_cluster(Operation::Describe) {
        return Checked::Pass(RequestKind::ListGroups(req), None);
    }
    let access = access.clone();
    Checked::Pass(
        RequestKind::ListGroups(req),
        merge!(ListGroups, |resp| resp
            .groups
            .retain(|g| access.group(Operation::Describe, &g.group_id.0))),
    )
}

pub(super) fn delete_groups(access: &Access, mut req: DeleteGroupsRequest) -> Checked {
    let denied: Vec<_> = take_denied(&mut req.groups_names, |g| {
        access.group(Operation::Delete, &g.0)
    })
    .into_iter()
    .map(|g| {
        let mut out = DeletableGroupResult::default();
        out.group_id = g;
        out.error_code = GROUP_DENIED;
        out
    })
    .collect();
    if denied.is_empty() {
        return Checked::Pass(RequestKind::DeleteGroups(req), None);
    }
    Checked::Pass(
        RequestKind::DeleteGroups(req),
        merge!(DeleteGroups, |resp| resp.results.extend(denied)),
    )
}
