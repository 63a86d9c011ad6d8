//! Access control lists with Kafka's authorizer semantics (ADR 0028,
//! slice 2): the bindings the controller keeps ([`AclBinding`], held in
//! [`AclTable`] by the controller's view), the filters DescribeAcls and
//! DeleteAcls select them with ([`filter`]), and the decisions
//! ([`authorizer`]).
//!
//! Every value carries the wire code Kafka gives it (`AclOperation`,
//! `ResourceType`, `PatternType`, `AclPermissionType`), and a binding is
//! checked as Kafka's controller checks it before it is stored.

pub mod authorizer;
pub mod filter;

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};

/// The name of the one cluster resource.
pub const CLUSTER_NAME: &str = "kafka-cluster";
/// A literal resource name or principal name matching every one.
pub const WILDCARD: &str = "*";
/// The principal matching every user.
pub const WILDCARD_PRINCIPAL: &str = "User:*";
/// Most bindings the cluster keeps (an explicit limit, as every count):
/// a CreateAcls past it is refused.
pub const MAX_ACLS: usize = 100_000;
/// Longest resource name, principal or host a binding may carry.
pub const MAX_FIELD_LEN: usize = 1024;

/// What a binding is about. Kafka's delegation tokens and users (codes 6
/// and 7) are not kept: Helix has neither resource.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ResourceType {
    Topic,
    Group,
    Cluster,
    TransactionalId,
}

impl ResourceType {
    pub const ALL: [ResourceType; 4] = [
        ResourceType::Topic,
        ResourceType::Group,
        ResourceType::Cluster,
        ResourceType::TransactionalId,
    ];

    pub fn code(self) -> i8 {
        match self {
            ResourceType::Topic => 2,
            ResourceType::Group => 3,
            ResourceType::Cluster => 4,
            ResourceType::TransactionalId => 5,
        }
    }

    pub fn from_code(code: i8) -> Option<ResourceType> {
        ResourceType::ALL.into_iter().find(|t| t.code() == code)
    }
}

/// How a binding's resource name matches: exactly (or every name, for a
/// literal `*`), or as a prefix.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PatternType {
    Literal,
    Prefixed,
}

impl PatternType {
    pub fn code(self) -> i8 {
        match self {
            PatternType::Literal => 3,
            PatternType::Prefixed => 4,
        }
    }

    pub fn from_code(code: i8) -> Option<PatternType> {
        match code {
            3 => Some(PatternType::Literal),
            4 => Some(PatternType::Prefixed),
            _ => None,
        }
    }
}

/// Kafka's `AclOperation`, codes 2..=14 (0 UNKNOWN and 1 ANY are filter
/// values only).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Operation {
    All,
    Read,
    Write,
    Create,
    Delete,
    Alter,
    Describe,
    ClusterAction,
    DescribeConfigs,
    AlterConfigs,
    IdempotentWrite,
    CreateTokens,
    DescribeTokens,
}

impl Operation {
    const BY_CODE: [Operation; 13] = [
        Operation::All,
        Operation::Read,
        Operation::Write,
        Operation::Create,
        Operation::Delete,
        Operation::Alter,
        Operation::Describe,
        Operation::ClusterAction,
        Operation::DescribeConfigs,
        Operation::AlterConfigs,
        Operation::IdempotentWrite,
        Operation::CreateTokens,
        Operation::DescribeTokens,
    ];

    pub fn code(self) -> i8 {
        Operation::BY_CODE
            .iter()
            .position(|o| *o == self)
            .map_or(0, |i| i as i8 + 2)
    }

    pub fn from_code(code: i8) -> Option<Operation> {
        usize::try_from(code - 2)
            .ok()
            .and_then(|i| Operation::BY_CODE.get(i).copied())
    }
}

/// Whether a binding grants or refuses; a matching DENY wins.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Permission {
    Deny,
    Allow,
}

impl Permission {
    pub fn code(self) -> i8 {
        match self {
            Permission::Deny => 2,
            Permission::Allow => 3,
        }
    }

    pub fn from_code(code: i8) -> Option<Permission> {
        match code {
            2 => Some(Permission::Deny),
            3 => Some(Permission::Allow),
            _ => None,
        }
    }
}

