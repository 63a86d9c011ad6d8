use super::*;

#[test]
fn known_configs_are_validated_and_unknown_refused() {
    assert_eq!(validate("retention.ms", " 1000 ").expect("valid"), "1000");
    assert!(validate("retention.ms", "-2").is_err());
    assert!(validate("retention.ms", "soon").is_err());
    assert!(validate("cleanup.policy", "compacted").is_err());
    assert!(validate("no.such.config", "1").is_err());
    assert!(validate("min.insync.replicas", "0").is_err());
    assert!(validate("segment.bytes", "4294967296").is_err(), "an int");
    assert_eq!(
        validate("message.timestamp.type", "LogAppendTime").expect("valid"),
        "LogAppendTime"
    );
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
fn deprecated_configs_are_accepted_stored_and_ignored_as_kafka_39_does() {
    assert_eq!(
        validate("message.format.version", "0.10.0.0").expect("valid"),
        "0.10.0.0"
    );
    assert!(validate("message.format.version", "0.10").is_err());
    assert_eq!(
        validate("message.downconversion.enable", "false").expect("valid"),
        "false"
    );
    assert!(validate("message.downconversion.enable", "no").is_err());
    // The difference applies where before/after are left unset.
    let broker = Config::default();
    let set = |pairs: &[(&str, &str)]| -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    };
    let e = EffectiveConfig::resolve(
        &set(&[("message.timestamp.difference.max.ms", "5000")]),
        &broker,
    );
    assert_eq!(e.timestamp_bounds(100_000), Some((95_000, 105_000)));
    let e = EffectiveConfig::resolve(
        &set(&[
            ("message.timestamp.difference.max.ms", "5000"),
            ("message.timestamp.after.max.ms", "10"),
        ]),
        &broker,
    );
    assert_eq!(e.timestamp_bounds(100_000), Some((95_000, 100_010)));
}

#[test]
fn configs_helix_does_not_apply_take_only_kafkas_default() {
    for d in TOPIC_CONFIGS
        .iter()
        .filter(|d| d.kind == ConfigKind::KafkaDefaultOnly)
    {
        assert_eq!(
            validate(d.name, d.kafka_default).expect("Kafka's default"),
            d.kafka_default
        );
        let other = match d.config_type {
            ConfigType::Boolean if d.kafka_default == "true" => "false",
            ConfigType::Boolean => "true",
            ConfigType::List => "0:1",
            ConfigType::String => "something-else",
            _ => "7",
        };
        let err = validate(d.name, other).expect_err(d.name).to_string();
        assert!(err.contains("Helix does not support"), "{err}");
    }
    assert_eq!(validate("preallocate", "FALSE").expect("same"), "false");
    assert_eq!(
        validate("flush.ms", " 9223372036854775807").expect("same"),
        "9223372036854775807"
    );
    assert!(validate("preallocate", "true").is_err());
}

#[test]
fn compaction_configs_are_validated_as_kafka_39_does() {
    assert_eq!(
        validate("cleanup.policy", "compact").expect("valid"),
        "compact"
    );
    assert_eq!(
        validate("cleanup.policy", " compact , delete ").expect("valid"),
        "compact,delete"
    );
    assert_eq!(
        validate("cleanup.policy", "delete").expect("valid"),
        "delete"
    );
    let err = validate("cleanup.policy", "compact,shred")
        .expect_err("not a policy")
        .to_string();
    assert!(
        err.contains("String must be one of: compact, delete"),
        "{err}"
    );
    assert_eq!(
        validate("min.cleanable.dirty.ratio", "0.50").expect("valid"),
        "0.5"
    );
    assert!(validate("min.cleanable.dirty.ratio", "0").is_ok());
    assert!(validate("min.cleanable.dirty.ratio", "1.5").is_err());
    assert!(validate("min.cleanable.dirty.ratio", "-0.1").is_err());
    assert!(validate("delete.retention.ms", "0").is_ok());
    assert!(validate("delete.retention.ms", "-1").is_err());
    assert!(validate("min.compaction.lag.ms", "-1").is_err());
    assert!(validate("max.compaction.lag.ms", "0").is_err());
    let lags = |min: &str, max: &str| {
        BTreeMap::from([
            ("min.compaction.lag.ms".to_string(), min.to_string()),
            ("max.compaction.lag.ms".to_string(), max.to_string()),
        ])
    };
    assert!(validate_all(&lags("10", "20")).is_ok());
    let err = validate_all(&lags("30", "20"))
        .expect_err("min above max")
        .to_string();
    assert!(err.contains("conflict topic config setting"), "{err}");

    let broker = Config::default();
    let compacted = BTreeMap::from([("cleanup.policy".to_string(), "compact".to_string())]);
    let e = EffectiveConfig::resolve(&compacted, &broker);
    assert!(e.cleanup.compact && !e.cleanup.delete);
    assert_eq!(e.compaction.min_cleanable_ratio, 0.5);
    assert_eq!(e.compaction.delete_retention_ms, 86_400_000);
    assert_eq!(e.compaction.max_compaction_lag_ms, i64::MAX);
    let e = EffectiveConfig::resolve(&BTreeMap::new(), &broker);
    assert!(!e.cleanup.compact && e.cleanup.delete);
}

