//! Client quotas as controller state (KIP-13, KIP-219; ADR 0028): rates per
//! user and client id entity, with defaults, replicated through group 0 so
//! every node enforces the same limits.
//!
//! An entity names a user, a client id, or both; each part is a name or
//! the default (Kafka's `<default>`). A quota is looked up per key in
//! Kafka's order ([`QuotaTable::lookup`]).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::error::{HelixError, Result};

/// The quota keys Helix enforces (Kafka's names).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum QuotaKey {
    /// Bytes per second a client may produce (a whole number).
    #[serde(rename = "producer_byte_rate")]
    ProducerByteRate,
    /// Bytes per second a client may fetch (a whole number).
    #[serde(rename = "consumer_byte_rate")]
    ConsumerByteRate,
    /// Percent of one request-handling thread's time per second.
    #[serde(rename = "request_percentage")]
    RequestPercentage,
}

impl QuotaKey {
    pub const ALL: [QuotaKey; 3] = [
        QuotaKey::ProducerByteRate,
        QuotaKey::ConsumerByteRate,
        QuotaKey::RequestPercentage,
    ];

    pub fn of_name(name: &str) -> Option<QuotaKey> {
        QuotaKey::ALL.into_iter().find(|k| k.name() == name)
    }

    pub fn name(self) -> &'static str {
        match self {
            QuotaKey::ProducerByteRate => "producer_byte_rate",
            QuotaKey::ConsumerByteRate => "consumer_byte_rate",
            QuotaKey::RequestPercentage => "request_percentage",
        }
    }

    /// Whether values must be whole numbers (Kafka's LONG quotas).
    pub fn integral(self) -> bool {
        !matches!(self, QuotaKey::RequestPercentage)
    }
}

/// A quota's value: finite and above zero (checked before it is stored),
/// so equality is total.
#[derive(Debug, Clone, Copy, PartialEq, PartialOrd, Serialize, Deserialize)]
pub struct QuotaValue(pub f64);

impl Eq for QuotaValue {}

/// One part of an entity: a name, or the default for every name.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EntityName {
    Default,
    Named(String),
}

impl EntityName {
    /// Kafka's wire form: null is the default.
    pub fn of_wire(name: Option<&str>) -> EntityName {
        name.map_or(EntityName::Default, |n| EntityName::Named(n.to_string()))
    }

    pub fn wire(&self) -> Option<&str> {
        match self {
            EntityName::Default => None,
            EntityName::Named(n) => Some(n),
        }
    }
}

/// What a quota applies to: a user, a client id, or a user's client id.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct QuotaEntity {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<EntityName>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_id: Option<EntityName>,
}

/// One entity's changes: keys set to values, keys removed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct QuotaChange {
    pub entity: QuotaEntity,
    #[serde(default)]
    pub set: BTreeMap<QuotaKey, QuotaValue>,
    #[serde(default)]
    pub remove: Vec<QuotaKey>,
}

/// One AlterClientQuotas request's accepted changes, applied together.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct QuotaAlteration {
    pub changes: Vec<QuotaChange>,
}

/// Every entity's quotas.
#[derive(Debug, Default, Clone)]
pub struct QuotaTable {
    entities: BTreeMap<QuotaEntity, BTreeMap<QuotaKey, QuotaValue>>,
}

/// Checks one value as Kafka's `validateQuotaKeyValue` does.
pub fn check_value(key: QuotaKey, value: f64) -> std::result::Result<(), String> {
    if !value.is_finite() || value <= 0.0 {
        return Err(format!("Quota {} must be greater than 0", key.name()));
    }
    if key.integral() {
        if value > i64::MAX as f64 {
            return Err(format!(
                "Proposed value for {} is too large for a LONG.",
                key.name()
            ));
        }
        if (value % 1.0).abs() > 1e-6 {
            return Err(format!("{} cannot be a fractional value.", key.name()));
        }
    }
    Ok(())
}

impl QuotaTable {
    /// Every entity with its quotas, in order.
    pub fn entities(
        &self,
    ) -> impl Iterator<Item = (&QuotaEntity, &BTreeMap<QuotaKey, QuotaValue>)> {
        self.entities.iter()
    }

    pub fn is_empty(&self) -> bool {
        self.entities.is_empty()
    }

