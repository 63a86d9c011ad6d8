//! Topic configuration: the settings a topic may override, their defaults
//! (from the broker config), validation, and the values the write and read
//! paths use.

use std::collections::BTreeMap;

use crate::config::{CleanupPolicy, Config};
use crate::error::{HelixError, Result};
use crate::replica::recompress::TopicCompression;

/// Where a config value comes from (Kafka's DescribeConfigs `config_source`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConfigSource {
    /// Set on the topic (CreateTopics configs, AlterConfigs).
    DynamicTopic = 1,
    /// From the broker's configuration file or flags.
    StaticBroker = 4,
    /// Kafka's built-in default.
    Default = 5,
    /// A logger's level, changed at runtime or not (BROKER_LOGGER).
    DynamicBrokerLogger = 6,
}

/// A topic config Kafka defines, and how Helix treats it.
#[derive(Debug, Clone, Copy)]
pub struct ConfigDef {
    pub name: &'static str,
    pub kind: ConfigKind,
    /// Kafka 3.9's default, what DescribeConfigs shows when nothing sets it.
    pub kafka_default: &'static str,
    /// Kafka's `config_type` code (DescribeConfigs v3+).
    pub config_type: ConfigType,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConfigKind {
    /// Applied: a number with an inclusive minimum.
    Long { min: i64 },
    /// Applied: one of the words Helix supports.
    Choice(&'static [&'static str]),
    /// Applied: an integer in `min..=max`, or exactly `or` when given
    /// (Kafka's compression level validators).
    Range { min: i64, max: i64, or: Option<i64> },
    /// Applied: a list of `compact` and `delete` (`cleanup.policy`).
    Policy,
    /// Applied: a fraction in `[0, 1]` (`min.cleanable.dirty.ratio`).
    Fraction,
    /// Known to Kafka, not applied by Helix: only Kafka's default value is
    /// accepted, so a topic never claims a behaviour it does not have.
    KafkaDefaultOnly,
    /// Accepted with Kafka's own validation, stored and described, and
    /// without effect, as in Kafka 3.9 (deprecated settings Kafka itself
    /// ignores, and settings for paths Helix does not have).
    Ignored(Accepts),
}

/// What an [`ConfigKind::Ignored`] setting accepts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Accepts {
    /// A Kafka version (`message.format.version`).
    MetadataVersion,
    /// true or false, in any case.
    Boolean,
}

/// Kafka's `config_type` codes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConfigType {
    Boolean = 1,
    String = 2,
    Int = 3,
    Long = 5,
    Double = 6,
    List = 7,
}

const fn def(
    name: &'static str,
    kind: ConfigKind,
    kafka_default: &'static str,
    config_type: ConfigType,
) -> ConfigDef {
    ConfigDef {
        name,
        kind,
        kafka_default,
        config_type,
    }
}

use ConfigKind::{Choice, Fraction, Ignored, KafkaDefaultOnly as Fixed, Long, Policy, Range};
use ConfigType as T;

const LONG_MAX: &str = "9223372036854775807";

