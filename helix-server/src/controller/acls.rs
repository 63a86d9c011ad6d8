//! ACL bindings in the controller's view (ADR 0028, slice 2): CreateAcls
//! and DeleteAcls are commands of group 0 like topic changes, so every
//! node's table is the same at the same log position and survives
//! restarts and controller failover. DeleteAcls' filters are resolved to
//! bindings by the node that takes the request; a binding deleted
//! concurrently is skipped at apply.

use std::sync::Arc;

use super::ControllerView;
use crate::acl::AclBinding;
use crate::error::{HelixError, Result};

impl ControllerView {
    /// Every binding valid and the table within its limit.
    pub(super) fn validate_create_acls(&self, bindings: &[AclBinding]) -> Result<()> {
        let mut table = (*self.acls).clone();
        table.create(bindings).map_err(HelixError::InvalidRequest)
    }

    pub(super) fn create_acls(&mut self, bindings: &[AclBinding]) -> Result<()> {
        Arc::make_mut(&mut self.acls)
            .create(bindings)
            .map_err(HelixError::InvalidRequest)
    }

    pub(super) fn delete_acls(&mut self, bindings: &[AclBinding]) {
        Arc::make_mut(&mut self.acls).delete(bindings);
    }
}

#[cfg(test)]
mod tests {
    use super::super::{Command, ControllerView};
    use crate::acl::{AclBinding, Operation, PatternType, Permission, ResourceType};
    use helix_raft::NodeId;

    fn binding(name: &str) -> AclBinding {
        AclBinding {
            resource_type: ResourceType::Topic,
            name: name.into(),
            pattern: PatternType::Prefixed,
            principal: "User:alice".into(),
            host: "*".into(),
            operation: Operation::Write,
            permission: Permission::Allow,
        }
    }

    #[test]
    fn acl_commands_replay_to_the_same_table_and_refuse_bad_bindings() {
        let nodes = [NodeId(1)];
        let log = [
            Command::CreateAcls {
                bindings: vec![binding("a"), binding("b")],
            },
            Command::CreateAcls {
                bindings: vec![binding("a")],
            },
            Command::DeleteAcls {
                bindings: vec![binding("b"), binding("never")],
            },
        ];
        let mut first = ControllerView::default();
        let mut second = ControllerView::default();
        for c in &log {
            // Through JSON, as the log stores them.
            let c: Command =
                serde_json::from_slice(&serde_json::to_vec(c).expect("encode")).expect("decode");
            first.apply(&c, &nodes, NodeId(1)).expect("applied");
            second.apply(&c, &nodes, NodeId(1)).expect("applied");
        }
        assert_eq!(first.acls, second.acls);
        assert_eq!(
            first.acls.iter().cloned().collect::<Vec<_>>(),
            vec![binding("a")]
        );
        let bad = Command::CreateAcls {
            bindings: vec![binding("c"), binding("")],
        };
        assert!(first.apply(&bad, &nodes, NodeId(1)).is_err());
        assert_eq!(
            first.acls.iter().count(),
            1,
            "a refused command changes nothing"
        );
    }
}
