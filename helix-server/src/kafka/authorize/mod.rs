//! Enforcing ACLs on every API as Kafka's `KafkaApis` checks them (ADR
//! 0028, slice 2). With no authorizer configured nothing here runs.
//!
//! [`check`] runs in dispatch, after the body is decoded and before the
//! handler: a request the principal may not make at all is answered here
//! ([`Checked::Refused`], e.g. JoinGroup without Read on its group); a
//! request naming several resources loses those it may not touch, and
//! their error entries are merged into the handler's answer
//! ([`Checked::Pass`] with a [`Merge`]), so the handler never sees them
//! (Metadata does not auto-create a topic the principal may not describe).
//! Answers that list resources (Metadata for all topics, ListGroups,
//! OffsetFetch of all topics) are filtered in the merge.
//!
//! Inter-node work (replication, controller commands, transaction
//! markers) travels on the peer transport and is never checked here.

mod cluster;
mod groups;
pub mod operations;
mod topics;
mod txn;

use std::sync::Arc;

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::{RequestKind, ResponseKind};

use crate::acl::authorizer::{Authorizer, Requester};
use crate::acl::{AclTable, CLUSTER_NAME, Operation, ResourceType};
use crate::broker::Broker;

/// Kafka's principal of an unauthenticated connection.
pub const ANONYMOUS: &str = "User:ANONYMOUS";

/// Error entries (or a filter) for the handler's answer.
pub type Merge = Box<dyn FnOnce(&mut ResponseKind) + Send>;

/// What the check made of a request.
pub enum Checked {
    /// Handle `RequestKind` (perhaps with resources taken out), then apply
    /// the merge to the answer.
    Pass(RequestKind, Option<Merge>),
    /// The answer, without calling the handler.
    Refused(ResponseKind),
}

/// One request's view of the authorizer: who asks, from where, and the
/// ACLs as this node has applied them when the request arrived.
#[derive(Clone)]
pub struct Access {
    broker: Arc<Broker>,
    acls: Arc<AclTable>,
    principal: String,
    host: String,
}

impl Access {
    /// None when no authorizer is configured: everything is allowed.
    pub fn of(
        broker: &Arc<Broker>,
        principal: Option<&str>,
        peer: Option<std::net::IpAddr>,
    ) -> Option<Access> {
        broker.authorizer.as_ref()?;
        let acls = broker.controller.view().view.acls.clone();
        Some(Access {
            broker: broker.clone(),
            acls,
            principal: principal.unwrap_or(ANONYMOUS).to_string(),
            host: peer.map_or_else(|| "unknown".to_string(), |p| p.to_string()),
        })
    }

    fn authorizer(&self) -> &Authorizer {
        match &self.broker.authorizer {
            Some(a) => a,
            None => unreachable!("an Access exists only with an authorizer"),
        }
    }

    fn requester(&self) -> Requester<'_> {
        Requester {
            principal: &self.principal,
            host: &self.host,
        }
    }

    /// Whether the principal may do `op` on resource `t` `name`.
    pub fn allows(&self, op: Operation, t: ResourceType, name: &str) -> bool {
        self.authorizer()
            .authorize(&self.acls, &self.requester(), op, t, name)
    }

    /// [`Access::allows`], neither counted nor logged (Kafka asks for
    /// `authorized_operations` with logging off).
    pub fn permits_quietly(&self, op: Operation, t: ResourceType, name: &str) -> bool {
        self.authorizer()
            .permits(&self.acls, &self.requester(), op, t, name)
    }

    /// Whether the principal may do `op` on the cluster.
    pub fn allows_cluster(&self, op: Operation) -> bool {
        self.allows(op, ResourceType::Cluster, CLUSTER_NAME)
    }

    /// Whether the principal may do `op` on some resource of type `t`.
    pub fn allows_any(&self, op: Operation, t: ResourceType) -> bool {
        self.authorizer()
            .authorize_by_resource_type(&self.acls, &self.requester(), op, t)
    }

    pub fn topic(&self, op: Operation, name: &str) -> bool {
        self.allows(op, ResourceType::Topic, name)
    }

    pub fn group(&self, op: Operation, name: &str) -> bool {
        self.allows(op, ResourceType::Group, name)
    }

    pub fn transactional_id(&self, op: Operation, name: &str) -> bool {
        self.allows(op, ResourceType::TransactionalId, name)
    }

    /// A topic's name, looked up by id when the request names it by id
    /// (None: no such topic; the handler answers UNKNOWN_TOPIC_ID).
    pub fn topic_name(&self, name: &str, id: uuid::Uuid) -> Option<String> {
        if !name.is_empty() || id.is_nil() {
            return Some(name.to_string());
        }
        self.broker.topics.by_id(id).map(|t| t.name.clone())
    }

    pub fn topic_exists(&self, name: &str) -> bool {
        self.broker.topics.get(name).is_some()
    }

    /// Whether topics missing from the cluster are created on request.
    pub fn auto_create(&self) -> bool {
        self.broker.config.auto_create_topics
    }
}

pub const TOPIC_DENIED: i16 = 29;
pub const GROUP_DENIED: i16 = 30;
pub const CLUSTER_DENIED: i16 = 31;
pub const TXN_ID_DENIED: i16 = 53;

