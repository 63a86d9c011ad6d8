//! Configs of the broker itself, beyond describing its settings
//! (`configs.rs`): its loggers (Kafka's `broker-loggers`, resource type
//! BROKER_LOGGER), described and changed at runtime through
//! `crate::log_levels`; and the answer to a change of its settings
//! (resource type BROKER), which Helix reads only at start: Kafka's own
//! answer for settings that cannot change at runtime, naming them.

use crate::controller::topic_config::ConfigSource;
use crate::error::HelixError;
use crate::log_levels;

/// One described config: (name, value, source, read-only, Kafka's type
/// code).
pub type Entry = (String, String, ConfigSource, bool, i8);

/// Kafka's type code for a string config (the loggers' levels).
const TYPE_STRING: i8 = 2;

/// Checks that a BROKER_LOGGER resource names this node, as Kafka's
/// `ConfigHelper` does (the loggers are one node's).
fn this_node(node_id: i32, name: &str) -> Result<(), HelixError> {
    if name.is_empty() {
        return Err(HelixError::InvalidRequest(
            "Broker id must not be empty".into(),
        ));
    }
    if name != node_id.to_string() {
        return Err(HelixError::InvalidRequest(format!(
            "Unexpected broker id, expected {node_id} but received {name}"
        )));
    }
    Ok(())
}

/// The loggers and their levels (DescribeConfigs, BROKER_LOGGER).
pub fn describe_loggers(node_id: i32, name: &str) -> Result<Vec<Entry>, HelixError> {
    this_node(node_id, name)?;
    Ok(log_levels::loggers()
        .into_iter()
        .map(|(logger, level)| {
            (
                logger,
                level,
                ConfigSource::DynamicBrokerLogger,
                false,
                TYPE_STRING,
            )
        })
        .collect())
}

/// Changes loggers' levels (IncrementalAlterConfigs, BROKER_LOGGER): SET
/// a log4j level, or DELETE (back to the root's level).
pub fn alter_loggers(
    node_id: i32,
    name: &str,
    changes: &[log_levels::Change],
    validate_only: bool,
) -> Result<(), HelixError> {
    this_node(node_id, name)?;
    log_levels::set(changes, validate_only).map_err(HelixError::InvalidConfig)
}

/// A change to the broker's settings (AlterConfigs or
/// IncrementalAlterConfigs, BROKER; `name` empty: the cluster default).
/// Helix reads them at start only, so every one is refused as Kafka
/// refuses a setting that cannot change at runtime: INVALID_REQUEST
/// "Cannot update these configs dynamically: Set(...)"
/// (docs/configuration.md, "Changing settings at runtime").
pub fn alter_broker(node_id: i32, name: &str, configs: &[String]) -> Result<(), HelixError> {
    if !name.is_empty() && name != node_id.to_string() {
        let reason = match name.parse::<i64>() {
            Ok(_) => format!("Unexpected broker id, expected {node_id}, but received {name}"),
            Err(_) => format!("Node id must be an integer, but it is: {name}"),
        };
        return Err(HelixError::InvalidRequest(reason));
    }
    if configs.is_empty() {
        return Ok(());
    }
    Err(HelixError::InvalidRequest(format!(
        "Cannot update these configs dynamically: Set({})",
        configs.join(", ")
    )))
}
