//! The `authorized_operations` answers (KIP-430): Metadata v8+ (each
//! topic's, and the cluster's up to v10), DescribeCluster and
//! DescribeGroups v3+, when the request asks for them. Each is the bit
//! field of the AclOperation codes the principal may do on the resource,
//! among those Kafka supports on its type (`AclEntry.supportedOperations`),
//! as Kafka's `AuthHelper.authorizedOperations` computes it; with no
//! authorizer configured, every supported operation. An answer that was
//! not asked for keeps Kafka's `Integer.MIN_VALUE`.
//!
//! The bits are filled in by a merge that runs before the authorizer's
//! own: entries the authorizer adds for resources the principal may not
//! describe keep `Integer.MIN_VALUE`, as in Kafka.

use kafka_protocol::messages::{RequestKind, ResponseKind};

use super::{Access, Merge, merge};
use crate::acl::{CLUSTER_NAME, Operation, ResourceType};

/// The operations Kafka reports on a resource of type `t`.
fn supported(t: ResourceType) -> &'static [Operation] {
    use Operation::*;
    match t {
        ResourceType::Topic => &[
            Read,
            Write,
            Create,
            Describe,
            Delete,
            Alter,
            DescribeConfigs,
            AlterConfigs,
        ],
        ResourceType::Group => &[Read, Describe, Delete],
        ResourceType::Cluster => &[
            Create,
            ClusterAction,
            DescribeConfigs,
            AlterConfigs,
            IdempotentWrite,
            Alter,
            Describe,
        ],
        ResourceType::TransactionalId => &[Describe, Write],
    }
}

/// The bit field of the operations `access` may do on `t` `name` (all
/// supported ones when there is no authorizer).
pub fn authorized(access: Option<&Access>, t: ResourceType, name: &str) -> i32 {
    supported(t)
        .iter()
        .filter(|op| access.is_none_or(|a| a.permits_quietly(**op, t, name)))
        .fold(0, |bits, op| bits | (1 << op.code()))
}

/// The cluster's operations; 0 to a principal that may not describe it.
fn cluster(access: Option<&Access>) -> i32 {
    let t = ResourceType::Cluster;
    if access.is_none_or(|a| a.permits_quietly(Operation::Describe, t, CLUSTER_NAME)) {
        authorized(access, t, CLUSTER_NAME)
    } else {
        0
    }
}

/// The merge that fills the operations `kind` asks for, if it asks.
pub fn answer(kind: &RequestKind, version: i16, access: Option<&Access>) -> Option<Merge> {
    let access = access.cloned();
    match kind {
        RequestKind::Metadata(r) if version >= 8 => {
            let topics = r.include_topic_authorized_operations;
            let with_cluster = version <= 10 && r.include_cluster_authorized_operations;
            if !topics && !with_cluster {
                return None;
            }
            merge!(Metadata, |resp| {
                if with_cluster {
                    resp.cluster_authorized_operations = cluster(access.as_ref());
                }
                for t in resp.topics.iter_mut().filter(|_| topics) {
                    if let Some(name) = &t.name {
                        t.topic_authorized_operations =
                            authorized(access.as_ref(), ResourceType::Topic, name);
                    }
                }
            })
        }
        RequestKind::DescribeCluster(r) if r.include_cluster_authorized_operations => {
            merge!(DescribeCluster, |resp| {
                resp.cluster_authorized_operations = cluster(access.as_ref());
            })
        }
        RequestKind::DescribeGroups(r) if version >= 3 && r.include_authorized_operations => {
            merge!(DescribeGroups, |resp| {
                for g in resp.groups.iter_mut().filter(|g| g.error_code == 0) {
                    g.authorized_operations =
                        authorized(access.as_ref(), ResourceType::Group, &g.group_id);
                }
            })
        }
        _ => None,
    }
}

/// `first`, then `then`.
pub fn chain(first: Option<Merge>, then: Option<Merge>) -> Option<Merge> {
    match (first, then) {
        (Some(a), Some(b)) => Some(Box::new(move |kind: &mut ResponseKind| {
            a(kind);
            b(kind);
        })),
        (a, b) => a.or(b),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn without_an_authorizer_every_supported_operation_is_allowed() {
        // READ, DESCRIBE, DELETE: Kafka's group operations.
        let group = (1 << 3) | (1 << 8) | (1 << 6);
        assert_eq!(authorized(None, ResourceType::Group, "g"), group);
        // READ..ALTER_CONFIGS except ALL, ANY and CLUSTER_ACTION.
        let topic = (3..=11).filter(|c| *c != 9).fold(0, |b, c| b | (1 << c));
        assert_eq!(authorized(None, ResourceType::Topic, "t"), topic);
        assert_eq!(
            cluster(None),
            authorized(None, ResourceType::Cluster, CLUSTER_NAME)
        );
    }

    #[test]
    fn an_unasked_answer_gets_no_merge() {
        let req = kafka_protocol::messages::MetadataRequest::default();
        assert!(answer(&RequestKind::Metadata(req.clone()), 12, None).is_none());
        let asked = req.with_include_topic_authorized_operations(true);
        assert!(answer(&RequestKind::Metadata(asked.clone()), 7, None).is_none());
        assert!(answer(&RequestKind::Metadata(asked), 8, None).is_some());
    }
}
