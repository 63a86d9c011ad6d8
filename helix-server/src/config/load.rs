//! Loading the configuration: defaults, then the TOML file named by
//! `--config`, then the flags; and the checks every value must pass before
//! the node starts.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

use super::listeners::{SASL_MECHANISMS, parse_listeners};
use super::{
    BackpressureMode, ClientAuth, Config, Flags, ListenerConfig, LogFormat, Members, NodeSpec,
    PeerTlsConfig, SecurityProtocol, WriteDurability,
};
use crate::error::{HelixError, Result};

/// The TOML file: the same settings as [`Flags`], all optional.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileConfig {
    node_id: Option<i32>,
    listen: Option<SocketAddr>,
    advertised: Option<String>,
    listeners: Option<String>,
    advertised_listeners: Option<String>,
    listener_security_protocol_map: Option<String>,
    ssl_keystore_location: Option<PathBuf>,
    ssl_truststore_location: Option<PathBuf>,
    ssl_client_auth: Option<ClientAuth>,
    ssl_handshake_timeout_ms: Option<u64>,
    peer_ssl_keystore_location: Option<PathBuf>,
    peer_ssl_truststore_location: Option<PathBuf>,
    sasl_enabled_mechanisms: Option<String>,
    sasl_users_file: Option<PathBuf>,
    connection_failed_authentication_delay_ms: Option<u64>,
    connections_max_reauth_ms: Option<u64>,
    max_failed_authentications_per_ip_per_minute: Option<u32>,
    authorizer: Option<String>,
    super_users: Option<String>,
    allow_everyone_if_no_acl_found: Option<bool>,
    data_dir: Option<PathBuf>,
    write_durability: Option<WriteDurability>,
    log_level: Option<String>,
    log_format: Option<LogFormat>,
    metrics_listen: Option<SocketAddr>,
    metrics_partition_series_max: Option<usize>,
    default_partitions: Option<i32>,
    auto_create_topics: Option<bool>,
    retention_ms: Option<i64>,
    retention_bytes: Option<i64>,
    max_request_size: Option<usize>,
    max_message_bytes: Option<i32>,
    batch_linger_us: Option<u64>,
    batch_max_bytes: Option<usize>,
    batch_max_requests: Option<usize>,
    max_pending_requests: Option<usize>,
    max_pending_bytes: Option<usize>,
    backpressure_mode: Option<BackpressureMode>,
    max_connections: Option<usize>,
    connections_max_idle_ms: Option<u64>,
    queued_max_request_bytes: Option<usize>,
    scrub_bytes_per_second: Option<u64>,
    log_cleaner_enable: Option<bool>,
    log_cleaner_threads: Option<usize>,
    log_cleaner_dedupe_buffer_size: Option<usize>,
    log_cleaner_io_buffer_load_factor: Option<f64>,
    log_cleaner_io_buffer_size: Option<usize>,
    log_cleaner_io_max_bytes_per_second: Option<f64>,
    log_cleaner_backoff_ms: Option<u64>,
    log_cleanup_policy: Option<String>,
    log_cleaner_min_cleanable_ratio: Option<f64>,
    log_cleaner_delete_retention_ms: Option<i64>,
    log_cleaner_min_compaction_lag_ms: Option<i64>,
    log_cleaner_max_compaction_lag_ms: Option<i64>,
    max_connections_per_ip: Option<usize>,
    max_connections_per_ip_overrides: Option<String>,
    group_coordinator_partitions: Option<u32>,
    offsets_retention_minutes: Option<u64>,
    group_initial_rebalance_delay_ms: Option<u64>,
    group_min_session_timeout_ms: Option<i32>,
    group_max_session_timeout_ms: Option<i32>,
    group_max_size: Option<usize>,
    group_snapshot_after_records: Option<u64>,
    transaction_state_partitions: Option<u32>,
    transaction_max_timeout_ms: Option<i32>,
    transactional_id_expiration_ms: Option<u64>,
    transaction_abort_timed_out_transaction_cleanup_interval_ms: Option<u64>,
    transaction_remove_expired_transaction_cleanup_interval_ms: Option<u64>,
    transaction_snapshot_after_records: Option<u64>,
    transaction_state_log_segment_bytes: Option<u64>,
    offsets_topic_segment_bytes: Option<u64>,
    default_replication_factor: Option<i16>,
    replica_lag_time_max_ms: Option<u64>,
    producer_id_expiration_ms: Option<i64>,
    auto_leader_rebalance_enable: Option<bool>,
    leader_imbalance_check_interval_ms: Option<u64>,
    shards: Option<usize>,
    raft_tick_ms: Option<u64>,
    raft_election_ticks: Option<u32>,
    raft_heartbeat_ticks: Option<u32>,
    raft_max_inflight_appends: Option<usize>,
    raft_memory_budget_bytes: Option<usize>,
    /// The cluster's members; absent: a single node of its own.
    nodes: Option<Vec<NodeSpec>>,
    /// Overrides the cluster id derived from the member list.
    cluster_id: Option<String>,
}

