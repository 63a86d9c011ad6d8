//! A host for the coordinator in tests: numbers requests, collects replies
//! by token, acknowledges proposals (or holds them), keeps the log of
//! acknowledged entries so a fresh coordinator can replay it.

use std::collections::BTreeMap;

use bytes::{BufMut, Bytes, BytesMut};
use kafka_protocol::messages::join_group_request::JoinGroupRequestProtocol;
use kafka_protocol::messages::sync_group_request::SyncGroupRequestAssignment;
use kafka_protocol::messages::*;
use kafka_protocol::protocol::{Encodable, StrBytes};

use crate::group::{
    ClientInfo, Coordinator, CoordinatorPartition, GroupConfig, GroupRequest, GroupResponse,
    LoggedEntry, Proposal, RequestToken,
};

/// One entry of a coordinator partition's log in the harness.
#[derive(Debug, Clone)]
pub enum Logged {
    /// An entry of records; the producer id of a transactional batch.
    Records(Bytes, Option<i64>),
    /// A transaction marker: producer id, commit.
    Marker(i64, bool),
}

pub fn s(text: &str) -> StrBytes {
    StrBytes::from_string(text.to_owned())
}

pub const SESSION_MS: i32 = 10_000;
pub const REBALANCE_MS: i32 = 30_000;

pub fn config() -> GroupConfig {
    GroupConfig {
        coordinator_partitions: 3,
        ..GroupConfig::default()
    }
}

/// Consumer-protocol subscription metadata for `topics`, version 1.
pub fn subscription(topics: &[&str]) -> Bytes {
    let message =
        ConsumerProtocolSubscription::default().with_topics(topics.iter().map(|t| s(t)).collect());
    let mut buf = BytesMut::new();
    buf.put_i16(1);
    message.encode(&mut buf, 1).expect("subscription encodes");
    buf.freeze()
}

pub struct Harness {
    pub coordinator: Coordinator,
    pub now: u64,
    next_token: u64,
    pub replies: BTreeMap<RequestToken, (i16, GroupResponse)>,
    /// Acknowledged entries in log order, per partition.
    pub log: Vec<(CoordinatorPartition, Bytes)>,
    /// Every entry of the log in order, with its transactional producer,
    /// and the markers written between them (`transactions.rs` replays it).
    pub logged: Vec<(CoordinatorPartition, Logged)>,
    /// Indexes into `log` of snapshot entries (the host deletes the
    /// partition's log before each).
    pub snapshots: Vec<usize>,
    /// When set, proposals wait in `held` instead of being acknowledged.
    pub hold: bool,
    pub held: Vec<Proposal>,
}

impl Harness {
    pub fn new(config: GroupConfig) -> Self {
        let partitions = config.coordinator_partitions;
        let mut coordinator = Coordinator::new(config);
        for p in 0..partitions {
            coordinator.begin_load(CoordinatorPartition(p));
            coordinator.finish_load(CoordinatorPartition(p), 1, 0);
        }
        let mut harness = Self {
            coordinator,
            now: 1_000,
            next_token: 0,
            replies: BTreeMap::new(),
            log: Vec::new(),
            logged: Vec::new(),
            snapshots: Vec::new(),
            hold: false,
            held: Vec::new(),
        };
        harness.pump();
        harness
    }

    pub fn pump(&mut self) {
        loop {
            let ready = self.coordinator.take_ready();
            if ready.is_empty() {
                return;
            }
            for reply in ready.replies {
                let previous = self
                    .replies
                    .insert(reply.token, (reply.version, reply.response));
                assert!(previous.is_none(), "token {:?} answered twice", reply.token);
            }
            for proposal in ready.proposals {
                if self.hold {
                    self.held.push(proposal);
                } else {
                    self.acknowledge(proposal);
                }
            }
        }
    }