/// Every topic config of Kafka 3.9, sorted by name (the order
/// DescribeConfigs answers in). The applied ones take effect: retention in
/// the retention sweep (when `cleanup.policy` has `delete`); the
/// compaction settings in the log cleaner (ADR 0027); segment.bytes, segment.ms and index.interval.bytes
/// in the WAL's segments; max.message.bytes, message.timestamp.type and the
/// timestamp bounds on produce; min.insync.replicas up to the majority of
/// the replicas, which Raft's acknowledgement rule always meets (ADR 0014).
/// docs/configuration.md has the table.
pub const TOPIC_CONFIGS: &[ConfigDef] = &[
    def("cleanup.policy", Policy, "delete", T::List),
    def(
        "compression.gzip.level",
        Range {
            min: 1,
            max: 9,
            or: Some(-1),
        },
        "-1",
        T::Int,
    ),
    def(
        "compression.lz4.level",
        Range {
            min: 1,
            max: 17,
            or: None,
        },
        "9",
        T::Int,
    ),
    def(
        "compression.type",
        Choice(&["uncompressed", "zstd", "lz4", "snappy", "gzip", "producer"]),
        "producer",
        T::String,
    ),
    def(
        "compression.zstd.level",
        Range {
            min: -131072,
            max: 22,
            or: None,
        },
        "3",
        T::Int,
    ),
    def("delete.retention.ms", Long { min: 0 }, "86400000", T::Long),
    def("file.delete.delay.ms", Fixed, "60000", T::Long),
    def("flush.messages", Fixed, LONG_MAX, T::Long),
    def("flush.ms", Fixed, LONG_MAX, T::Long),
    def(
        "follower.replication.throttled.replicas",
        Fixed,
        "",
        T::List,
    ),
    def("index.interval.bytes", Long { min: 0 }, "4096", T::Int),
    def("leader.replication.throttled.replicas", Fixed, "", T::List),
    def("local.retention.bytes", Fixed, "-2", T::Long),
    def("local.retention.ms", Fixed, "-2", T::Long),
    def("max.compaction.lag.ms", Long { min: 1 }, LONG_MAX, T::Long),
    def("max.message.bytes", Long { min: 0 }, "1048588", T::Int),
    // Down-conversion serves Fetch v0-v3, which Helix does not serve.
    def(
        "message.downconversion.enable",
        Ignored(Accepts::Boolean),
        "true",
        T::Boolean,
    ),
    // Ignored by Kafka since inter-broker protocol 3.0 (deprecated).
    def(
        "message.format.version",
        Ignored(Accepts::MetadataVersion),
        "3.0-IV1",
        T::String,
    ),
    def(
        "message.timestamp.after.max.ms",
        Long { min: 0 },
        LONG_MAX,
        T::Long,
    ),
    def(
        "message.timestamp.before.max.ms",
        Long { min: 0 },
        LONG_MAX,
        T::Long,
    ),
    // Deprecated; Kafka 3.9 still uses it for before/after left unset.
    def(
        "message.timestamp.difference.max.ms",
        Long { min: 0 },
        LONG_MAX,
        T::Long,
    ),
    def(
        "message.timestamp.type",
        Choice(&["CreateTime", "LogAppendTime"]),
        "CreateTime",
        T::String,
    ),
    def("min.cleanable.dirty.ratio", Fraction, "0.5", T::Double),
    def("min.compaction.lag.ms", Long { min: 0 }, "0", T::Long),
    def("min.insync.replicas", Long { min: 1 }, "1", T::Int),
    def("preallocate", Fixed, "false", T::Boolean),
    def("remote.log.copy.disable", Fixed, "false", T::Boolean),
    def("remote.log.delete.on.disable", Fixed, "false", T::Boolean),
    def("remote.storage.enable", Fixed, "false", T::Boolean),
    def("retention.bytes", Long { min: -1 }, "-1", T::Long),
    def("retention.ms", Long { min: -1 }, "604800000", T::Long),
    def("segment.bytes", Long { min: 14 }, "1073741824", T::Int),
    def("segment.index.bytes", Fixed, "10485760", T::Int),
    def("segment.jitter.ms", Fixed, "0", T::Long),
    def("segment.ms", Long { min: 1 }, "604800000", T::Long),
    def("unclean.leader.election.enable", Fixed, "false", T::Boolean),
];

/// The definition of `name`, if Kafka has such a topic config.
pub fn find(name: &str) -> Option<&'static ConfigDef> {
    TOPIC_CONFIGS.iter().find(|d| d.name == name)
}