impl Config {
    /// Defaults, then the TOML file named by `--config`, then the flags.
    pub fn load(flags: Flags) -> Result<Config> {
        let file = match &flags.config {
            Some(path) => read_file(path)?,
            None => FileConfig::default(),
        };
        let mut c = Config::default();
        macro_rules! set {
            ($field:ident) => {
                if let Some(v) = flags.$field.or(file.$field) {
                    c.$field = v;
                }
            };
        }
        // A `..._ms` setting into its Duration field.
        macro_rules! set_ms {
            ($flag:ident, $field:ident) => {
                if let Some(ms) = flags.$flag.or(file.$flag) {
                    c.$field = Duration::from_millis(ms);
                }
            };
        }
        set!(node_id);
        set!(listen);
        set!(log_format);
        set!(metrics_partition_series_max);
        set!(data_dir);
        set!(write_durability);
        set!(default_partitions);
        set!(auto_create_topics);
        set!(retention_ms);
        set!(retention_bytes);
        set!(producer_id_expiration_ms);
        set!(max_request_size);
        set!(max_message_bytes);
        set!(batch_max_bytes);
        set!(batch_max_requests);
        set!(max_pending_requests);
        set!(max_pending_bytes);
        set!(backpressure_mode);
        set!(max_connections);
        set!(max_connections_per_ip);
        set!(queued_max_request_bytes);
        set!(scrub_bytes_per_second);
        set_ms!(connections_max_idle_ms, connections_max_idle);
        if let Some(text) = flags
            .max_connections_per_ip_overrides
            .as_deref()
            .or(file.max_connections_per_ip_overrides.as_deref())
        {
            c.max_connections_per_ip_overrides = per_ip_overrides(text)?;
        }
        set!(shards);
        set!(raft_election_ticks);
        set!(raft_heartbeat_ticks);
        set!(raft_max_inflight_appends);
        set!(raft_memory_budget_bytes);
        set!(auto_leader_rebalance_enable);
        c.default_replication_factor = flags
            .default_replication_factor
            .or(file.default_replication_factor);
        set_ms!(raft_tick_ms, raft_tick);
        set_ms!(replica_lag_time_max_ms, replica_lag_time_max);
        set_ms!(
            leader_imbalance_check_interval_ms,
            leader_imbalance_check_interval
        );
        c.cluster_id = file.cluster_id;
        macro_rules! set_group {
            ($flag:ident, $field:ident) => {
                if let Some(v) = flags.$flag.or(file.$flag) {
                    c.groups.$field = v;
                }
            };
        }
        set_group!(group_coordinator_partitions, coordinator_partitions);
        set_group!(group_initial_rebalance_delay_ms, initial_rebalance_delay_ms);
        set_group!(group_min_session_timeout_ms, min_session_timeout_ms);
        set_group!(group_max_session_timeout_ms, max_session_timeout_ms);
        set_group!(group_max_size, max_group_size);
        set_group!(group_snapshot_after_records, snapshot_after_records);
        set_group!(offsets_topic_segment_bytes, segment_bytes);
        if let Some(minutes) = flags
            .offsets_retention_minutes
            .or(file.offsets_retention_minutes)
        {
            c.groups.offsets_retention_ms = minutes.saturating_mul(60_000);
        }
        macro_rules! set_txn {
            ($flag:ident, $field:ident) => {
                if let Some(v) = flags.$flag.or(file.$flag) {
                    c.transactions.$field = v;
                }
            };
        }
        set_txn!(transaction_state_partitions, state_partitions);
        set_txn!(transaction_max_timeout_ms, max_timeout_ms);
        set_txn!(
            transactional_id_expiration_ms,
            transactional_id_expiration_ms
        );
        set_txn!(
            transaction_abort_timed_out_transaction_cleanup_interval_ms,
            abort_check_interval_ms
        );
        set_txn!(
            transaction_remove_expired_transaction_cleanup_interval_ms,
            expiry_check_interval_ms
        );
        set_txn!(transaction_snapshot_after_records, snapshot_after_records);
        set_txn!(transaction_state_log_segment_bytes, segment_bytes);
        macro_rules! set_cleaner {
            ($flag:ident, $field:ident) => {
                if let Some(v) = flags.$flag.or(file.$flag) {
                    c.cleaner.$field = v;
                }
            };
        }
        set_cleaner!(log_cleaner_enable, enable);
        set_cleaner!(log_cleaner_threads, threads);
        set_cleaner!(log_cleaner_dedupe_buffer_size, dedupe_buffer_size);
        set_cleaner!(log_cleaner_io_buffer_load_factor, io_buffer_load_factor);
        set_cleaner!(log_cleaner_io_buffer_size, io_buffer_size);
        set_cleaner!(log_cleaner_io_max_bytes_per_second, io_max_bytes_per_second);
        set_cleaner!(log_cleaner_backoff_ms, backoff_ms);
        set_cleaner!(log_cleanup_policy, cleanup_policy);
        set_cleaner!(log_cleaner_min_cleanable_ratio, min_cleanable_ratio);
        set_cleaner!(log_cleaner_delete_retention_ms, delete_retention_ms);
        set_cleaner!(log_cleaner_min_compaction_lag_ms, min_compaction_lag_ms);
        set_cleaner!(log_cleaner_max_compaction_lag_ms, max_compaction_lag_ms);
        c.log_level = flags.log_level.or(file.log_level);
        if let Some(us) = flags.batch_linger_us.or(file.batch_linger_us) {
            c.batch_linger = Duration::from_micros(us);
        }
        let listen_given = flags.listen.is_some() || file.listen.is_some();
        let mut advertised = flags.advertised.or(file.advertised);
        let metrics_listen = flags.metrics_listen.or(file.metrics_listen);
        if let Some(addr) = metrics_listen {
            c.metrics_listen = addr;
            c.metrics_listen_chosen = true;
        }
        if let Some(nodes) = file.nodes {
            let cluster = Members::new(nodes, c.node_id)?;
            if !listen_given {
                c.listen = cluster.kafka_listen()?;
            }
            if metrics_listen.is_none() {
                c.metrics_listen = cluster.metrics_listen()?;
                c.metrics_listen_chosen = cluster.this_node().metrics.is_some();
            }
            advertised = advertised.or_else(|| Some(cluster.this_node().kafka.clone()));
            c.cluster = Some(cluster);
        }
        let advertised_given = advertised.is_some();
        c.advertised = advertised.unwrap_or_else(|| c.listen.to_string());
        c.listeners = vec![ListenerConfig {
            name: "PLAINTEXT".into(),
            protocol: SecurityProtocol::Plaintext,
            bind: c.listen,
            advertised: c.advertised.clone(),
        }];
        if let Some(text) = flags.listeners.or(file.listeners) {
            // This node's `[[nodes]]` entry may say it, as for the others.
            let advertised_listeners = flags
                .advertised_listeners
                .or(file.advertised_listeners)
                .or_else(|| {
                    c.cluster
                        .as_ref()
                        .and_then(|m| m.this_node().advertised_listeners.clone())
                });
            let map = flags
                .listener_security_protocol_map
                .or(file.listener_security_protocol_map);
            c.listeners = parse_listeners(&text, advertised_listeners.as_deref(), map.as_deref())
                .map_err(HelixError::Config)?;
            // The first listener is the node's primary address (the one
            // `[[nodes]]` names, when given, stays the member address).
            c.listen = c.listeners[0].bind;
            if !advertised_given {
                c.advertised = c.listeners[0].advertised.clone();
            }
        }
        if let Some(path) = flags.ssl_keystore_location.or(file.ssl_keystore_location) {
            c.tls.keystore_location = Some(path);
        }
        if let Some(path) = flags
            .ssl_truststore_location
            .or(file.ssl_truststore_location)
        {
            c.tls.truststore_location = Some(path);
        }
        if let Some(v) = flags.ssl_client_auth.or(file.ssl_client_auth) {
            c.tls.client_auth = v;
        }
        if let Some(ms) = flags
            .ssl_handshake_timeout_ms
            .or(file.ssl_handshake_timeout_ms)
        {
            c.tls.handshake_timeout = Duration::from_millis(ms);
        }
        match (
            flags
                .peer_ssl_keystore_location
                .or(file.peer_ssl_keystore_location),
            flags
                .peer_ssl_truststore_location
                .or(file.peer_ssl_truststore_location),
        ) {
            (None, None) => {}
            (Some(keystore_location), Some(truststore_location)) => {
                c.peer_tls = Some(PeerTlsConfig {
                    keystore_location,
                    truststore_location,
                })
            }
            _ => {
                return Err(HelixError::Config(
                    "peer_ssl_keystore_location and peer_ssl_truststore_location go together"
                        .into(),
                ));
            }
        }
        if let Some(text) = flags
            .sasl_enabled_mechanisms
            .or(file.sasl_enabled_mechanisms)
        {
            c.sasl.enabled_mechanisms = text
                .split(',')
                .map(|m| m.trim().to_ascii_uppercase())
                .filter(|m| !m.is_empty())
                .collect();
        }
        if let Some(path) = flags.sasl_users_file.or(file.sasl_users_file) {
            c.sasl.users_file = Some(path);
        }
        if let Some(ms) = flags
            .connection_failed_authentication_delay_ms
            .or(file.connection_failed_authentication_delay_ms)
        {
            c.sasl.failed_authentication_delay = Duration::from_millis(ms);
        }
        if let Some(ms) = flags
            .connections_max_reauth_ms
            .or(file.connections_max_reauth_ms)
        {
            c.sasl.connections_max_reauth = Duration::from_millis(ms);
        }
        if let Some(n) = flags
            .max_failed_authentications_per_ip_per_minute
            .or(file.max_failed_authentications_per_ip_per_minute)
        {
            c.sasl.max_failed_authentications_per_ip_per_minute = n;
        }
        if let Some(name) = flags.authorizer.or(file.authorizer) {
            c.authorizer.set_authorizer(&name)?;
        }
        if let Some(text) = flags.super_users.or(file.super_users) {
            c.authorizer.set_super_users(&text)?;
        }
        if let Some(v) = flags
            .allow_everyone_if_no_acl_found
            .or(file.allow_everyone_if_no_acl_found)
        {
            c.authorizer.allow_everyone_if_no_acl_found = v;
        }
        c.validate()?;
        Ok(c)
    }