#[test]
fn compression_types_and_levels_are_validated_as_kafka_39_does() {
    for v in ["uncompressed", "zstd", "lz4", "snappy", "gzip", "producer"] {
        assert_eq!(validate("compression.type", v).expect("valid"), v);
    }
    assert!(validate("compression.type", "brotli").is_err());
    assert!(validate("compression.gzip.level", "-1").is_ok());
    assert!(validate("compression.gzip.level", "0").is_err());
    assert!(validate("compression.gzip.level", "10").is_err());
    assert!(validate("compression.lz4.level", "17").is_ok());
    assert!(validate("compression.lz4.level", "-1").is_err());
    assert!(validate("compression.zstd.level", "-131072").is_ok());
    assert!(validate("compression.zstd.level", "23").is_err());
    let broker = Config::default();
    let set = BTreeMap::from([
        ("compression.type".to_string(), "zstd".to_string()),
        ("compression.zstd.level".to_string(), "7".to_string()),
    ]);
    assert_eq!(
        EffectiveConfig::resolve(&set, &broker).compression,
        TopicCompression::Zstd(7)
    );
    assert_eq!(
        EffectiveConfig::resolve(&BTreeMap::new(), &broker).compression,
        TopicCompression::Producer
    );
}

#[test]
fn the_table_is_sorted_and_every_default_validates() {
    assert!(TOPIC_CONFIGS.windows(2).all(|w| w[0].name < w[1].name));
    assert_eq!(TOPIC_CONFIGS.len(), 36, "Kafka 3.9's topic configs");
    for d in TOPIC_CONFIGS {
        assert!(validate(d.name, d.kafka_default).is_ok(), "{}", d.name);
    }
}

#[test]
fn overrides_take_effect_over_broker_defaults() {
    let broker = Config::default();
    let mut o = BTreeMap::new();
    o.insert("max.message.bytes".to_string(), "2048".to_string());
    let e = EffectiveConfig::resolve(&o, &broker);
    assert_eq!(e.max_message_bytes, 2048);
    assert_eq!(e.retention_ms, broker.retention_ms);
    assert_eq!(e.segment_ms, 604_800_000);
    assert!(!e.log_append_time);
    assert_eq!(e.timestamp_bounds(1_000), None);
    o.insert(
        "message.timestamp.before.max.ms".to_string(),
        "100".to_string(),
    );
    let e = EffectiveConfig::resolve(&o, &broker);
    assert_eq!(e.timestamp_bounds(1_000), Some((900, i64::MAX)));
    o.insert(
        "message.timestamp.type".to_string(),
        "LogAppendTime".to_string(),
    );
    let e = EffectiveConfig::resolve(&o, &broker);
    assert!(e.log_append_time);
    assert_eq!(
        e.timestamp_bounds(1_000),
        None,
        "the broker's clock is used"
    );
}

#[test]
fn a_broker_setting_is_the_source_only_where_it_differs_from_kafka() {
    let mut broker = Config::default();
    let def = find("retention.ms").expect("known");
    assert_eq!(
        default_value(def, &broker, 3),
        ("604800000".to_string(), ConfigSource::Default)
    );
    broker.retention_ms = 1000;
    assert_eq!(
        default_value(def, &broker, 3),
        ("1000".to_string(), ConfigSource::StaticBroker)
    );
    let min = find("min.insync.replicas").expect("known");
    assert_eq!(default_value(min, &broker, 3).0, "2");
}
