//! Topic configuration: the settings a topic may override, their defaults
//! (from the broker config), validation, and the values the write and read
//! paths use.

use std::collections::BTreeMap;

use crate::config::Config;
use crate::error::{HelixError, Result};

/// Where a config value comes from (Kafka's DescribeConfigs `config_source`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConfigSource {
    /// Set on the topic (CreateTopics configs, AlterConfigs).
    DynamicTopic = 1,
    /// From the broker's configuration file or flags.
    StaticBroker = 4,
    /// Kafka's built-in default.
    Default = 5,
}

/// A topic setting Helix understands.
#[derive(Debug, Clone, Copy)]
pub struct ConfigDef {
    pub name: &'static str,
    pub kind: ConfigKind,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConfigKind {
    /// A number with an inclusive minimum.
    Long { min: i64 },
    /// One of a fixed set of words.
    Choice(&'static [&'static str]),
}

/// Every topic setting Helix accepts. Each one takes effect: retention in
/// the retention sweep, max.message.bytes in produce validation,
/// segment.bytes is recorded for the WAL's segment rolling;
/// min.insync.replicas is accepted up to the majority of the replicas, which
/// Raft's acknowledgement rule always meets (ADR 0014).
pub const TOPIC_CONFIGS: &[ConfigDef] = &[
    ConfigDef {
        name: "cleanup.policy",
        kind: ConfigKind::Choice(&["delete"]),
    },
    ConfigDef {
        name: "max.message.bytes",
        kind: ConfigKind::Long { min: 0 },
    },
    ConfigDef {
        name: "message.timestamp.type",
        kind: ConfigKind::Choice(&["CreateTime"]),
    },
    ConfigDef {
        name: "retention.bytes",
        kind: ConfigKind::Long { min: -1 },
    },
    ConfigDef {
        name: "retention.ms",
        kind: ConfigKind::Long { min: -1 },
    },
    ConfigDef {
        name: "segment.bytes",
        kind: ConfigKind::Long { min: 14 },
    },
    ConfigDef {
        name: "min.insync.replicas",
        kind: ConfigKind::Long { min: 1 },
    },
    ConfigDef {
        name: "compression.type",
        kind: ConfigKind::Choice(&["producer", "uncompressed", "gzip", "snappy", "lz4", "zstd"]),
    },
];

/// The default value of a setting for a topic of `replication_factor`, and
/// where it comes from.
pub fn default_value(
    name: &str,
    broker: &Config,
    replication_factor: usize,
) -> Option<(String, ConfigSource)> {
    let v = match name {
        // What acks=all waits for: a majority of the replicas (ADR 0014).
        "min.insync.replicas" => (
            majority(replication_factor).to_string(),
            ConfigSource::Default,
        ),
        "cleanup.policy" => ("delete".to_string(), ConfigSource::Default),
        "max.message.bytes" => (
            broker.max_message_bytes.to_string(),
            ConfigSource::StaticBroker,
        ),
        "message.timestamp.type" => ("CreateTime".to_string(), ConfigSource::Default),
        "retention.bytes" => (
            broker.retention_bytes.to_string(),
            ConfigSource::StaticBroker,
        ),
        "retention.ms" => (broker.retention_ms.to_string(), ConfigSource::StaticBroker),
        "segment.bytes" => ((1i64 << 30).to_string(), ConfigSource::Default),
        "compression.type" => ("producer".to_string(), ConfigSource::Default),
        _ => return None,
    };
    Some(v)
}

/// Checks a name and value; returns the value normalised.
pub fn validate(name: &str, value: &str) -> Result<String> {
    let def = TOPIC_CONFIGS
        .iter()
        .find(|d| d.name == name)
        .ok_or_else(|| HelixError::InvalidConfig(format!("unknown topic config {name}")))?;
    match def.kind {
        ConfigKind::Long { min } => {
            let v: i64 = value.trim().parse().map_err(|_| {
                HelixError::InvalidConfig(format!("{name}: {value:?} is not a number"))
            })?;
            if v < min {
                return Err(HelixError::InvalidConfig(format!(
                    "{name}: {v} is below {min}"
                )));
            }
            if name == "max.message.bytes" && v > i64::from(i32::MAX) {
                return Err(HelixError::InvalidConfig(format!(
                    "{name}: {v} is too large"
                )));
            }
            Ok(v.to_string())
        }
        ConfigKind::Choice(words) => {
            let v = value.trim();
            if words.contains(&v) {
                Ok(v.to_string())
            } else {
                Err(HelixError::InvalidConfig(format!(
                    "{name}: {v:?} is not one of {words:?}"
                )))
            }
        }
    }
}

