//! DescribeClientQuotas (API 48) and AlterClientQuotas (API 49), v0-v1 as
//! Kafka 3.9 serves them, over the controller's replicated quota table
//! (KIP-13, KIP-546; ADR 0028). Entities are users and client ids, alone
//! or together, each a name or the default; the keys are
//! `producer_byte_rate`, `consumer_byte_rate` and `request_percentage`.
//! IP entities (connection creation rates) are refused: Helix limits
//! connections per address by configuration (`max_connections_per_ip`).
//!
//! Not authorized yet: any authenticated client may alter quotas (Kafka
//! asks for ALTER_CONFIGS on the cluster; ACLs are a later slice).

use std::collections::BTreeMap;

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::alter_client_quotas_request::EntryData as AlterEntry;
use kafka_protocol::messages::alter_client_quotas_response::{
    EntityData as AlteredEntity, EntryData as AlteredEntry,
};
use kafka_protocol::messages::describe_client_quotas_response::{EntityData, EntryData, ValueData};
use kafka_protocol::messages::{
    AlterClientQuotasRequest, AlterClientQuotasResponse, DescribeClientQuotasRequest,
    DescribeClientQuotasResponse,
};

use super::wire_str;
use crate::controller::Command;
use crate::controller::quotas::{
    EntityName, QuotaAlteration, QuotaChange, QuotaEntity, QuotaKey, QuotaTable, QuotaValue,
    check_value,
};
use crate::controller::service::Controller;
use crate::error::code;

/// The versions served (Kafka 3.9 serves v0-v1 of both).
pub const DESCRIBE_VERSIONS: (i16, i16) = (0, 1);
pub const ALTER_VERSIONS: (i16, i16) = (0, 1);

const USER: &str = "user";
const CLIENT_ID: &str = "client-id";
const IP: &str = "ip";

const MATCH_EXACT: i8 = 0;
const MATCH_DEFAULT: i8 = 1;
const MATCH_SPECIFIED: i8 = 2;

/// One filter component: the entity type and what its name must be
/// (Some: exactly this, the default being `EntityName::Default`; None: any
/// name, as long as the entity has that part).
type Component = (String, Option<EntityName>);

fn filter(req: &DescribeClientQuotasRequest) -> Result<Vec<Component>, (ResponseError, String)> {
    let invalid = |m: String| Err((ResponseError::InvalidRequest, m));
    let mut out: Vec<Component> = Vec::new();
    for c in &req.components {
        let kind = c.entity_type.as_str();
        if kind.is_empty() {
            return invalid("Invalid empty entity type.".into());
        }
        if out.iter().any(|(k, _)| k == kind) {
            return invalid(format!(
                "Entity type {kind} cannot appear more than once in the filter."
            ));
        }
        if ![USER, CLIENT_ID, IP].contains(&kind) {
            return Err((
                ResponseError::UnsupportedVersion,
                format!("Unsupported entity type {kind}"),
            ));
        }
        let name = match (c.match_type, c._match.as_deref()) {
            (MATCH_EXACT, Some(m)) => Some(EntityName::Named(m.to_string())),
            (MATCH_EXACT, None) => {
                return invalid(
                    "Request specified MATCH_TYPE_EXACT, but set match string to null.".into(),
                );
            }
            (MATCH_DEFAULT, None) => Some(EntityName::Default),
            (MATCH_SPECIFIED, None) => None,
            (MATCH_DEFAULT | MATCH_SPECIFIED, Some(_)) => {
                return invalid(
                    "Request specified a match string with a match type that takes none.".into(),
                );
            }
            (other, _) => return invalid(format!("Unknown match type {other}")),
        };
        out.push((kind.to_string(), name));
    }
    let has = |k: &str| out.iter().any(|(kind, _)| kind == k);
    if has(IP) && (has(USER) || has(CLIENT_ID)) {
        return invalid(
            "Invalid entity filter component combination. IP filter component should not be used with user or clientId filter component.".into(),
        );
    }
    Ok(out)
}

/// The entity's part of `kind`.
fn part<'a>(e: &'a QuotaEntity, kind: &str) -> Option<&'a EntityName> {
    match kind {
        USER => e.user.as_ref(),
        CLIENT_ID => e.client_id.as_ref(),
        _ => None,
    }
}