/// The value of a setting for a topic of `replication_factor` when the
/// topic does not set it, and where it comes from: the broker's setting
/// where Helix has one (a source of "broker" when it differs from Kafka's
/// default), Kafka's default otherwise.
pub fn default_value(
    def: &ConfigDef,
    broker: &Config,
    replication_factor: usize,
) -> (String, ConfigSource) {
    let from_broker = |value: String| {
        let source = if value == def.kafka_default {
            ConfigSource::Default
        } else {
            ConfigSource::StaticBroker
        };
        (value, source)
    };
    match def.name {
        // What acks=all waits for: a majority of the replicas (ADR 0014).
        "min.insync.replicas" => (
            majority(replication_factor).to_string(),
            ConfigSource::Default,
        ),
        "max.message.bytes" => from_broker(broker.max_message_bytes.to_string()),
        "retention.bytes" => from_broker(broker.retention_bytes.to_string()),
        "retention.ms" => from_broker(broker.retention_ms.to_string()),
        "cleanup.policy" => from_broker(broker.cleaner.cleanup_policy.clone()),
        "min.cleanable.dirty.ratio" => from_broker(broker.cleaner.min_cleanable_ratio.to_string()),
        "delete.retention.ms" => from_broker(broker.cleaner.delete_retention_ms.to_string()),
        "min.compaction.lag.ms" => from_broker(broker.cleaner.min_compaction_lag_ms.to_string()),
        "max.compaction.lag.ms" => from_broker(broker.cleaner.max_compaction_lag_ms.to_string()),
        _ => (def.kafka_default.to_string(), ConfigSource::Default),
    }
}

