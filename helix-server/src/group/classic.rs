//! A classic-protocol group held in memory: its members, state and
//! generation (volatile, driven by requests and deadlines) beside its
//! durable part (`stored` and `offsets`), which only acknowledged or
//! replayed records change.

use std::collections::{BTreeMap, BTreeSet};

use bytes::Bytes;

use super::record::{GroupRecord, MemberRecord, OffsetRecord, Record};
use super::response::Effects;
use super::types::ReplyTo;

/// Kafka's classic group states. `Dead` is a group being deleted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GroupState {
    Empty,
    PreparingRebalance,
    CompletingRebalance,
    Stable,
    Dead,
}

impl GroupState {
    /// The name Kafka's ListGroups and DescribeGroups use.
    pub fn name(self) -> &'static str {
        match self {
            GroupState::Empty => "Empty",
            GroupState::PreparingRebalance => "PreparingRebalance",
            GroupState::CompletingRebalance => "CompletingRebalance",
            GroupState::Stable => "Stable",
            GroupState::Dead => "Dead",
        }
    }
}

/// One member of a group.
#[derive(Debug, Clone)]
pub struct Member {
    pub id: String,
    pub instance_id: Option<String>,
    pub client_id: String,
    pub client_host: String,
    pub rebalance_timeout_ms: i32,
    pub session_timeout_ms: i32,
    /// Supported protocols in the member's order of preference.
    pub protocols: Vec<(String, Bytes)>,
    pub assignment: Bytes,
    /// A JoinGroup waiting for the join phase to complete.
    pub awaiting_join: Option<ReplyTo>,
    /// A SyncGroup waiting for the leader's assignment to be acknowledged.
    pub awaiting_sync: Option<ReplyTo>,
    /// Joined during the current join phase, never completed one.
    pub is_new: bool,
    /// When the member expires unless it heartbeats (while not waiting).
    pub heartbeat_deadline_ms: u64,
}

impl Member {
    /// The member's metadata for `protocol`, empty if it does not support it.
    pub fn metadata(&self, protocol: &str) -> Bytes {
        self.protocols
            .iter()
            .find(|(name, _)| name == protocol)
            .map(|(_, metadata)| metadata.clone())
            .unwrap_or_default()
    }

    /// The member's most preferred protocol among `candidates`.
    fn vote<'a>(&'a self, candidates: &BTreeSet<&str>) -> Option<&'a str> {
        self.protocols
            .iter()
            .map(|(name, _)| name.as_str())
            .find(|name| candidates.contains(name))
    }

    /// Whether the session timeout has passed, counting only time in which
    /// the member is not parked in a join or sync (Kafka's `shouldKeepAlive`).
    pub fn has_expired(&self, now_ms: u64) -> bool {
        if self.awaiting_join.is_some() {
            return self.is_new && now_ms >= self.heartbeat_deadline_ms;
        }
        self.awaiting_sync.is_none() && now_ms >= self.heartbeat_deadline_ms
    }

    fn to_record(&self, protocol: Option<&str>) -> MemberRecord {
        MemberRecord {
            member_id: self.id.clone(),
            instance_id: self.instance_id.clone(),
            client_id: self.client_id.clone(),
            client_host: self.client_host.clone(),
            rebalance_timeout_ms: self.rebalance_timeout_ms,
            session_timeout_ms: self.session_timeout_ms,
            subscription: protocol.map(|name| self.metadata(name)).unwrap_or_default(),
            assignment: self.assignment.clone(),
        }
    }
}

/// A committed offset as held in the view.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommittedOffset {
    pub offset: i64,
    pub leader_epoch: i32,
    pub metadata: Option<String>,
    pub commit_timestamp_ms: u64,
    pub expire_timestamp_ms: Option<u64>,
}

/// A group on its coordinator.
#[derive(Debug, Clone)]
pub struct ClassicGroup {
    pub id: String,
    pub state: GroupState,
    /// When `state` last changed: an Empty group's offsets expire from it.
    pub state_since_ms: u64,
    pub generation: i32,
    pub protocol_type: Option<String>,
    pub protocol_name: Option<String>,
    pub leader: Option<String>,
    pub members: BTreeMap<String, Member>,
    /// `group.instance.id` → the member id that currently holds it.
    pub static_members: BTreeMap<String, String>,
    /// Member ids handed out with MEMBER_ID_REQUIRED → expiry of the offer.
    pub pending_members: BTreeMap<String, u64>,
    /// Members of the current generation that have not sent SyncGroup yet.
    pub pending_sync: BTreeSet<String>,
    /// End of the join phase (PreparingRebalance).
    pub join_deadline_ms: Option<u64>,
    /// While `Some`, the join phase is held open for
    /// `group.initial.rebalance.delay.ms`, extended up to this instant.
    pub initial_delay_until_ms: Option<u64>,
    pub new_member_added: bool,
    /// End of the sync phase: members still in `pending_sync` are dropped.
    pub sync_deadline_ms: Option<u64>,
    /// The leader's assignment of `generation`, waiting for acknowledgement.
    pub assignment_in_flight: Option<(i32, BTreeMap<String, Bytes>)>,
    /// Last acknowledged or replayed group record.
    pub stored: Option<GroupRecord>,
    /// Committed offsets: acknowledged or replayed records only.
    pub offsets: BTreeMap<(String, i32), CommittedOffset>,
    /// Offsets of open transactions, until their marker (`txn_offsets`).
    pub pending_txn: PendingOffsets,
}