    fn validate(&self) -> Result<()> {
        let bad = |what: &str| Err(HelixError::Config(what.to_string()));
        if self.default_partitions < 1 {
            return bad("default_partitions must be at least 1");
        }
        if self.max_request_size < 1024 || self.max_request_size > i32::MAX as usize {
            return bad("max_request_size must be between 1 KiB and 2 GiB");
        }
        if self.batch_max_requests == 0 || self.batch_max_bytes == 0 {
            return bad("batch limits must be positive");
        }
        if self.max_pending_requests == 0
            || self.max_pending_bytes < self.max_request_size.min(1 << 20)
        {
            return bad(
                "max_pending_requests must be positive and max_pending_bytes at least 1 MiB",
            );
        }
        if self.max_pending_bytes > u32::MAX as usize {
            return bad("max_pending_bytes must be below 4 GiB");
        }
        if self.max_message_bytes < 128 {
            return bad("max_message_bytes must be at least 128");
        }
        if self.max_connections == 0 {
            return bad("max_connections must be positive");
        }
        if self.max_connections_per_ip == 0 {
            return bad("max_connections_per_ip must be positive");
        }
        if self.queued_max_request_bytes < 1 << 20 {
            return bad("queued_max_request_bytes must be at least 1 MiB");
        }
        if self.connections_max_idle.is_zero() {
            return bad("connections_max_idle_ms must be positive");
        }
        if advertised_host_port(&self.advertised).is_none() {
            return bad("advertised must be HOST:PORT");
        }
        self.validate_security()?;
        if self.shards == 0 || self.shards > 256 {
            return bad("shards must be between 1 and 256");
        }
        if self.raft_tick.is_zero() || self.raft_tick > Duration::from_secs(10) {
            return bad("raft_tick_ms must be between 1 and 10000");
        }
        if self.raft_heartbeat_ticks == 0 || self.raft_heartbeat_ticks >= self.raft_election_ticks {
            return bad("raft_heartbeat_ticks must be at least 1 and below raft_election_ticks");
        }
        if self.raft_max_inflight_appends == 0 || self.raft_max_inflight_appends > 1024 {
            return bad("raft_max_inflight_appends must be between 1 and 1024");
        }
        if self.raft_memory_budget_bytes < 1 << 20 {
            return bad("raft_memory_budget_bytes must be at least 1 MiB");
        }
        let nodes = self.cluster.as_ref().map_or(1, |c| c.nodes.len());
        if let Some(rf) = self.default_replication_factor
            && (rf < 1 || rf as usize > nodes)
        {
            return Err(HelixError::Config(format!(
                "default_replication_factor {rf}: must be between 1 and the {nodes} node(s)"
            )));
        }
        self.groups.validate().map_err(HelixError::Config)?;
        self.transactions.validate().map_err(HelixError::Config)?;
        self.cleaner.validate().map_err(HelixError::Config)?;
        Ok(())
    }
}