/// Every topic config with its value for a topic of `replication_factor`
/// whose overrides are `configs`, and the value's source (what
/// DescribeConfigs and CreateTopics v5+ answer).
pub fn describe<'a>(
    configs: &'a BTreeMap<String, String>,
    broker: &'a Config,
    replication_factor: usize,
) -> impl Iterator<Item = (&'static ConfigDef, String, ConfigSource)> + 'a {
    TOPIC_CONFIGS.iter().map(move |d| {
        let (value, source) = match configs.get(d.name) {
            Some(v) => (v.clone(), ConfigSource::DynamicTopic),
            None => default_value(d, broker, replication_factor),
        };
        (d, value, source)
    })
}

/// Checks a name and value; returns the value normalised.
pub fn validate(name: &str, value: &str) -> Result<String> {
    let def = find(name).ok_or_else(|| {
        HelixError::InvalidConfig(format!(
            "unknown topic config {name}: Kafka has no topic config of that name"
        ))
    })?;
    let v = value.trim();
    match def.kind {
        ConfigKind::Long { min } => {
            let n: i64 = v.parse().map_err(|_| {
                HelixError::InvalidConfig(format!("{name}: {value:?} is not a number"))
            })?;
            if n < min {
                return Err(HelixError::InvalidConfig(format!(
                    "{name}: {n} is below {min}"
                )));
            }
            if def.config_type == ConfigType::Int && n > i64::from(i32::MAX) {
                return Err(HelixError::InvalidConfig(format!(
                    "{name}: {n} is too large"
                )));
            }
            Ok(n.to_string())
        }
        ConfigKind::Range { min, max, or } => {
            let n: i64 = v.parse().map_err(|_| {
                HelixError::InvalidConfig(format!("{name}: {value:?} is not a number"))
            })?;
            if (min..=max).contains(&n) || or == Some(n) {
                return Ok(n.to_string());
            }
            let also = or.map_or(String::new(), |o| format!(" or equal to {o}"));
            Err(HelixError::InvalidConfig(format!(
                "{name}: Value must be between {min} and {max}{also}"
            )))
        }
        ConfigKind::Policy => match CleanupPolicy::parse(v) {
            Some(_) => Ok(v
                .split(',')
                .map(str::trim)
                .filter(|i| !i.is_empty())
                .collect::<Vec<_>>()
                .join(",")),
            None => Err(HelixError::InvalidConfig(format!(
                "Invalid value {v} for configuration {name}: String must be one of: compact, delete"
            ))),
        },
        ConfigKind::Fraction => match v.parse::<f64>() {
            Ok(x) if (0.0..=1.0).contains(&x) => Ok(x.to_string()),
            Ok(x) if x < 0.0 => Err(HelixError::InvalidConfig(format!(
                "Invalid value {v} for configuration {name}: Value must be at least 0.0"
            ))),
            Ok(_) => Err(HelixError::InvalidConfig(format!(
                "Invalid value {v} for configuration {name}: Value must be no more than 1.0"
            ))),
            Err(_) => Err(HelixError::InvalidConfig(format!(
                "{name}: {value:?} is not a number"
            ))),
        },
        ConfigKind::Choice(words) => {
            if words.contains(&v) {
                Ok(v.to_string())
            } else {
                Err(HelixError::InvalidConfig(format!(
                    "{name}: Helix does not support {v:?} (supported: {})",
                    words.join(", ")
                )))
            }
        }
        ConfigKind::Ignored(Accepts::MetadataVersion) => {
            if super::message_format::is_valid(v) {
                Ok(v.to_string())
            } else {
                Err(HelixError::InvalidConfig(format!(
                    "{name}: Version {v} is not a valid version"
                )))
            }
        }
        ConfigKind::Ignored(Accepts::Boolean) => {
            if v.eq_ignore_ascii_case("true") || v.eq_ignore_ascii_case("false") {
                Ok(v.to_string())
            } else {
                Err(HelixError::InvalidConfig(format!(
                    "{name}: {v:?} is not true or false"
                )))
            }
        }
        ConfigKind::KafkaDefaultOnly => {
            if same_value(def, v) {
                Ok(def.kafka_default.to_string())
            } else {
                Err(HelixError::InvalidConfig(format!(
                    "{name}: Helix does not support {v:?}; it accepts only Kafka's default {:?}",
                    def.kafka_default
                )))
            }
        }
    }
}

/// Whether `value` means Kafka's default of `def`, compared as its type.
fn same_value(def: &ConfigDef, value: &str) -> bool {
    let default = def.kafka_default;
    match def.config_type {
        ConfigType::Boolean => value.eq_ignore_ascii_case(default),
        ConfigType::Int | ConfigType::Long => value.parse::<i64>().ok() == default.parse().ok(),
        ConfigType::Double => value.parse::<f64>().ok() == default.parse().ok(),
        ConfigType::List => {
            let items = |s: &str| -> Vec<String> {
                s.split(',')
                    .map(str::trim)
                    .filter(|i| !i.is_empty())
                    .map(str::to_string)
                    .collect()
            };
            items(value) == items(default)
        }
        ConfigType::String => value == default,
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
    let valid: BTreeMap<String, String> = configs
        .iter()
        .map(|(k, v)| Ok((k.clone(), validate(k, v)?)))
        .collect::<Result<_>>()?;
    // Kafka's `LogConfig.validateValues`.
    let lag = |name: &str, default: i64| {
        valid
            .get(name)
            .and_then(|v| v.parse::<i64>().ok())
            .unwrap_or(default)
    };
    let (min, max) = (
        lag("min.compaction.lag.ms", 0),
        lag("max.compaction.lag.ms", i64::MAX),
    );
    if min > max {
        return Err(HelixError::InvalidConfig(format!(
            "conflict topic config setting min.compaction.lag.ms ({min}) > max.compaction.lag.ms ({max})"
        )));
    }
    Ok(valid)
}

/// The values the data path uses, resolved from overrides and defaults.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct EffectiveConfig {
    /// cleanup.policy: `delete` runs retention, `compact` the cleaner.
    pub cleanup: CleanupPolicy,
    /// min.cleanable.dirty.ratio, min/max.compaction.lag.ms and
    /// delete.retention.ms: what the cleaner reads (ADR 0027).
    pub compaction: CompactionSettings,
    pub max_message_bytes: i32,
    pub retention_ms: i64,
    pub retention_bytes: i64,
    pub segment_bytes: i64,
    pub segment_ms: i64,
    pub index_interval_bytes: i64,
    /// message.timestamp.type=LogAppendTime: the leader stamps its clock
    /// into every batch it accepts.
    pub log_append_time: bool,
    /// message.timestamp.before.max.ms (CreateTime topics only).
    pub timestamp_before_max_ms: i64,
    /// message.timestamp.after.max.ms (CreateTime topics only).
    pub timestamp_after_max_ms: i64,
    /// compression.type with its level: what the leader stores.
    pub compression: TopicCompression,
}

/// A topic's compaction settings, resolved.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CompactionSettings {
    pub min_cleanable_ratio: f64,
    pub min_compaction_lag_ms: i64,
    pub max_compaction_lag_ms: i64,
    pub delete_retention_ms: i64,
}

