//! Loading and validating the settings: defaults, TOML, flags.

use super::*;

fn flags(args: &[&str]) -> Flags {
    let mut all = vec!["helix-server"];
    all.extend_from_slice(args);
    Flags::parse_from(all)
}

#[test]
fn no_flags_gives_documented_defaults() {
    let c = Config::load(flags(&[])).expect("defaults are valid");
    assert_eq!(c.node_id, 1);
    assert_eq!(c.listen.to_string(), "127.0.0.1:9092");
    assert_eq!(c.advertised, "127.0.0.1:9092");
    assert_eq!(c.data_dir, PathBuf::from("./helix-data"));
    assert_eq!(c.write_durability, WriteDurability::ReplicationOnly);
    assert!(c.auto_create_topics);
    assert_eq!(c.max_request_size, 100 * 1024 * 1024);
    assert_eq!(c.batch_linger, Duration::from_millis(1));
    assert_eq!(c.max_pending_requests, 2000);
    assert_eq!(c.backpressure_mode, BackpressureMode::Pause);
}

/// Loads a TOML file holding `toml`, with `args` after `--config FILE`.
fn load_with_file(toml: &str, args: &[&str]) -> crate::error::Result<Config> {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("helix.toml");
    std::fs::write(&path, toml).expect("write toml");
    let mut all = vec!["--config", path.to_str().expect("utf8 path")];
    all.extend_from_slice(args);
    Config::load(flags(&all))
}

#[test]
fn flags_override_the_toml_file() {
    let toml = "node_id = 7\nlisten = \"127.0.0.1:19092\"\nwrite_durability = \"fsync\"\nbatch_linger_us = 500\nbackpressure_mode = \"throttle\"\n";
    let c = load_with_file(toml, &["--node-id", "3"]).expect("valid");
    assert_eq!(c.node_id, 3);
    assert_eq!(c.listen.port(), 19092);
    assert_eq!(c.advertised, "127.0.0.1:19092");
    assert_eq!(c.write_durability, WriteDurability::Fsync);
    assert_eq!(c.batch_linger, Duration::from_micros(500));
    assert_eq!(c.backpressure_mode, BackpressureMode::Throttle);
    let c = load_with_file(toml, &["--backpressure-mode", "pause"]).expect("valid");
    assert_eq!(c.backpressure_mode, BackpressureMode::Pause);
}

#[test]
fn connection_limits_come_from_flags_and_bad_overrides_are_refused() {
    let c = Config::load(flags(&[])).expect("defaults");
    assert_eq!(c.connections_max_idle, Duration::from_secs(600));
    assert_eq!(c.max_connections_per_ip, i32::MAX as usize);
    let c = Config::load(flags(&[
        "--connections-max-idle-ms",
        "1500",
        "--max-connections-per-ip",
        "4",
        "--max-connections-per-ip-overrides",
        "127.0.0.1:100, [::1]:7",
    ]))
    .expect("valid");
    assert_eq!(c.connections_max_idle, Duration::from_millis(1500));
    assert_eq!(c.max_connections_per_ip, 4);
    let localhost: std::net::IpAddr = "127.0.0.1".parse().expect("ip");
    assert_eq!(
        c.max_connections_per_ip_overrides.get(&localhost),
        Some(&100)
    );
    assert_eq!(c.max_connections_per_ip_overrides.len(), 2);
    for bad in [
        "broker-1:5",
        "127.0.0.1",
        "127.0.0.1:x",
        "10.0.0.1:1,10.0.0.1:2",
    ] {
        let e = Config::load(flags(&["--max-connections-per-ip-overrides", bad]))
            .expect_err(bad)
            .to_string();
        assert!(e.contains("max_connections_per_ip_overrides"), "{bad}: {e}");
    }
    assert!(Config::load(flags(&["--connections-max-idle-ms", "0"])).is_err());
    assert!(Config::load(flags(&["--max-connections-per-ip", "0"])).is_err());
}

#[test]
fn unknown_toml_key_is_refused() {
    assert!(load_with_file("no_such_setting = 1\n", &[]).is_err());
}

#[test]
fn group_settings_come_from_flags_and_toml() {
    let c = load_with_file(
        "group_coordinator_partitions = 8\noffsets_retention_minutes = 2\ngroup_max_size = 5\n",
        &[
            "--group-initial-rebalance-delay-ms",
            "3000",
            "--group-max-size",
            "7",
            "--group-min-session-timeout-ms",
            "1000",
            "--group-max-session-timeout-ms",
            "60000",
            "--group-snapshot-after-records",
            "100",
            "--offsets-topic-segment-bytes",
            "2097152",
        ],
    )
    .expect("valid");
    assert_eq!(c.groups.coordinator_partitions, 8);
    assert_eq!(c.groups.offsets_retention_ms, 120_000);
    assert_eq!(c.groups.initial_rebalance_delay_ms, 3000);
    assert_eq!(c.groups.max_group_size, 7);
    assert_eq!(c.groups.min_session_timeout_ms, 1000);
    assert_eq!(c.groups.max_session_timeout_ms, 60_000);
    assert_eq!(c.groups.snapshot_after_records, 100);
    assert_eq!(c.groups.segment_bytes, 2 << 20);
    assert_eq!(Config::default().groups, GroupConfig::default());
}