pub fn describe(
    table: &QuotaTable,
    req: &DescribeClientQuotasRequest,
) -> DescribeClientQuotasResponse {
    let mut resp = DescribeClientQuotasResponse::default();
    let components = match filter(req) {
        Ok(c) => c,
        Err((error, message)) => {
            resp.error_code = code(error);
            resp.error_message = Some(wire_str(&message));
            return resp;
        }
    };
    let matches = |e: &QuotaEntity| {
        let parts = usize::from(e.user.is_some()) + usize::from(e.client_id.is_some());
        (!req.strict || parts == components.len())
            && components
                .iter()
                .all(|(kind, want)| match (part(e, kind), want) {
                    (None, _) => false,
                    (Some(_), None) => true,
                    (Some(have), Some(want)) => have == want,
                })
    };
    let entries = table
        .entities()
        .filter(|(e, _)| matches(e))
        .map(|(e, quotas)| {
            let mut entity = Vec::new();
            for (kind, name) in [(USER, &e.user), (CLIENT_ID, &e.client_id)] {
                if let Some(name) = name {
                    entity.push(
                        EntityData::default()
                            .with_entity_type(wire_str(kind))
                            .with_entity_name(name.wire().map(wire_str)),
                    );
                }
            }
            let values = quotas
                .iter()
                .map(|(k, v)| {
                    ValueData::default()
                        .with_key(wire_str(k.name()))
                        .with_value(v.0)
                })
                .collect();
            EntryData::default().with_entity(entity).with_values(values)
        })
        .collect();
    resp.entries = Some(entries);
    resp
}

/// One request entry as a change, or why it is refused.
fn change_of(entry: &AlterEntry) -> Result<QuotaChange, String> {
    let mut entity = QuotaEntity {
        user: None,
        client_id: None,
    };
    if entry.entity.is_empty() {
        return Err("Invalid empty client quota entity".into());
    }
    for e in &entry.entity {
        let kind = e.entity_type.as_str();
        let slot = match kind {
            USER => &mut entity.user,
            CLIENT_ID => &mut entity.client_id,
            IP => {
                return Err(
                    "IP quotas are not supported by Helix (see max_connections_per_ip)".into(),
                );
            }
            other => return Err(format!("Unhandled client quota entity type: {other}")),
        };
        if slot.is_some() {
            return Err(format!(
                "Invalid client quota entity, duplicate entity entry {kind}"
            ));
        }
        if e.entity_name.as_deref() == Some("") {
            return Err(format!("Empty {kind} not supported"));
        }
        *slot = Some(EntityName::of_wire(e.entity_name.as_deref()));
    }
    let mut change = QuotaChange {
        entity,
        set: BTreeMap::new(),
        remove: Vec::new(),
    };
    let mut seen: Vec<&str> = Vec::new();
    for op in &entry.ops {
        let name = op.key.as_str();
        if seen.contains(&name) {
            return Err(format!(
                "Duplicate quota key {name} not updating quota for this entity"
            ));
        }
        seen.push(name);
        let key =
            QuotaKey::of_name(name).ok_or_else(|| format!("Invalid configuration key {name}"))?;
        if op.remove {
            change.remove.push(key);
        } else {
            check_value(key, op.value)?;
            change.set.insert(key, QuotaValue(op.value));
        }
    }
    Ok(change)
}

pub async fn alter(
    controller: &Controller,
    req: AlterClientQuotasRequest,
) -> AlterClientQuotasResponse {
    let mut checked: Vec<Result<QuotaChange, String>> = req.entries.iter().map(change_of).collect();
    // An entity given twice is refused both times, as Kafka ignores it.
    for i in 0..checked.len() {
        let twice = match &checked[i] {
            Ok(c) => checked
                .iter()
                .enumerate()
                .any(|(j, o)| j != i && o.as_ref().is_ok_and(|o| o.entity == c.entity)),
            Err(_) => false,
        };
        if twice {
            checked[i] = Err("Ignoring duplicate entity".into());
        }
    }
    let changes: Vec<QuotaChange> = checked
        .iter()
        .filter_map(|c| c.as_ref().ok().cloned())
        .collect();
    let outcome = if changes.is_empty() || req.validate_only {
        Ok(())
    } else {
        controller
            .submit(Command::AlterClientQuotas(QuotaAlteration { changes }))
            .await
            .map(|_| ())
    };
    let mut resp = AlterClientQuotasResponse::default();
    for (entry, result) in req.entries.iter().zip(checked) {
        let entity = entry
            .entity
            .iter()
            .map(|e| {
                AlteredEntity::default()
                    .with_entity_type(e.entity_type.clone())
                    .with_entity_name(e.entity_name.clone())
            })
            .collect();
        let mut out = AlteredEntry::default().with_entity(entity);
        match (result, &outcome) {
            (Err(message), _) => {
                out.error_code = code(ResponseError::InvalidRequest);
                out.error_message = Some(wire_str(&message));
            }
            (Ok(_), Err(e)) => {
                out.error_code = e.kafka_code();
                out.error_message = Some(wire_str(&e.message()));
            }
            (Ok(_), Ok(())) => {}
        }
        resp.entries.push(out);
    }
    resp
}