impl EffectiveConfig {
    pub fn resolve(overrides: &BTreeMap<String, String>, broker: &Config) -> EffectiveConfig {
        let value = |name: &str| -> String {
            overrides.get(name).cloned().unwrap_or_else(|| {
                find(name).map_or_else(String::new, |d| default_value(d, broker, 1).0)
            })
        };
        let long = |name: &str| value(name).parse::<i64>().unwrap_or(i64::MAX);
        let difference = long("message.timestamp.difference.max.ms");
        let or_difference = |v: i64| if v == i64::MAX { difference } else { v };
        EffectiveConfig {
            cleanup: CleanupPolicy::parse(&value("cleanup.policy")).unwrap_or(CleanupPolicy {
                compact: false,
                delete: true,
            }),
            compaction: CompactionSettings {
                min_cleanable_ratio: value("min.cleanable.dirty.ratio")
                    .parse::<f64>()
                    .unwrap_or(0.5),
                min_compaction_lag_ms: long("min.compaction.lag.ms"),
                max_compaction_lag_ms: long("max.compaction.lag.ms"),
                delete_retention_ms: long("delete.retention.ms"),
            },
            max_message_bytes: long("max.message.bytes").clamp(0, i64::from(i32::MAX)) as i32,
            retention_ms: long("retention.ms"),
            retention_bytes: long("retention.bytes"),
            segment_bytes: long("segment.bytes"),
            segment_ms: long("segment.ms"),
            index_interval_bytes: long("index.interval.bytes"),
            log_append_time: value("message.timestamp.type") == "LogAppendTime",
            // Kafka 3.9: the deprecated difference applies to whichever
            // of before/after is left at its default.
            timestamp_before_max_ms: or_difference(long("message.timestamp.before.max.ms")),
            timestamp_after_max_ms: or_difference(long("message.timestamp.after.max.ms")),
            compression: {
                let level = |name: &str| i32::try_from(long(name)).unwrap_or(0);
                match value("compression.type").as_str() {
                    "uncompressed" => TopicCompression::Uncompressed,
                    "gzip" => TopicCompression::Gzip(level("compression.gzip.level")),
                    "snappy" => TopicCompression::Snappy,
                    "lz4" => TopicCompression::Lz4(level("compression.lz4.level")),
                    "zstd" => TopicCompression::Zstd(level("compression.zstd.level")),
                    _ => TopicCompression::Producer,
                }
            },
        }
    }

    /// The record timestamps a produce at `now_ms` may carry, inclusive;
    /// None when any is accepted (LogAppendTime overwrites them).
    pub fn timestamp_bounds(&self, now_ms: i64) -> Option<(i64, i64)> {
        let unbounded =
            self.timestamp_before_max_ms == i64::MAX && self.timestamp_after_max_ms == i64::MAX;
        if self.log_append_time || unbounded {
            return None;
        }
        Some((
            now_ms.saturating_sub(self.timestamp_before_max_ms),
            now_ms.saturating_add(self.timestamp_after_max_ms),
        ))
    }
}

#[cfg(test)]
mod tests;