    fn acknowledge(&mut self, proposal: Proposal) {
        if proposal.compacts {
            self.snapshots.push(self.log.len());
        }
        self.log.push((proposal.partition, proposal.entry.clone()));
        let producer = proposal.producer.map(|p| p.producer_id);
        let entry = Logged::Records(proposal.entry.clone(), producer);
        self.logged.push((proposal.partition, entry));
        self.coordinator.on_acknowledged(proposal.id, self.now);
    }

    /// Acknowledges every held proposal, in order.
    pub fn release(&mut self) {
        self.hold = false;
        for proposal in std::mem::take(&mut self.held) {
            self.acknowledge(proposal);
        }
        self.pump();
    }

    /// The transaction coordinator writes a marker of `producer_id` into
    /// `partition`; the host reads it back and applies it.
    pub fn marker(&mut self, partition: CoordinatorPartition, producer_id: i64, commit: bool) {
        self.logged
            .push((partition, Logged::Marker(producer_id, commit)));
        let at = self
            .coordinator
            .log_position(partition)
            .expect("the partition is served");
        let logged = LoggedEntry::Marker {
            producer_id,
            commit,
        };
        self.coordinator
            .apply_logged(partition, at, logged, self.now)
            .expect("a marker applies");
        self.pump();
    }

    /// TxnOffsetCommit of one offset by producer `producer_id` (epoch 0).
    #[allow(clippy::too_many_arguments)]
    pub fn txn_commit(
        &mut self,
        version: i16,
        group: &str,
        producer_id: i64,
        member: &str,
        generation: i32,
        topic: &str,
        partition: i32,
        offset: i64,
    ) -> RequestToken {
        let partitions = vec![
            txn_offset_commit_request::TxnOffsetCommitRequestPartition::default()
                .with_partition_index(partition)
                .with_committed_offset(offset),
        ];
        let mut request = TxnOffsetCommitRequest::default()
            .with_transactional_id(TransactionalId(s("tx")))
            .with_group_id(GroupId(s(group)))
            .with_producer_id(ProducerId(producer_id))
            .with_producer_epoch(0)
            .with_topics(vec![
                txn_offset_commit_request::TxnOffsetCommitRequestTopic::default()
                    .with_name(TopicName(s(topic)))
                    .with_partitions(partitions),
            ]);
        if version >= 3 {
            request.generation_id = generation;
            request.member_id = s(member);
        }
        self.send(version, GroupRequest::TxnOffsetCommit(request))
    }

    pub fn send(&mut self, version: i16, request: GroupRequest) -> RequestToken {
        self.next_token += 1;
        let token = RequestToken(self.next_token);
        let client = ClientInfo {
            client_id: "client".into(),
            client_host: "/127.0.0.1".into(),
        };
        self.coordinator
            .handle(token, version, &client, request, self.now);
        self.pump();
        token
    }

    pub fn advance(&mut self, ms: u64) {
        self.now += ms;
        self.coordinator.tick(self.now);
        self.pump();
    }

    pub fn answered(&self, token: RequestToken) -> bool {
        self.replies.contains_key(&token)
    }

    pub fn join_response(&self, token: RequestToken) -> JoinGroupResponse {
        match self.replies.get(&token) {
            Some((_, GroupResponse::JoinGroup(r))) => r.clone(),
            other => panic!("no JoinGroup answer for {token:?}: {other:?}"),
        }
    }

    pub fn sync_response(&self, token: RequestToken) -> SyncGroupResponse {
        match self.replies.get(&token) {
            Some((_, GroupResponse::SyncGroup(r))) => r.clone(),
            other => panic!("no SyncGroup answer for {token:?}: {other:?}"),
        }
    }

    pub fn response(&self, token: RequestToken) -> GroupResponse {
        self.replies
            .get(&token)
            .map(|(_, r)| r.clone())
            .unwrap_or_else(|| panic!("no answer for {token:?}"))
    }

