//! What the coordinator hands back to its host: responses shaped for the
//! negotiated version (never a field the version lacks), and proposals.
//! Group logic writes into an [`Effects`]; the coordinator turns it into
//! [`Ready`] output.

use bytes::Bytes;
use kafka_protocol::messages::join_group_response::JoinGroupResponseMember;
use kafka_protocol::messages::{
    DeleteGroupsResponse, DescribeGroupsResponse, HeartbeatResponse, JoinGroupResponse,
    LeaveGroupResponse, ListGroupsResponse, OffsetCommitResponse, OffsetDeleteResponse,
    OffsetFetchResponse, SyncGroupResponse, TxnOffsetCommitResponse,
};
use kafka_protocol::protocol::StrBytes;

use super::record::Record;
use super::types::{CoordinatorPartition, ProposalId, ReplyTo, RequestToken, TxnProducer};

/// A response of one of the coordinator's APIs.
#[derive(Debug, Clone, PartialEq)]
pub enum GroupResponse {
    JoinGroup(JoinGroupResponse),
    SyncGroup(SyncGroupResponse),
    Heartbeat(HeartbeatResponse),
    LeaveGroup(LeaveGroupResponse),
    OffsetCommit(OffsetCommitResponse),
    OffsetFetch(OffsetFetchResponse),
    ListGroups(ListGroupsResponse),
    DescribeGroups(DescribeGroupsResponse),
    DeleteGroups(DeleteGroupsResponse),
    OffsetDelete(OffsetDeleteResponse),
    TxnOffsetCommit(TxnOffsetCommitResponse),
}

impl GroupResponse {
    /// Marks every partition that validation had passed with `code` (the
    /// proposal carrying the offsets failed).
    pub fn fail_validated(&mut self, code: i16) {
        match self {
            GroupResponse::OffsetCommit(commit) => {
                let partitions = commit
                    .topics
                    .iter_mut()
                    .flat_map(|t| t.partitions.iter_mut());
                partitions
                    .filter(|p| p.error_code == super::error::NONE)
                    .for_each(|p| p.error_code = code);
            }
            GroupResponse::OffsetDelete(delete) => delete.error_code = code,
            GroupResponse::TxnOffsetCommit(commit) => {
                let partitions = commit
                    .topics
                    .iter_mut()
                    .flat_map(|t| t.partitions.iter_mut());
                partitions
                    .filter(|p| p.error_code == super::error::NONE)
                    .for_each(|p| p.error_code = code);
            }
            _ => {}
        }
    }
}

/// A response for the request the host identified by `token`, to be
/// encoded at `version`.
#[derive(Debug, Clone, PartialEq)]
pub struct Reply {
    pub token: RequestToken,
    pub version: i16,
    pub response: GroupResponse,
}

/// Records to append to a coordinator partition through Raft. The host
/// proposes `entry` as one Raft entry and later reports the outcome with
/// `on_acknowledged(id)` or `on_proposal_failed(id)`.
#[derive(Debug, Clone, PartialEq)]
pub struct Proposal {
    pub id: ProposalId,
    pub partition: CoordinatorPartition,
    pub entry: Bytes,
    /// A snapshot of the partition's whole view: once it is acknowledged,
    /// the host deletes the partition's log before it (DeleteRecords).
    pub compacts: bool,
    /// Appended as a transactional batch of this producer (TxnOffsetCommit).
    pub producer: Option<TxnProducer>,
}

/// Everything the host must act on after an input, in order: send the
/// replies, propose the entries.
#[derive(Debug, Default)]
pub struct Ready {
    pub replies: Vec<Reply>,
    pub proposals: Vec<Proposal>,
}

impl Ready {
    pub fn is_empty(&self) -> bool {
        self.replies.is_empty() && self.proposals.is_empty()
    }
}

/// What to do once a proposal is acknowledged (or fails).
#[derive(Debug, Clone)]
pub enum OnAcknowledged {
    /// Nothing waits (an emptied group's record, offset expiry).
    Nothing,
    /// Offset expiry of a partition: clears its in-flight mark.
    Retention,
    /// A snapshot entry: clears its in-flight mark.
    Snapshot,
    /// An OffsetCommit or OffsetDelete answer, already filled in with the
    /// per-partition outcome of validation.
    Response {
        reply: ReplyTo,
        response: GroupResponse,
    },
    /// The leader's assignment for `generation`: completes the sync phase.
    Assignment { group: String, generation: i32 },
    /// A static member replaced without a rebalance: answers its JoinGroup.
    StaticRejoin(StaticRejoin),
    /// One group of a DeleteGroups request.
    GroupDeleted {
        batch: u64,
        index: usize,
        group: String,
    },
}