impl Config {
    /// A secure listener has what its protocol needs: no TLS or SASL
    /// setting is accepted and then left unused silently.
    fn validate_security(&self) -> Result<()> {
        let bad = |what: String| Err(HelixError::Config(what));
        for l in &self.listeners {
            if advertised_host_port(&l.advertised).is_none() {
                return bad(format!("listener {}: advertised must be HOST:PORT", l.name));
            }
            if l.protocol.uses_tls() && self.tls.keystore_location.is_none() {
                return bad(format!(
                    "listener {} ({}) needs ssl_keystore_location",
                    l.name,
                    l.protocol.name()
                ));
            }
            if l.protocol.uses_sasl() && self.sasl.users_file.is_none() {
                return bad(format!(
                    "listener {} ({}) needs sasl_users_file",
                    l.name,
                    l.protocol.name()
                ));
            }
        }
        // A TLS or SASL file with no listener to use it is a mistake (a
        // listener left out of `listeners`), not something to ignore.
        let any = |f: fn(SecurityProtocol) -> bool| self.listeners.iter().any(|l| f(l.protocol));
        let tls_set = self.tls.keystore_location.is_some()
            || self.tls.truststore_location.is_some()
            || self.tls.client_auth != ClientAuth::None;
        if tls_set && !any(SecurityProtocol::uses_tls) {
            return bad("ssl_* settings are given but no listener is SSL or SASL_SSL".into());
        }
        if self.sasl.users_file.is_some() && !any(SecurityProtocol::uses_sasl) {
            return bad(
                "sasl_users_file is given but no listener is SASL_PLAINTEXT or SASL_SSL".into(),
            );
        }
        if self.tls.client_auth != ClientAuth::None && self.tls.truststore_location.is_none() {
            return bad("ssl_client_auth requested/required needs ssl_truststore_location".into());
        }
        if self.peer_tls.is_some() && self.cluster.as_ref().is_none_or(|c| c.nodes.len() < 2) {
            return bad("peer_ssl_* settings are given but this node has no peers".into());
        }
        if self.tls.handshake_timeout.is_zero() {
            return bad("ssl_handshake_timeout_ms must be positive".into());
        }
        if self.sasl.enabled_mechanisms.is_empty() {
            return bad("sasl_enabled_mechanisms must name at least one mechanism".into());
        }
        if let Some(m) = self
            .sasl
            .enabled_mechanisms
            .iter()
            .find(|m| !SASL_MECHANISMS.contains(&m.as_str()))
        {
            return bad(format!(
                "sasl_enabled_mechanisms: {m} is not one of {SASL_MECHANISMS:?}"
            ));
        }
        Ok(())
    }
}