/// The replicas a write is on when Helix acknowledges it (acks=all): a
/// majority of `replication_factor`.
pub fn majority(replication_factor: usize) -> usize {
    replication_factor / 2 + 1
}

/// Checks the overrides that depend on the replication factor: a
/// min.insync.replicas above the majority would promise more than Raft's
/// acknowledgement gives (ADR 0014).
pub fn check_replication(
    configs: &BTreeMap<String, String>,
    replication_factor: usize,
) -> Result<()> {
    let Some(min) = configs
        .get("min.insync.replicas")
        .and_then(|v| v.parse::<usize>().ok())
    else {
        return Ok(());
    };
    let most = majority(replication_factor);
    if min > most {
        return Err(HelixError::InvalidConfig(format!(
            "min.insync.replicas: {min} is above {most}, the majority of the topic's \
             {replication_factor} replicas; Helix acknowledges a write (acks=all) once a \
             majority has it, so values up to {most} always hold and larger ones are not \
             supported"
        )));
    }
    Ok(())
}

/// Validates a whole set of overrides.
pub fn validate_all(configs: &BTreeMap<String, String>) -> Result<BTreeMap<String, String>> {
    configs
        .iter()
        .map(|(k, v)| Ok((k.clone(), validate(k, v)?)))
        .collect()
}

/// The values the data path uses, resolved from overrides and defaults.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EffectiveConfig {
    pub max_message_bytes: i32,
    pub retention_ms: i64,
    pub retention_bytes: i64,
    pub segment_bytes: i64,
}

impl EffectiveConfig {
    pub fn resolve(overrides: &BTreeMap<String, String>, broker: &Config) -> EffectiveConfig {
        let long = |name: &str, default: i64| {
            overrides
                .get(name)
                .and_then(|v| v.parse::<i64>().ok())
                .unwrap_or(default)
        };
        EffectiveConfig {
            max_message_bytes: long("max.message.bytes", i64::from(broker.max_message_bytes))
                .clamp(0, i64::from(i32::MAX)) as i32,
            retention_ms: long("retention.ms", broker.retention_ms),
            retention_bytes: long("retention.bytes", broker.retention_bytes),
            segment_bytes: long("segment.bytes", 1 << 30),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_configs_are_validated_and_unknown_refused() {
        assert_eq!(validate("retention.ms", " 1000 ").expect("valid"), "1000");
        assert!(validate("retention.ms", "-2").is_err());
        assert!(validate("retention.ms", "soon").is_err());
        assert!(validate("cleanup.policy", "compact").is_err());
        assert!(validate("no.such.config", "1").is_err());
        assert!(validate("min.insync.replicas", "0").is_err());
        let min = |v: &str| BTreeMap::from([("min.insync.replicas".to_string(), v.to_string())]);
        assert!(check_replication(&min("2"), 3).is_ok());
        assert!(
            check_replication(&min("3"), 3).is_err(),
            "3 of 3 is more than Raft waits for"
        );
        assert!(check_replication(&min("3"), 5).is_ok());
        assert!(check_replication(&min("1"), 1).is_ok());
        assert!(check_replication(&BTreeMap::new(), 1).is_ok());
    }

    #[test]
    fn overrides_take_effect_over_broker_defaults() {
        let broker = Config::default();
        let mut o = BTreeMap::new();
        o.insert("max.message.bytes".to_string(), "2048".to_string());
        let e = EffectiveConfig::resolve(&o, &broker);
        assert_eq!(e.max_message_bytes, 2048);
        assert_eq!(e.retention_ms, broker.retention_ms);
    }
}