/// One ACL: a resource pattern and who may (or may not) do what from
/// where. `principal` is `Type:Name` (`User:alice`, `User:*`); `host` an
/// address or `*`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct AclBinding {
    pub resource_type: ResourceType,
    pub name: String,
    pub pattern: PatternType,
    pub principal: String,
    pub host: String,
    pub operation: Operation,
    pub permission: Permission,
}

/// A binding taken from the wire: the raw codes and strings of one
/// CreateAcls creation.
#[derive(Debug, Clone)]
pub struct RawBinding<'a> {
    pub resource_type: i8,
    pub name: &'a str,
    pub pattern: i8,
    pub principal: &'a str,
    pub host: &'a str,
    pub operation: i8,
    pub permission: i8,
}

impl AclBinding {
    /// Checks a creation as Kafka's broker and controller do; Err is the
    /// INVALID_REQUEST message.
    pub fn parse(raw: &RawBinding<'_>) -> Result<AclBinding, String> {
        let resource_type = match raw.resource_type {
            6 | 7 => {
                return Err(format!(
                    "resource type {} (delegation tokens, users) is not supported",
                    raw.resource_type
                ));
            }
            code => ResourceType::from_code(code)
                .ok_or_else(|| format!("Invalid resourceType {code}"))?,
        };
        let pattern = PatternType::from_code(raw.pattern)
            .ok_or_else(|| format!("Invalid patternType {}", raw.pattern))?;
        let operation = Operation::from_code(raw.operation)
            .ok_or_else(|| format!("Invalid operation {}", raw.operation))?;
        let permission = Permission::from_code(raw.permission)
            .ok_or_else(|| format!("Invalid permissionType {}", raw.permission))?;
        let binding = AclBinding {
            resource_type,
            name: raw.name.to_string(),
            pattern,
            principal: raw.principal.to_string(),
            host: raw.host.to_string(),
            operation,
            permission,
        };
        binding.validate()?;
        Ok(binding)
    }

    /// The checks that hold for every stored binding (applied again when
    /// the controller applies it).
    pub fn validate(&self) -> Result<(), String> {
        if self.name.is_empty() {
            return Err("Invalid empty resource name".into());
        }
        if self.resource_type == ResourceType::Cluster && self.name != CLUSTER_NAME {
            return Err(format!(
                "The only valid name for the CLUSTER resource is {CLUSTER_NAME}"
            ));
        }
        if !self.principal.contains(':') {
            return Err(format!(
                "Could not parse principal from `{}` (no colon is present separating the \
                 principal type from the principal name)",
                self.principal
            ));
        }
        if self.host.is_empty() {
            return Err("Invalid empty host".into());
        }
        for field in [&self.name, &self.principal, &self.host] {
            if field.len() > MAX_FIELD_LEN {
                return Err(format!("a field is longer than {MAX_FIELD_LEN} bytes"));
            }
        }
        Ok(())
    }
}

/// Every binding of the cluster, as the controller's view holds it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AclTable {
    bindings: BTreeSet<AclBinding>,
}

impl AclTable {
    pub fn iter(&self) -> impl Iterator<Item = &AclBinding> {
        self.bindings.iter()
    }

    /// The bindings about resources of type `t` (sorted, so by name).
    pub fn of_type(&self, t: ResourceType) -> impl Iterator<Item = &AclBinding> {
        self.bindings.iter().filter(move |b| b.resource_type == t)
    }

    /// Adds bindings (one already kept is left as it is, as Kafka does).
    /// Refused whole when a binding is invalid or the table would pass
    /// [`MAX_ACLS`].
    pub fn create(&mut self, bindings: &[AclBinding]) -> Result<(), String> {
        for b in bindings {
            b.validate()?;
        }
        let new = bindings
            .iter()
            .filter(|b| !self.bindings.contains(b))
            .collect::<BTreeSet<_>>()
            .len();
        if self.bindings.len() + new > MAX_ACLS {
            return Err(format!("the cluster keeps at most {MAX_ACLS} ACLs"));
        }
        self.bindings.extend(bindings.iter().cloned());
        Ok(())
    }

    /// Removes bindings; one not kept (deleted concurrently) is skipped.
    pub fn delete(&mut self, bindings: &[AclBinding]) {
        for b in bindings {
            self.bindings.remove(b);
        }
    }
}
