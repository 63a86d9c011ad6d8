//! ACL filters, as DescribeAcls and DeleteAcls carry them: every field
//! may be ANY (or null), and the pattern type MATCH selects the bindings
//! that would apply to the named resource (its literal name, the literal
//! `*`, and every prefix of it).

use super::{AclBinding, Operation, PatternType, Permission, ResourceType, WILDCARD};

/// Which resource types a filter selects.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TypeFilter {
    Any,
    Only(ResourceType),
    /// A type Kafka knows and Helix keeps no bindings for (delegation
    /// tokens, users): selects nothing.
    Unkept,
}

/// Which pattern types a filter selects.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PatternFilter {
    /// Any pattern type, with exactly the given name.
    Any,
    /// The patterns that match the given name.
    Match,
    Only(PatternType),
}

/// A filter; `None` fields match anything.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AclFilter {
    pub resource_type: TypeFilter,
    pub name: Option<String>,
    pub pattern: PatternFilter,
    pub principal: Option<String>,
    pub host: Option<String>,
    pub operation: Option<Operation>,
    pub permission: Option<Permission>,
}

/// A filter taken from the wire: the raw codes and strings.
#[derive(Debug, Clone)]
pub struct RawFilter<'a> {
    pub resource_type: i8,
    pub name: Option<&'a str>,
    pub pattern: i8,
    pub principal: Option<&'a str>,
    pub host: Option<&'a str>,
    pub operation: i8,
    pub permission: i8,
}

const ANY: i8 = 1;

impl AclFilter {
    /// Checks a filter; UNKNOWN (0) or an unknown code in any field is
    /// refused (Err: the INVALID_REQUEST message), as Kafka does.
    pub fn parse(raw: &RawFilter<'_>) -> Result<AclFilter, String> {
        let resource_type = match raw.resource_type {
            ANY => TypeFilter::Any,
            6 | 7 => TypeFilter::Unkept,
            code => TypeFilter::Only(
                ResourceType::from_code(code)
                    .ok_or_else(|| format!("Invalid resourceType {code}"))?,
            ),
        };
        let pattern = match raw.pattern {
            ANY => PatternFilter::Any,
            2 => PatternFilter::Match,
            code => PatternFilter::Only(
                PatternType::from_code(code)
                    .ok_or_else(|| format!("Invalid patternType {code}"))?,
            ),
        };
        let operation = match raw.operation {
            ANY => None,
            code => Some(
                Operation::from_code(code).ok_or_else(|| format!("Invalid operation {code}"))?,
            ),
        };
        let permission = match raw.permission {
            ANY => None,
            code => Some(
                Permission::from_code(code)
                    .ok_or_else(|| format!("Invalid permissionType {code}"))?,
            ),
        };
        Ok(AclFilter {
            resource_type,
            name: raw.name.map(str::to_string),
            pattern,
            principal: raw.principal.map(str::to_string),
            host: raw.host.map(str::to_string),
            operation,
            permission,
        })
    }

    /// Whether `b` is selected.
    pub fn matches(&self, b: &AclBinding) -> bool {
        self.matches_resource(b)
            && self.principal.as_ref().is_none_or(|p| *p == b.principal)
            && self.host.as_ref().is_none_or(|h| *h == b.host)
            && self.operation.is_none_or(|o| o == b.operation)
            && self.permission.is_none_or(|p| p == b.permission)
    }

    fn matches_resource(&self, b: &AclBinding) -> bool {
        match self.resource_type {
            TypeFilter::Any => {}
            TypeFilter::Only(t) if t == b.resource_type => {}
            TypeFilter::Only(_) | TypeFilter::Unkept => return false,
        }
        let Some(name) = &self.name else {
            return match self.pattern {
                PatternFilter::Any | PatternFilter::Match => true,
                PatternFilter::Only(p) => p == b.pattern,
            };
        };
        match self.pattern {
            PatternFilter::Any => *name == b.name,
            PatternFilter::Only(p) => p == b.pattern && *name == b.name,
            PatternFilter::Match => match b.pattern {
                PatternType::Literal => *name == b.name || b.name == WILDCARD,
                PatternType::Prefixed => name.starts_with(&b.name),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn binding(t: ResourceType, name: &str, pattern: PatternType) -> AclBinding {
        AclBinding {
            resource_type: t,
            name: name.into(),
            pattern,
            principal: "User:alice".into(),
            host: "*".into(),
            operation: Operation::Read,
            permission: Permission::Allow,
        }
    }

    fn filter(t: i8, name: Option<&str>, pattern: i8) -> AclFilter {
        AclFilter::parse(&RawFilter {
            resource_type: t,
            name,
            pattern,
            principal: None,
            host: None,
            operation: ANY,
            permission: ANY,
        })
        .expect("valid filter")
    }

    #[test]
    fn match_selects_literal_wildcard_and_prefixes_of_the_name() {
        use PatternType::*;
        use ResourceType::*;
        let all = [
            binding(Topic, "orders", Literal),
            binding(Topic, "*", Literal),
            binding(Topic, "ord", Prefixed),
            binding(Topic, "orders-eu", Literal),
            binding(Topic, "x", Prefixed),
            binding(Group, "orders", Literal),
        ];
        let pick = |f: &AclFilter| {
            all.iter()
                .enumerate()
                .filter(|(_, b)| f.matches(b))
                .map(|(i, _)| i)
                .collect::<Vec<_>>()
        };
        assert_eq!(pick(&filter(2, Some("orders"), 2)), vec![0, 1, 2]);
        assert_eq!(pick(&filter(2, Some("orders"), 1)), vec![0]);
        assert_eq!(pick(&filter(1, Some("orders"), 1)), vec![0, 5]);
        assert_eq!(pick(&filter(2, Some("ord"), 4)), vec![2]);
        assert_eq!(pick(&filter(2, None, 4)), vec![2, 4]);
        assert_eq!(pick(&filter(1, None, 1)), vec![0, 1, 2, 3, 4, 5]);
        assert_eq!(pick(&filter(6, None, 1)), Vec::<usize>::new());
    }

    #[test]
    fn unknown_codes_are_refused() {
        for (t, p, o, perm) in [
            (0, 1, 1, 1),
            (2, 0, 1, 1),
            (2, 1, 0, 1),
            (2, 1, 1, 0),
            (9, 1, 1, 1),
        ] {
            let raw = RawFilter {
                resource_type: t,
                name: None,
                pattern: p,
                principal: None,
                host: None,
                operation: o,
                permission: perm,
            };
            assert!(AclFilter::parse(&raw).is_err(), "{raw:?}");
        }
    }
}