impl ClassicGroup {
    /// Every member's (id, group.instance.id, metadata for the selected
    /// protocol): what the leader's JoinGroup answer carries.
    pub fn member_subscriptions(&self) -> Vec<(String, Option<String>, bytes::Bytes)> {
        let protocol = self.protocol_name.as_deref().unwrap_or_default();
        self.members
            .values()
            .map(|m| (m.id.clone(), m.instance_id.clone(), m.metadata(protocol)))
            .collect()
    }

    pub fn new(id: &str, now_ms: u64) -> Self {
        Self {
            id: id.to_owned(),
            state: GroupState::Empty,
            state_since_ms: now_ms,
            generation: 0,
            protocol_type: None,
            protocol_name: None,
            leader: None,
            members: BTreeMap::new(),
            static_members: BTreeMap::new(),
            pending_members: BTreeMap::new(),
            pending_sync: BTreeSet::new(),
            join_deadline_ms: None,
            initial_delay_until_ms: None,
            new_member_added: false,
            sync_deadline_ms: None,
            assignment_in_flight: None,
            stored: None,
            offsets: BTreeMap::new(),
            pending_txn: BTreeMap::new(),
        }
    }

    pub fn transition(&mut self, state: GroupState, now_ms: u64) {
        self.state = state;
        self.state_since_ms = now_ms;
    }

    /// Protocols every member supports.
    pub fn candidate_protocols(&self) -> BTreeSet<&str> {
        let mut members = self.members.values();
        let Some(first) = members.next() else {
            return BTreeSet::new();
        };
        let mut candidates: BTreeSet<&str> =
            first.protocols.iter().map(|(n, _)| n.as_str()).collect();
        for member in members {
            candidates.retain(|name| member.protocols.iter().any(|(n, _)| n == name));
        }
        candidates
    }

    /// Whether a member with these protocols may join (Kafka's
    /// `supportsProtocols`): an empty group takes any non-empty set.
    pub fn supports(&self, protocol_type: &str, protocols: &[(String, Bytes)]) -> bool {
        if protocol_type.is_empty() || protocols.is_empty() {
            return false;
        }
        if self.members.is_empty() {
            return true;
        }
        self.protocol_type.as_deref() == Some(protocol_type)
            && protocols
                .iter()
                .any(|(name, _)| self.candidate_protocols().contains(name.as_str()))
    }

    /// The protocol with the most first-choice votes among the candidates;
    /// ties go to the lexicographically first name so replicas agree.
    pub fn select_protocol(&self) -> Option<String> {
        let candidates = self.candidate_protocols();
        let mut votes: BTreeMap<&str, usize> = BTreeMap::new();
        for member in self.members.values() {
            if let Some(choice) = member.vote(&candidates) {
                *votes.entry(choice).or_default() += 1;
            }
        }
        let most = votes.values().copied().max()?;
        votes
            .into_iter()
            .find(|&(_, count)| count == most)
            .map(|(name, _)| name.to_owned())
    }

    pub fn max_rebalance_timeout_ms(&self) -> u64 {
        let max = self
            .members
            .values()
            .map(|m| m.rebalance_timeout_ms)
            .max()
            .unwrap_or(0);
        u64::try_from(max).unwrap_or(0)
    }

    pub fn all_members_joined(&self) -> bool {
        self.pending_members.is_empty() && self.members.values().all(|m| m.awaiting_join.is_some())
    }

    pub fn add_member(&mut self, protocol_type: &str, member: Member) {
        if self.members.is_empty() {
            self.protocol_type = Some(protocol_type.to_owned());
        }
        if let Some(instance) = &member.instance_id {
            self.static_members
                .insert(instance.clone(), member.id.clone());
        }
        if self.leader.is_none() {
            self.leader = Some(member.id.clone());
        }
        self.new_member_added = true;
        self.members.insert(member.id.clone(), member);
    }