    pub fn join(
        &mut self,
        version: i16,
        group: &str,
        member: &str,
        instance: Option<&str>,
        protocols: &[(&str, Bytes)],
    ) -> RequestToken {
        let request = JoinGroupRequest::default()
            .with_group_id(GroupId(s(group)))
            .with_session_timeout_ms(SESSION_MS)
            .with_rebalance_timeout_ms(if version >= 1 { REBALANCE_MS } else { -1 })
            .with_member_id(s(member))
            .with_group_instance_id(instance.filter(|_| version >= 5).map(s))
            .with_protocol_type(s("consumer"))
            .with_protocols(
                protocols
                    .iter()
                    .map(|(name, metadata)| {
                        JoinGroupRequestProtocol::default()
                            .with_name(s(name))
                            .with_metadata(metadata.clone())
                    })
                    .collect(),
            );
        self.send(version, GroupRequest::JoinGroup(request))
    }

    /// Joins as a new dynamic member at v4+ (MEMBER_ID_REQUIRED, then the
    /// real join); returns the parked or answered second join.
    pub fn join_new(&mut self, group: &str, protocols: &[(&str, Bytes)]) -> (String, RequestToken) {
        let first = self.join(7, group, "", None, protocols);
        let answer = self.join_response(first);
        assert_eq!(answer.error_code, 79, "MEMBER_ID_REQUIRED");
        let member_id = answer.member_id.to_string();
        assert!(!member_id.is_empty());
        let second = self.join(7, group, &member_id, None, protocols);
        (member_id, second)
    }

    pub fn sync(
        &mut self,
        version: i16,
        group: &str,
        member: &str,
        generation: i32,
        assignments: &[(&str, &[u8])],
    ) -> RequestToken {
        let request = SyncGroupRequest::default()
            .with_group_id(GroupId(s(group)))
            .with_generation_id(generation)
            .with_member_id(s(member))
            .with_assignments(
                assignments
                    .iter()
                    .map(|(m, a)| {
                        SyncGroupRequestAssignment::default()
                            .with_member_id(s(m))
                            .with_assignment(Bytes::copy_from_slice(a))
                    })
                    .collect(),
            );
        self.send(version, GroupRequest::SyncGroup(request))
    }

    pub fn heartbeat(&mut self, group: &str, member: &str, generation: i32) -> i16 {
        let request = HeartbeatRequest::default()
            .with_group_id(GroupId(s(group)))
            .with_generation_id(generation)
            .with_member_id(s(member));
        let token = self.send(4, GroupRequest::Heartbeat(request));
        match self.response(token) {
            GroupResponse::Heartbeat(r) => r.error_code,
            other => panic!("{other:?}"),
        }
    }

    pub fn leave(&mut self, group: &str, member: &str) -> LeaveGroupResponse {
        let identity = leave_group_request::MemberIdentity::default().with_member_id(s(member));
        let request = LeaveGroupRequest::default()
            .with_group_id(GroupId(s(group)))
            .with_members(vec![identity]);
        let token = self.send(5, GroupRequest::LeaveGroup(request));
        match self.response(token) {
            GroupResponse::LeaveGroup(r) => r,
            other => panic!("{other:?}"),
        }
    }

    /// Commits `offset` with `metadata` for `topic`/`partition`; the token.
    pub fn commit(
        &mut self,
        group: &str,
        member: &str,
        generation: i32,
        topic: &str,
        partition: i32,
        offset: i64,
    ) -> RequestToken {
        let p = offset_commit_request::OffsetCommitRequestPartition::default()
            .with_partition_index(partition)
            .with_committed_offset(offset)
            .with_committed_leader_epoch(3)
            .with_committed_metadata(Some(s("note")));
        let t = offset_commit_request::OffsetCommitRequestTopic::default()
            .with_name(TopicName(s(topic)))
            .with_partitions(vec![p]);
        let request = OffsetCommitRequest::default()
            .with_group_id(GroupId(s(group)))
            .with_generation_id_or_member_epoch(generation)
            .with_member_id(s(member))
            .with_topics(vec![t]);
        self.send(8, GroupRequest::OffsetCommit(request))
    }