/// A static member that took over its instance id under a new member id
/// in `generation`, waiting for the group record that says so.
#[derive(Debug, Clone)]
pub struct StaticRejoin {
    pub group: String,
    pub member_id: String,
    pub generation: i32,
}

/// Records to propose, with what waits on them.
#[derive(Debug)]
pub struct PendingProposal {
    pub records: Vec<Record>,
    pub producer: Option<TxnProducer>,
    pub waiter: OnAcknowledged,
}

/// Output collected while one input is handled.
#[derive(Debug, Default)]
pub struct Effects {
    pub replies: Vec<Reply>,
    pub proposals: Vec<PendingProposal>,
}

/// The fields of a JoinGroup answer, before version shaping.
#[derive(Debug, Default)]
pub struct JoinAnswer {
    pub error_code: i16,
    pub generation: i32,
    pub protocol_type: Option<String>,
    pub protocol_name: Option<String>,
    pub leader: String,
    pub member_id: String,
    pub skip_assignment: bool,
    /// (member id, group.instance.id, metadata): only for the leader.
    pub members: Vec<(String, Option<String>, Bytes)>,
}

pub fn str_bytes(text: &str) -> StrBytes {
    StrBytes::from_string(text.to_owned())
}

impl Effects {
    pub fn reply(&mut self, reply: ReplyTo, response: GroupResponse) {
        self.replies.push(Reply {
            token: reply.token,
            version: reply.version,
            response,
        });
    }

    pub fn propose(&mut self, records: Vec<Record>, waiter: OnAcknowledged) {
        self.propose_for(records, None, waiter);
    }

    /// Proposes `records`, as a transactional entry of `producer` if given.
    pub fn propose_for(
        &mut self,
        records: Vec<Record>,
        producer: Option<TxnProducer>,
        waiter: OnAcknowledged,
    ) {
        self.proposals.push(PendingProposal {
            records,
            producer,
            waiter,
        });
    }

    /// Answers at once when there is nothing to make durable, otherwise
    /// once `records` are acknowledged.
    pub fn reply_after(&mut self, records: Vec<Record>, reply: ReplyTo, response: GroupResponse) {
        if records.is_empty() {
            self.reply(reply, response);
        } else {
            self.propose(records, OnAcknowledged::Response { reply, response });
        }
    }

    pub fn join(&mut self, reply: ReplyTo, answer: JoinAnswer) {
        let version = reply.version;
        let mut response = JoinGroupResponse::default()
            .with_error_code(answer.error_code)
            .with_generation_id(answer.generation)
            .with_leader(str_bytes(&answer.leader))
            .with_member_id(str_bytes(&answer.member_id));
        // Nullable from v7; before that an absent name is the empty string.
        let name = answer.protocol_name.as_deref();
        response.protocol_name = match (version >= 7, name) {
            (true, name) => name.map(str_bytes),
            (false, name) => Some(str_bytes(name.unwrap_or(""))),
        };
        if version >= 7 {
            response.protocol_type = answer.protocol_type.as_deref().map(str_bytes);
        }
        if version >= 9 {
            response.skip_assignment = answer.skip_assignment;
        }
        response.members = answer
            .members
            .into_iter()
            .map(|(member_id, instance_id, metadata)| {
                let mut member = JoinGroupResponseMember::default()
                    .with_member_id(str_bytes(&member_id))
                    .with_metadata(metadata);
                if version >= 5 {
                    member.group_instance_id = instance_id.as_deref().map(str_bytes);
                }
                member
            })
            .collect();
        self.reply(reply, GroupResponse::JoinGroup(response));
    }

    pub fn join_error(&mut self, reply: ReplyTo, error_code: i16, member_id: &str) {
        let answer = JoinAnswer {
            error_code,
            generation: -1,
            member_id: member_id.to_owned(),
            ..JoinAnswer::default()
        };
        self.join(reply, answer);
    }

    pub fn sync(
        &mut self,
        reply: ReplyTo,
        error_code: i16,
        protocol: Option<(&str, &str)>,
        assignment: Bytes,
    ) {
        let mut response = SyncGroupResponse::default()
            .with_error_code(error_code)
            .with_assignment(assignment);
        if reply.version >= 5
            && let Some((protocol_type, protocol_name)) = protocol
        {
            response.protocol_type = Some(str_bytes(protocol_type));
            response.protocol_name = Some(str_bytes(protocol_name));
        }
        self.reply(reply, GroupResponse::SyncGroup(response));
    }

    pub fn sync_error(&mut self, reply: ReplyTo, error_code: i16) {
        self.sync(reply, error_code, None, Bytes::new());
    }

    pub fn heartbeat(&mut self, reply: ReplyTo, error_code: i16) {
        let response = HeartbeatResponse::default().with_error_code(error_code);
        self.reply(reply, GroupResponse::Heartbeat(response));
    }
}