#[test]
fn inconsistent_group_settings_are_refused() {
    for args in [
        &["--group-coordinator-partitions", "0"][..],
        &["--group-max-size", "0"],
        &["--group-min-session-timeout-ms", "0"],
        &[
            "--group-min-session-timeout-ms",
            "10000",
            "--group-max-session-timeout-ms",
            "9000",
        ],
        &["--offsets-retention-minutes", "0"],
        &["--group-snapshot-after-records", "0"],
        &["--offsets-topic-segment-bytes", "1000"],
        &["--transaction-state-log-segment-bytes", "1000"],
    ] {
        assert!(Config::load(flags(args)).is_err(), "{args:?}");
    }
}

#[test]
fn zero_partitions_is_refused() {
    assert!(Config::load(flags(&["--default-partitions", "0"])).is_err());
}

#[test]
fn transaction_state_partitions_come_from_flags_and_toml_and_are_bounded() {
    assert_eq!(Config::default().transactions.state_partitions, 50);
    let c = load_with_file(
        "transaction_state_log_segment_bytes = 1048576
",
        &[],
    )
    .expect("valid");
    assert_eq!(c.transactions.segment_bytes, 1 << 20);
    let c = load_with_file("transaction_state_partitions = 7\n", &[]).expect("valid");
    assert_eq!(c.transactions.state_partitions, 7);
    let c = load_with_file(
        "transaction_state_partitions = 7\n",
        &["--transaction-state-partitions", "3"],
    )
    .expect("valid");
    assert_eq!(c.transactions.state_partitions, 3);
    for n in ["0", "1001"] {
        assert!(load_with_file("", &["--transaction-state-partitions", n]).is_err());
    }
}

#[test]
fn transaction_timeouts_and_intervals_come_from_flags_and_toml() {
    let c = load_with_file(
        "transaction_max_timeout_ms = 60000\ntransactional_id_expiration_ms = 3600000\n",
        &[
            "--transaction-abort-timed-out-transaction-cleanup-interval-ms",
            "500",
            "--transaction-remove-expired-transaction-cleanup-interval-ms",
            "1000",
        ],
    )
    .expect("valid");
    let t = &c.transactions;
    assert_eq!(
        (
            t.max_timeout_ms,
            t.transactional_id_expiration_ms,
            t.abort_check_interval_ms,
            t.expiry_check_interval_ms
        ),
        (60_000, 3_600_000, 500, 1000)
    );
    for (flag, value) in [
        ("--transaction-max-timeout-ms", "0"),
        ("--transactional-id-expiration-ms", "0"),
        (
            "--transaction-abort-timed-out-transaction-cleanup-interval-ms",
            "0",
        ),
    ] {
        assert!(
            load_with_file("", &[flag, value]).is_err(),
            "{flag} {value}"
        );
    }
}

#[test]
fn transaction_snapshot_after_records_comes_from_flags_and_toml() {
    assert_eq!(
        Config::default().transactions.snapshot_after_records,
        20_000
    );
    let c = load_with_file("transaction_snapshot_after_records = 50\n", &[]).expect("valid");
    assert_eq!(c.transactions.snapshot_after_records, 50);
    let c = load_with_file(
        "transaction_snapshot_after_records = 50\n",
        &["--transaction-snapshot-after-records", "20"],
    )
    .expect("valid");
    assert_eq!(c.transactions.snapshot_after_records, 20);
    assert!(load_with_file("", &["--transaction-snapshot-after-records", "0"]).is_err());
}

#[test]
fn listen_alone_is_one_plaintext_listener() {
    let c = Config::load(flags(&["--listen", "127.0.0.1:19092"])).expect("valid");
    assert_eq!(c.listeners.len(), 1);
    assert_eq!(c.listeners[0].name, "PLAINTEXT");
    assert_eq!(c.listeners[0].protocol, SecurityProtocol::Plaintext);
    assert_eq!(c.listeners[0].advertised, "127.0.0.1:19092");
}

#[test]
fn secure_listeners_need_their_files() {
    let listeners = "PLAINTEXT://127.0.0.1:19092,SASL_SSL://127.0.0.1:19093";
    assert!(Config::load(flags(&["--listeners", listeners])).is_err());
    assert!(
        Config::load(flags(&[
            "--listeners",
            listeners,
            "--ssl-keystore-location",
            "k.pem"
        ]))
        .is_err(),
        "SASL_SSL needs a users file too"
    );
    let c = Config::load(flags(&[
        "--listeners",
        listeners,
        "--ssl-keystore-location",
        "k.pem",
        "--sasl-users-file",
        "users.toml",
    ]))
    .expect("valid");
    assert_eq!(c.listen.port(), 19092);
    assert_eq!(c.listeners[1].protocol, SecurityProtocol::SaslSsl);
    assert!(
        Config::load(flags(&[
            "--listeners",
            "SSL://127.0.0.1:19093",
            "--ssl-keystore-location",
            "k.pem",
            "--ssl-client-auth",
            "required"
        ]))
        .is_err(),
        "client auth needs a trust store"
    );
    assert!(
        Config::load(flags(&["--ssl-keystore-location", "k.pem"])).is_err(),
        "a TLS setting without a TLS listener is refused, not ignored"
    );
    assert!(
        Config::load(flags(&["--sasl-users-file", "users.toml"])).is_err(),
        "a users file without a SASL listener is refused, not ignored"
    );
}