/// Checks `kind` for `access` (see the module's comment).
pub fn check(access: &Access, version: i16, kind: RequestKind) -> Checked {
    use RequestKind as R;
    debug_assert_eq!(ResponseError::TopicAuthorizationFailed.code(), TOPIC_DENIED);
    debug_assert_eq!(ResponseError::GroupAuthorizationFailed.code(), GROUP_DENIED);
    debug_assert_eq!(
        ResponseError::ClusterAuthorizationFailed.code(),
        CLUSTER_DENIED
    );
    debug_assert_eq!(
        ResponseError::TransactionalIdAuthorizationFailed.code(),
        TXN_ID_DENIED
    );
    match kind {
        R::Produce(r) => topics::produce(access, r),
        R::Fetch(r) => topics::fetch(access, r),
        R::ListOffsets(r) => topics::list_offsets(access, r),
        R::Metadata(r) => topics::metadata(access, version, r),
        R::DeleteRecords(r) => topics::delete_records(access, r),
        R::OffsetForLeaderEpoch(r) => topics::offset_for_leader_epoch(access, r),
        R::CreateTopics(r) => topics::create_topics(access, r),
        R::DeleteTopics(r) => topics::delete_topics(access, r),
        R::CreatePartitions(r) => topics::create_partitions(access, r),
        R::DescribeConfigs(r) => topics::describe_configs(access, r),
        R::AlterConfigs(r) => topics::alter_configs(access, r),
        R::IncrementalAlterConfigs(r) => topics::incremental_alter_configs(access, r),
        R::DescribeProducers(r) => topics::describe_producers(access, r),
        R::DescribeCluster(r) => txn::describe_cluster(access, r),
        R::WriteTxnMarkers(r) => txn::write_txn_markers(access, r),
        R::FindCoordinator(r) => groups::find_coordinator(access, version, r),
        R::JoinGroup(r) => groups::join_group(access, r),
        R::SyncGroup(r) => groups::sync_group(access, r),
        R::Heartbeat(r) => groups::heartbeat(access, r),
        R::LeaveGroup(r) => groups::leave_group(access, r),
        R::OffsetCommit(r) => groups::offset_commit(access, r),
        R::OffsetFetch(r) => groups::offset_fetch(access, version, r),
        R::OffsetDelete(r) => groups::offset_delete(access, r),
        R::DescribeGroups(r) => groups::describe_groups(access, r),
        R::ListGroups(r) => groups::list_groups(access, r),
        R::DeleteGroups(r) => groups::delete_groups(access, r),
        R::InitProducerId(r) => txn::init_producer_id(access, r),
        R::AddPartitionsToTxn(r) => txn::add_partitions_to_txn(access, version, r),
        R::AddOffsetsToTxn(r) => txn::add_offsets_to_txn(access, r),
        R::EndTxn(r) => txn::end_txn(access, r),
        R::TxnOffsetCommit(r) => txn::txn_offset_commit(access, r),
        R::DescribeTransactions(r) => txn::describe_transactions(access, r),
        R::ListTransactions(r) => txn::list_transactions(access, r),
        R::DescribeUserScramCredentials(r) => cluster::describe_scram(access, r),
        R::AlterUserScramCredentials(r) => cluster::alter_scram(access, r),
        R::DescribeClientQuotas(r) => cluster::describe_quotas(access, r),
        R::AlterClientQuotas(r) => cluster::alter_quotas(access, r),
        R::ElectLeaders(r) => cluster::elect_leaders(access, r),
        kind
        @ (R::DescribeLogDirs(_) | R::DescribeQuorum(_) | R::ListPartitionReassignments(_)) => {
            cluster::describe_operator(access, kind)
        }
        // ApiVersions, the SASL exchange and the ACL APIs (which check
        // Describe / Alter on the cluster in their handlers, to answer
        // per item) pass.
        other => Checked::Pass(other, None),
    }
}

/// Takes out of `items` those `keep` refuses, in order.
fn take_denied<T>(items: &mut Vec<T>, mut keep: impl FnMut(&T) -> bool) -> Vec<T> {
    let (kept, denied): (Vec<T>, Vec<T>) = std::mem::take(items).into_iter().partition(|t| keep(t));
    *items = kept;
    denied
}

/// Takes out of `items` those `denied` gives an error code, with it.
fn take_denied_with<T>(
    items: &mut Vec<T>,
    mut denied: impl FnMut(&T) -> Option<i16>,
) -> Vec<(T, i16)> {
    let mut out = Vec::new();
    let mut kept = Vec::with_capacity(items.len());
    for t in std::mem::take(items) {
        match denied(&t) {
            Some(code) => out.push((t, code)),
            None => kept.push(t),
        }
    }
    *items = kept;
    out
}

/// A merge that runs `f` on the answer when it is a `$variant`.
macro_rules! merge {
    ($variant:ident, |$resp:ident| $body:expr) => {
        Some(Box::new(move |kind: &mut ResponseKind| {
            if let ResponseKind::$variant($resp) = kind {
                $body
            }
        }) as $crate::kafka::authorize::Merge)
    };
}
use merge;
