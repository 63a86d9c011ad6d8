//! The authorizer's decisions, as Kafka's `StandardAuthorizer` makes them:
//! a super user may do anything; otherwise the bindings whose pattern
//! covers the resource (its literal name, the literal `*`, any prefix of
//! it) and whose principal (or `User:*`) and host (or `*`) are the
//! requester's decide: a matching DENY wins over any ALLOW; an ALLOW of
//! Read, Write, Delete or Alter also allows Describe, and one of
//! AlterConfigs also allows DescribeConfigs (a DENY denies only its own
//! operation, or all for ALL). A resource no binding covers is allowed to
//! everyone only with `allow_everyone_if_no_acl_found`.
//!
//! Every decision is counted (`helix_authorizer_{allowed,denied}_total`);
//! denials are logged at debug.

use std::collections::BTreeSet;

use super::{AclBinding, WILDCARD_PRINCIPAL};
use super::{AclTable, Operation, PatternType, Permission, ResourceType, WILDCARD};
use crate::config::AuthorizerConfig;
use crate::metrics::{Metrics, metrics};

/// Who is asking: the connection's principal (`User:ANONYMOUS` when it
/// has none) and its client's address.
#[derive(Debug, Clone, Copy)]
pub struct Requester<'a> {
    pub principal: &'a str,
    pub host: &'a str,
}

/// The configured authorizer (`authorizer`, `super_users`,
/// `allow_everyone_if_no_acl_found`).
#[derive(Debug, Clone, Default)]
pub struct Authorizer {
    super_users: BTreeSet<String>,
    allow_everyone_if_no_acl_found: bool,
}

impl Authorizer {
    /// The authorizer `config` asks for, if any.
    pub fn from_config(config: &AuthorizerConfig) -> Option<Authorizer> {
        config.enabled.then(|| Authorizer {
            super_users: config.super_users.iter().cloned().collect(),
            allow_everyone_if_no_acl_found: config.allow_everyone_if_no_acl_found,
        })
    }

    /// Whether `who` may do `op` on the resource `t` `name`; counted, and
    /// logged at debug when denied.
    pub fn authorize(
        &self,
        acls: &AclTable,
        who: &Requester<'_>,
        op: Operation,
        t: ResourceType,
        name: &str,
    ) -> bool {
        let allowed = self.decide(acls, who, op, t, name);
        record(allowed, who, op, t, name);
        allowed
    }

    /// [`Authorizer::authorize`], uncounted and unlogged.
    pub fn permits(
        &self,
        acls: &AclTable,
        who: &Requester<'_>,
        op: Operation,
        t: ResourceType,
        name: &str,
    ) -> bool {
        self.decide(acls, who, op, t, name)
    }

    /// Whether `who` may do `op` on some resource of type `t` (Kafka's
    /// `authorizeByResourceType`: an idempotent producer needs Write on
    /// any topic): a super user or a resource open to all may; otherwise
    /// an ALLOW of `op` (or All) must exist that no DENY dominates (a DENY
    /// of the literal `*`, of the same literal name, or of a prefix of the
    /// allowed name or prefix).
    pub fn authorize_by_resource_type(
        &self,
        acls: &AclTable,
        who: &Requester<'_>,
        op: Operation,
        t: ResourceType,
    ) -> bool {
        let allowed = self.decide(acls, who, op, t, "hardcode") || {
            let mut denied_literal = BTreeSet::new();
            let mut denied_prefix = BTreeSet::new();
            let mut allowed = Vec::new();
            let mut wildcard_allowed = false;
            let mut wildcard_denied = false;
            for b in acls.of_type(t) {
                if !applies_to(b, who) || (b.operation != op && b.operation != Operation::All) {
                    continue;
                }
                match (b.permission, b.pattern) {
                    (Permission::Deny, PatternType::Literal) if b.name == WILDCARD => {
                        wildcard_denied = true;
                    }
                    (Permission::Deny, PatternType::Literal) => {
                        denied_literal.insert(b.name.as_str());
                    }
                    (Permission::Deny, PatternType::Prefixed) => {
                        denied_prefix.insert(b.name.as_str());
                    }
                    (Permission::Allow, PatternType::Literal) if b.name == WILDCARD => {
                        wildcard_allowed = true;
                    }
                    (Permission::Allow, pattern) => allowed.push((pattern, b.name.as_str())),
                }
            }
            !wildcard_denied
                && (wildcard_allowed
                    || allowed.iter().any(|(pattern, name)| {
                        let literal_denied =
                            *pattern == PatternType::Literal && denied_literal.contains(name);
                        let prefix_denied = (1..=name.len())
                            .filter(|i| name.is_char_boundary(*i))
                            .any(|i| denied_prefix.contains(&name[..i]));
                        !literal_denied && !prefix_denied
                    }))
        };
        record(allowed, who, op, t, "*any*");
        allowed
    }

    /// Whether `principal` is a super user.
    pub fn is_super_user(&self, principal: &str) -> bool {
        self.super_users.contains(principal)
    }

    fn decide(
        &self,
        acls: &AclTable,
        who: &Requester<'_>,
        op: Operation,
        t: ResourceType,
        name: &str,
    ) -> bool {
        if self.is_super_user(who.principal) {
            return true;
        }
        let mut covered = false;
        let mut allowed = false;
        for b in acls.of_type(t) {
            let covers = match b.pattern {
                PatternType::Literal => b.name == name || b.name == WILDCARD,
                PatternType::Prefixed => name.starts_with(b.name.as_str()),
            };
            if !covers {
                continue;
            }
            covered = true;
            if !applies_to(b, who) || !grants(b, op) {
                continue;
            }
            match b.permission {
                Permission::Deny => return false,
                Permission::Allow => allowed = true,
            }
        }
        allowed || (!covered && self.allow_everyone_if_no_acl_found)
    }
}

/// Whether `b` names the requester: its principal (or `User:*`) and its
/// host (or `*`).
fn applies_to(b: &AclBinding, who: &Requester<'_>) -> bool {
    (b.principal == who.principal || b.principal == WILDCARD_PRINCIPAL)
        && (b.host == WILDCARD || b.host == who.host)
}

/// Whether `b`'s operation decides `op`: the same, All, or (for an ALLOW
/// only) one that implies it.
fn grants(b: &AclBinding, op: Operation) -> bool {
    use Operation::*;
    if b.operation == All || b.operation == op {
        return true;
    }
    b.permission == Permission::Allow
        && match op {
            Describe => matches!(b.operation, Read | Write | Delete | Alter),
            DescribeConfigs => b.operation == AlterConfigs,
            _ => false,
        }
}

fn record(allowed: bool, who: &Requester<'_>, op: Operation, t: ResourceType, name: &str) {
    let c = &metrics().counters;
    if allowed {
        Metrics::count(&c.authorizer_allowed, 1);
    } else {
        Metrics::count(&c.authorizer_denied, 1);
        tracing::debug!(
            principal = who.principal,
            host = who.host,
            operation = ?op,
            resource_type = ?t,
            resource = name,
            "authorization denied"
        );
    }
}

#[cfg(test)]
#[path = "authorizer_tests.rs"]
mod tests;