    /// The quota on `key` for a client, in Kafka's order of precedence
    /// (its `DefaultQuotaCallback`): user and client id, user and default
    /// client id, user, default user and client id, default user and
    /// default client id, default user, client id, default client id. The
    /// entity that set it comes back too: its named parts say which of the
    /// client's names share the quota's rate.
    pub fn lookup(&self, user: &str, client_id: &str, key: QuotaKey) -> Option<(QuotaEntity, f64)> {
        let named = |n: &str| Some(EntityName::Named(n.to_string()));
        let default = || Some(EntityName::Default);
        let order = [
            (named(user), named(client_id)),
            (named(user), default()),
            (named(user), None),
            (default(), named(client_id)),
            (default(), default()),
            (default(), None),
            (None, named(client_id)),
            (None, default()),
        ];
        order.into_iter().find_map(|(user, client_id)| {
            let entity = QuotaEntity { user, client_id };
            let value = self.entities.get(&entity)?.get(&key)?.0;
            Some((entity, value))
        })
    }

    /// Checks what applying `a` relies on; deterministic.
    pub fn validate(&self, a: &QuotaAlteration) -> Result<()> {
        for (i, c) in a.changes.iter().enumerate() {
            if c.entity.user.is_none() && c.entity.client_id.is_none() {
                return Err(HelixError::InvalidRequest(
                    "Invalid empty client quota entity".into(),
                ));
            }
            if a.changes[..i].iter().any(|o| o.entity == c.entity) {
                return Err(HelixError::InvalidRequest(
                    "an entity changed twice in one command".into(),
                ));
            }
            for (key, value) in &c.set {
                check_value(*key, value.0).map_err(HelixError::InvalidRequest)?;
            }
        }
        Ok(())
    }

    pub fn apply(&mut self, a: QuotaAlteration) {
        for c in a.changes {
            let quotas = self.entities.entry(c.entity.clone()).or_default();
            for key in c.remove {
                quotas.remove(&key);
            }
            quotas.extend(c.set);
            if quotas.is_empty() {
                self.entities.remove(&c.entity);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entity(user: Option<EntityName>, client_id: Option<EntityName>) -> QuotaEntity {
        QuotaEntity { user, client_id }
    }

    fn named(n: &str) -> Option<EntityName> {
        Some(EntityName::Named(n.into()))
    }

    fn set(t: &mut QuotaTable, e: QuotaEntity, value: f64) {
        let a = QuotaAlteration {
            changes: vec![QuotaChange {
                entity: e,
                set: [(QuotaKey::ProducerByteRate, QuotaValue(value))].into(),
                remove: vec![],
            }],
        };
        t.validate(&a).expect("valid");
        t.apply(a);
    }

    #[test]
    fn lookup_follows_kafkas_precedence() {
        let mut t = QuotaTable::default();
        let p = QuotaKey::ProducerByteRate;
        assert_eq!(t.lookup("alice", "app", p), None);
        let steps = [
            (entity(None, Some(EntityName::Default)), 8.0),
            (entity(None, named("app")), 7.0),
            (entity(Some(EntityName::Default), None), 6.0),
            (
                entity(Some(EntityName::Default), Some(EntityName::Default)),
                5.0,
            ),
            (entity(Some(EntityName::Default), named("app")), 4.0),
            (entity(named("alice"), None), 3.0),
            (entity(named("alice"), Some(EntityName::Default)), 2.0),
            (entity(named("alice"), named("app")), 1.0),
        ];
        for (e, v) in steps {
            set(&mut t, e.clone(), v);
            assert_eq!(t.lookup("alice", "app", p), Some((e, v)));
        }
        assert_eq!(t.lookup("bob", "other", p).map(|(_, v)| v), Some(5.0));
        assert_eq!(t.lookup("alice", "app", QuotaKey::ConsumerByteRate), None);
    }

    #[test]
    fn values_are_checked_and_removing_the_last_key_forgets_the_entity() {
        assert!(check_value(QuotaKey::ProducerByteRate, 1.5).is_err());
        assert!(check_value(QuotaKey::ProducerByteRate, 0.0).is_err());
        assert!(check_value(QuotaKey::ProducerByteRate, f64::NAN).is_err());
        assert!(check_value(QuotaKey::RequestPercentage, 12.5).is_ok());
        let mut t = QuotaTable::default();
        set(&mut t, entity(None, named("x")), 1024.0);
        t.apply(QuotaAlteration {
            changes: vec![QuotaChange {
                entity: entity(None, named("x")),
                set: BTreeMap::new(),
                remove: vec![QuotaKey::ProducerByteRate],
            }],
        });
        assert!(t.is_empty());
        let empty = QuotaAlteration {
            changes: vec![QuotaChange {
                entity: entity(None, None),
                set: BTreeMap::new(),
                remove: vec![],
            }],
        };
        assert!(t.validate(&empty).is_err());
    }
}