#[cfg(test)]
mod tests {
    use kafka_protocol::messages::alter_client_quotas_request::{EntityData as In, OpData};
    use kafka_protocol::messages::describe_client_quotas_request::ComponentData;

    use super::*;

    fn entry(entity: &[(&str, Option<&str>)], ops: &[(&str, f64, bool)]) -> AlterEntry {
        AlterEntry::default()
            .with_entity(
                entity
                    .iter()
                    .map(|(t, n)| {
                        In::default()
                            .with_entity_type(wire_str(t))
                            .with_entity_name(n.map(wire_str))
                    })
                    .collect(),
            )
            .with_ops(
                ops.iter()
                    .map(|(k, v, remove)| {
                        OpData::default()
                            .with_key(wire_str(k))
                            .with_value(*v)
                            .with_remove(*remove)
                    })
                    .collect(),
            )
    }

    #[test]
    fn entries_are_checked_as_kafka_checks_them() {
        let ok = change_of(&entry(
            &[("user", Some("alice")), ("client-id", None)],
            &[
                ("producer_byte_rate", 1024.0, false),
                ("request_percentage", 0.0, true),
            ],
        ))
        .expect("valid");
        assert_eq!(ok.entity.user, Some(EntityName::Named("alice".into())));
        assert_eq!(ok.entity.client_id, Some(EntityName::Default));
        assert_eq!(ok.remove, vec![QuotaKey::RequestPercentage]);
        for bad in [
            entry(&[], &[]),
            entry(
                &[("ip", Some("1.2.3.4"))],
                &[("connection_creation_rate", 1.0, false)],
            ),
            entry(&[("group", Some("g"))], &[]),
            entry(&[("user", Some("a")), ("user", Some("b"))], &[]),
            entry(&[("user", Some(""))], &[]),
            entry(
                &[("user", Some("a"))],
                &[("producer_byte_rate", 1.5, false)],
            ),
            entry(
                &[("user", Some("a"))],
                &[("producer_byte_rate", -1.0, false)],
            ),
            entry(&[("user", Some("a"))], &[("bogus", 1.0, false)]),
            entry(
                &[("user", Some("a"))],
                &[
                    ("producer_byte_rate", 1.0, false),
                    ("producer_byte_rate", 2.0, false),
                ],
            ),
        ] {
            assert!(change_of(&bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn describe_filters_as_kafka_does() {
        let mut table = QuotaTable::default();
        let changes = [
            entry(
                &[("client-id", Some("app"))],
                &[("producer_byte_rate", 5.0, false)],
            ),
            entry(
                &[("client-id", None)],
                &[("consumer_byte_rate", 6.0, false)],
            ),
            entry(
                &[("user", Some("alice")), ("client-id", Some("app"))],
                &[("request_percentage", 50.0, false)],
            ),
        ]
        .iter()
        .map(|e| change_of(e).expect("valid"))
        .collect();
        table.apply(QuotaAlteration { changes });
        let component = |t: &str, m: i8, name: Option<&str>| {
            ComponentData::default()
                .with_entity_type(wire_str(t))
                .with_match_type(m)
                .with_match(name.map(wire_str))
        };
        let ask = |components: Vec<ComponentData>, strict: bool| {
            let r = describe(
                &table,
                &DescribeClientQuotasRequest::default()
                    .with_components(components)
                    .with_strict(strict),
            );
            (r.error_code, r.entries.map_or(0, |e| e.len()))
        };
        assert_eq!(
            ask(vec![component("client-id", 0, Some("app"))], false),
            (0, 2)
        );
        assert_eq!(
            ask(vec![component("client-id", 0, Some("app"))], true),
            (0, 1)
        );
        assert_eq!(ask(vec![component("client-id", 1, None)], true), (0, 1));
        assert_eq!(ask(vec![component("client-id", 2, None)], false), (0, 3));
        assert_eq!(ask(vec![component("user", 2, None)], false), (0, 1));
        assert_eq!(ask(vec![], false), (0, 3));
        assert_eq!(ask(vec![component("user", 0, None)], false), (42, 0));
        assert_eq!(ask(vec![component("topic", 2, None)], false), (35, 0));
        assert_eq!(
            ask(
                vec![component("ip", 2, None), component("user", 2, None)],
                false
            ),
            (42, 0)
        );
    }
}