    pub fn commit_codes(&self, token: RequestToken) -> Vec<i16> {
        match self.response(token) {
            GroupResponse::OffsetCommit(r) => r
                .topics
                .iter()
                .flat_map(|t| t.partitions.iter().map(|p| p.error_code))
                .collect(),
            other => panic!("{other:?}"),
        }
    }

    /// (offset, leader epoch, metadata, error) of each wanted partition, via OffsetFetch v7.
    pub fn fetch(
        &mut self,
        group: &str,
        topic: &str,
        partitions: &[i32],
    ) -> (i16, Vec<(i64, i32, String, i16)>) {
        let t = offset_fetch_request::OffsetFetchRequestTopic::default()
            .with_name(TopicName(s(topic)))
            .with_partition_indexes(partitions.to_vec());
        let request = OffsetFetchRequest::default()
            .with_group_id(GroupId(s(group)))
            .with_topics(Some(vec![t]));
        let token = self.send(7, GroupRequest::OffsetFetch(request));
        match self.response(token) {
            GroupResponse::OffsetFetch(r) => (
                r.error_code,
                r.topics
                    .iter()
                    .flat_map(|t| t.partitions.iter())
                    .map(|p| {
                        let metadata = p
                            .metadata
                            .as_ref()
                            .map(|m| m.to_string())
                            .unwrap_or_default();
                        (
                            p.committed_offset,
                            p.committed_leader_epoch,
                            metadata,
                            p.error_code,
                        )
                    })
                    .collect(),
            ),
            other => panic!("{other:?}"),
        }
    }

    pub fn describe(&mut self, group: &str) -> describe_groups_response::DescribedGroup {
        let request = DescribeGroupsRequest::default().with_groups(vec![GroupId(s(group))]);
        let token = self.send(5, GroupRequest::DescribeGroups(request));
        match self.response(token) {
            GroupResponse::DescribeGroups(mut r) => r.groups.remove(0),
            other => panic!("{other:?}"),
        }
    }

    pub fn list(&mut self, states: &[&str]) -> Vec<(String, String)> {
        let request =
            ListGroupsRequest::default().with_states_filter(states.iter().map(|x| s(x)).collect());
        let token = self.send(4, GroupRequest::ListGroups(request));
        match self.response(token) {
            GroupResponse::ListGroups(r) => {
                assert_eq!(r.error_code, 0);
                r.groups
                    .iter()
                    .map(|g| (g.group_id.0.to_string(), g.group_state.to_string()))
                    .collect()
            }
            other => panic!("{other:?}"),
        }
    }

    pub fn delete_groups(&mut self, groups: &[&str]) -> RequestToken {
        let request = DeleteGroupsRequest::default()
            .with_groups_names(groups.iter().map(|g| GroupId(s(g))).collect());
        self.send(2, GroupRequest::DeleteGroups(request))
    }

    pub fn delete_codes(&self, token: RequestToken) -> Vec<i16> {
        match self.response(token) {
            GroupResponse::DeleteGroups(r) => r.results.iter().map(|g| g.error_code).collect(),
            other => panic!("{other:?}"),
        }
    }
}

/// Brings one member into a Stable single-member group: (member id, generation).
pub fn stable_single(h: &mut Harness, group: &str) -> (String, i32) {
    let (member, join) = h.join_new(group, &[("range", subscription(&["orders"]))]);
    let answer = h.join_response(join);
    assert_eq!(answer.error_code, 0);
    assert_eq!(answer.leader.as_str(), member);
    let generation = answer.generation_id;
    let sync = h.sync(4, group, &member, generation, &[(&member, b"all")]);
    assert_eq!(h.sync_response(sync).assignment.as_ref(), b"all");
    (member, generation)
}