/// Parses Kafka's `max.connections.per.ip.overrides` form, `IP:N,IP:N`
/// (IPv6 as `[::1]:N`). Host names are refused: a client's address is
/// known, its name is not.
fn per_ip_overrides(text: &str) -> Result<std::collections::HashMap<std::net::IpAddr, usize>> {
    let bad =
        |what: String| HelixError::Config(format!("max_connections_per_ip_overrides: {what}"));
    let mut out = std::collections::HashMap::new();
    for item in text.split(',').map(str::trim).filter(|i| !i.is_empty()) {
        let (host, n) = item
            .rsplit_once(':')
            .ok_or_else(|| bad(format!("{item:?} is not IP:N")))?;
        let ip: std::net::IpAddr = host
            .trim_start_matches('[')
            .trim_end_matches(']')
            .parse()
            .map_err(|_| bad(format!("{host:?} is not an IP address")))?;
        let n: usize = n
            .parse()
            .map_err(|_| bad(format!("{n:?} is not a number")))?;
        if out.insert(ip, n).is_some() {
            return Err(bad(format!("{ip} is listed twice")));
        }
    }
    Ok(out)
}

fn advertised_host_port(s: &str) -> Option<(String, i32)> {
    let (host, port) = s.rsplit_once(':')?;
    let port: u16 = port.parse().ok()?;
    if host.is_empty() {
        return None;
    }
    Some((host.to_string(), i32::from(port)))
}

fn read_file(path: &Path) -> Result<FileConfig> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| HelixError::Config(format!("cannot read {}: {e}", path.display())))?;
    toml::from_str(&text).map_err(|e| HelixError::Config(format!("{}: {e}", path.display())))
}