    /// Removes a member, answering whatever it still waits for with
    /// `error_code`, and elects another leader if it led.
    pub fn remove_member(&mut self, member_id: &str, error_code: i16, out: &mut Effects) {
        let Some(member) = self.members.remove(member_id) else {
            return;
        };
        if let Some(reply) = member.awaiting_join {
            out.join_error(reply, error_code, member_id);
        }
        if let Some(reply) = member.awaiting_sync {
            out.sync_error(reply, error_code);
        }
        if let Some(instance) = &member.instance_id
            && self.static_members.get(instance).map(String::as_str) == Some(member_id)
        {
            self.static_members.remove(instance);
        }
        self.pending_sync.remove(member_id);
        if self.leader.as_deref() == Some(member_id) {
            self.leader = self.members.keys().next().cloned();
        }
    }

    /// The record of the group as it stands (members with their metadata
    /// for the selected protocol and their assignment).
    pub fn to_record(&self, now_ms: u64) -> GroupRecord {
        let protocol = self.protocol_name.as_deref();
        GroupRecord {
            group: self.id.clone(),
            protocol_type: self.protocol_type.clone().unwrap_or_default(),
            generation: self.generation,
            protocol: self.protocol_name.clone(),
            leader: self.leader.clone(),
            timestamp_ms: now_ms,
            members: self
                .members
                .values()
                .map(|m| m.to_record(protocol))
                .collect(),
        }
    }

    /// Applies one durable record to the view. Group records only replace
    /// `stored`; the live state is rebuilt from it by [`Self::restore`].
    pub fn apply(&mut self, record: &Record) {
        match record {
            Record::Offset(OffsetRecord {
                topic,
                partition,
                offset,
                leader_epoch,
                metadata,
                commit_timestamp_ms,
                expire_timestamp_ms,
                ..
            }) => {
                let committed = CommittedOffset {
                    offset: *offset,
                    leader_epoch: *leader_epoch,
                    metadata: metadata.clone(),
                    commit_timestamp_ms: *commit_timestamp_ms,
                    expire_timestamp_ms: *expire_timestamp_ms,
                };
                let key = (topic.clone(), *partition);
                self.supersede_pending(&key);
                self.offsets.insert(key, committed);
            }
            Record::OffsetTombstone {
                topic, partition, ..
            } => {
                self.offsets.remove(&(topic.clone(), *partition));
            }
            Record::Group(stored) => self.stored = Some(stored.clone()),
            Record::GroupTombstone { .. } => {
                // A deleted group's open transactions lose their offsets
                // with it (Kafka's group removal); their markers then end
                // nothing. Retention never deletes a group holding any.
                self.stored = None;
                self.offsets.clear();
                self.pending_txn.clear();
            }
        }
    }

    /// Rebuilds the live state from the stored record after a load: a
    /// stored generation with members comes back Stable, members' sessions
    /// restart now (Kafka does the same on coordinator failover).
    pub fn restore(&mut self, now_ms: u64) {
        let Some(stored) = self.stored.clone() else {
            self.transition(GroupState::Empty, now_ms);
            return;
        };
        self.generation = stored.generation;
        self.protocol_type = Some(stored.protocol_type.clone()).filter(|t| !t.is_empty());
        self.protocol_name = stored.protocol.clone();
        self.leader = stored.leader.clone();
        self.members.clear();
        self.static_members.clear();
        for record in &stored.members {
            let protocols = match &stored.protocol {
                Some(name) => vec![(name.clone(), record.subscription.clone())],
                None => Vec::new(),
            };
            let member = Member {
                id: record.member_id.clone(),
                instance_id: record.instance_id.clone(),
                client_id: record.client_id.clone(),
                client_host: record.client_host.clone(),
                rebalance_timeout_ms: record.rebalance_timeout_ms,
                session_timeout_ms: record.session_timeout_ms,
                protocols,
                assignment: record.assignment.clone(),
                awaiting_join: None,
                awaiting_sync: None,
                is_new: false,
                heartbeat_deadline_ms: now_ms
                    .saturating_add(u64::try_from(record.session_timeout_ms).unwrap_or(0)),
            };
            if let Some(instance) = &member.instance_id {
                self.static_members
                    .insert(instance.clone(), member.id.clone());
            }
            self.members.insert(member.id.clone(), member);
        }
        let state = if self.members.is_empty() {
            GroupState::Empty
        } else {
            GroupState::Stable
        };
        self.transition(state, now_ms);
        // The stored timestamp is when the group last changed: an Empty
        // group's offset retention counts from it, across restarts.
        self.state_since_ms = stored.timestamp_ms.min(now_ms);
    }
}

/// One pending offset of a producer's open transaction.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PendingOffset {
    pub committed: CommittedOffset,
    /// Where its record is in the partition's log (orders it against other
    /// producers' pending offsets).
    pub at: i64,
    /// A commit appended after it reached the partition first: the marker
    /// will not make it the committed offset (Kafka's `olderThan`).
    pub superseded: bool,
}

/// Pending offsets of one group: producer id → partition → offset.
pub type PendingOffsets = BTreeMap<i64, BTreeMap<(String, i32), PendingOffset>>;
