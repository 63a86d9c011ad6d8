//! Broker configuration: one struct with documented defaults, loaded from an
//! optional TOML file (`--config`) and overridden by command-line flags.
//!
//! Every field here is listed in `docs/configuration.md` with its default;
//! keep the two in step.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Parser, ValueEnum};
use serde::Deserialize;

mod authorizer;
mod cleaner;
mod groups;
mod identity;
pub mod listeners;
mod load;
pub mod members;
mod transactions;
pub use authorizer::AuthorizerConfig;
pub use cleaner::{CleanerConfig, CleanupPolicy};
pub use groups::GroupConfig;
pub use listeners::{
    ClientAuth, ListenerConfig, PeerTlsConfig, SaslConfig, SecurityProtocol, TlsConfig,
};
pub use members::{Members, NodeSpec};
pub use transactions::TxnConfig;

/// Kafka's `producer.id.expiration.ms` default: one day.
pub const DEFAULT_PRODUCER_ID_EXPIRATION_MS: i64 = 86_400_000;

/// What "durable on one replica" means before a producer is answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum WriteDurability {
    /// Appended to the WAL (page cache); survives kill -9, not power loss.
    ReplicationOnly,
    /// Appended and fsynced (group-committed) before acknowledging.
    Fsync,
}

/// How an over-budget node slows producers down (ADR 0011).
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum BackpressureMode {
    /// Connections stop reading while the pending budget is full.
    Pause,
    /// Past half the budget, Produce responses carry `throttle_time_ms` and
    /// the connection stops reading for that long; a full budget still
    /// pauses reads.
    Throttle,
}

/// How log lines are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object per line (timestamp, level, target, fields, spans).
    Json,
}

/// What `helix-server` does besides serving (the default).
#[derive(Debug, clap::Subcommand)]
pub enum CliCommand {
    /// Print the cluster as any node shows it: nodes, partitions, leaders,
    /// ISR, end offsets, consumer groups and their lag.
    Status(StatusArgs),
    /// Print a salted SCRAM credential for the users file
    /// (`sasl_users_file`); the password is read from stdin, one line.
    ScramCredential(ScramCredentialArgs),
}

#[derive(Debug, clap::Args)]
pub struct ScramCredentialArgs {
    /// The user name.
    #[arg(long)]
    pub user: String,
    /// SCRAM-SHA-256 or SCRAM-SHA-512.
    #[arg(long, default_value = "SCRAM-SHA-512")]
    pub mechanism: String,
    /// PBKDF2 iterations (Kafka's minimum is 4096).
    #[arg(long, default_value_t = 4096)]
    pub iterations: u32,
}

#[derive(Debug, clap::Args)]
pub struct StatusArgs {
    /// HOST:PORT of one or more nodes (comma-separated); the first that
    /// answers is asked.
    #[arg(long, default_value = "127.0.0.1:9092")]
    pub bootstrap: String,
    /// Print JSON instead of tables.
    #[arg(long)]
    pub json: bool,
    /// How long each call may take.
    #[arg(long, default_value_t = 5000)]
    pub timeout_ms: u64,
}

/// The metrics endpoint's port when nothing else is said.
pub const DEFAULT_METRICS_PORT: u16 = 9644;

/// Command-line flags. Every flag is optional: a flag wins over the TOML file,
/// which wins over the built-in default.
#[derive(Debug, Parser)]
#[command(
    name = "helix-server",
    version,
    about = "Helix: a Kafka-compatible log broker"
)]
pub struct Flags {
    #[command(subcommand)]
    pub command: Option<CliCommand>,
    /// TOML file with any of the settings below (same names, snake_case).
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// This node's id.
    #[arg(long)]
    pub node_id: Option<i32>,
    /// Address the Kafka listener binds.
    #[arg(long)]
    pub listen: Option<SocketAddr>,
    /// Address advertised to clients in Metadata (default: the listen address).
    #[arg(long)]
    pub advertised: Option<String>,
    /// Kafka's `listeners`: `NAME://HOST:PORT,...` (replaces `--listen`).
    #[arg(long)]
    pub listeners: Option<String>,
    /// Kafka's `advertised.listeners`: `NAME://HOST:PORT,...`.
    #[arg(long)]
    pub advertised_listeners: Option<String>,
    /// Kafka's `listener.security.protocol.map`: `NAME:PROTOCOL,...`.
    #[arg(long)]
    pub listener_security_protocol_map: Option<String>,
    /// Kafka's `ssl.keystore.location` (type PEM): certificate chain and
    /// private key.
    #[arg(long)]
    pub ssl_keystore_location: Option<PathBuf>,
    /// Kafka's `ssl.truststore.location` (type PEM): CA certificates for
    /// client certificates.
    #[arg(long)]
    pub ssl_truststore_location: Option<PathBuf>,
    /// Kafka's `ssl.client.auth`: none, requested or required.
    #[arg(long, value_enum)]
    pub ssl_client_auth: Option<ClientAuth>,
    /// A TLS handshake not finished within this is closed.
    #[arg(long)]
    pub ssl_handshake_timeout_ms: Option<u64>,
    /// Mutual TLS between the nodes: this node's certificate chain and
    /// private key (PEM), shown to peers and checked by them.
    #[arg(long)]
    pub peer_ssl_keystore_location: Option<PathBuf>,
    /// Mutual TLS between the nodes: the CA certificates (PEM) a peer's
    /// certificate must chain to.
    #[arg(long)]
    pub peer_ssl_truststore_location: Option<PathBuf>,
    /// Kafka's `sasl.enabled.mechanisms`: comma-separated.
    #[arg(long)]
    pub sasl_enabled_mechanisms: Option<String>,
    /// File of salted SCRAM credentials (`helix-server scram-credential`).
    #[arg(long)]
    pub sasl_users_file: Option<PathBuf>,
    /// Kafka's `connection.failed.authentication.delay.ms`.
    #[arg(long)]
    pub connection_failed_authentication_delay_ms: Option<u64>,
    /// Kafka's `connections.max.reauth.ms` (KIP-368): an authenticated
    /// SASL session lasts this long before the client must re-authenticate
    /// on its connection (0, the default: forever).
    #[arg(long)]
    pub connections_max_reauth_ms: Option<u64>,
    /// Failed SASL authentications an address may have in a minute before
    /// its new connections to SASL listeners are closed at accept, until
    /// the minute passes (default 0: no limit).
    #[arg(long)]
    pub max_failed_authentications_per_ip_per_minute: Option<u32>,
    /// Kafka's `authorizer.class.name`: `standard` (or Kafka's
    /// StandardAuthorizer / AclAuthorizer class name) enforces ACLs;
    /// `none` (default) allows every request.
    #[arg(long, alias = "authorizer-class-name")]
    pub authorizer: Option<String>,
    /// Kafka's `super.users`: `User:admin;User:other`.
    #[arg(long)]
    pub super_users: Option<String>,
    /// Kafka's `allow.everyone.if.no.acl.found` (default false).
    #[arg(long, num_args = 0..=1, default_missing_value = "true")]
    pub allow_everyone_if_no_acl_found: Option<bool>,
    /// Directory holding every log and the controller state.
    #[arg(long)]
    pub data_dir: Option<PathBuf>,
    /// replication-only (default) or fsync.
    #[arg(long, value_enum)]
    pub write_durability: Option<WriteDurability>,
    /// Log filter (tracing EnvFilter syntax); RUST_LOG is used when absent.
    #[arg(long)]
    pub log_level: Option<String>,
    /// text (default) or json: one JSON object per log line.
    #[arg(long, value_enum)]
    pub log_format: Option<LogFormat>,
    /// Address of the HTTP endpoint serving /metrics, /health and /ready
    /// (default 127.0.0.1:9644; in a cluster 9644 plus the node's position).
    #[arg(long)]
    pub metrics_listen: Option<SocketAddr>,
    /// Per-partition metric series are exported while the node holds at
    /// most this many replicas (node-wide aggregates always are).
    #[arg(long)]
    pub metrics_partition_series_max: Option<usize>,
    /// Partitions of an auto-created or default-sized topic.
    #[arg(long)]
    pub default_partitions: Option<i32>,
    /// Create a topic when a client asks Metadata or Produce for it.
    #[arg(long)]
    pub auto_create_topics: Option<bool>,
    /// Default `retention.ms` of a topic (-1 keeps forever).
    #[arg(long)]
    pub retention_ms: Option<i64>,
    /// Default `retention.bytes` of a partition (-1: unbounded).
    #[arg(long)]
    pub retention_bytes: Option<i64>,
    /// Largest request frame accepted, in bytes.
    #[arg(long)]
    pub max_request_size: Option<usize>,
    /// Default `max.message.bytes` of a topic (largest record batch).
    #[arg(long)]
    pub max_message_bytes: Option<i32>,
    /// Batcher linger, in microseconds.
    #[arg(long)]
    pub batch_linger_us: Option<u64>,
    /// Batcher: most bytes in one Raft entry.
    #[arg(long)]
    pub batch_max_bytes: Option<usize>,
    /// Batcher: most produce requests in one Raft entry.
    #[arg(long)]
    pub batch_max_requests: Option<usize>,
    /// Node-wide limit of produce requests waiting for their acknowledgement.
    #[arg(long)]
    pub max_pending_requests: Option<usize>,
    /// Node-wide limit of bytes in produce requests waiting for acknowledgement.
    #[arg(long)]
    pub max_pending_bytes: Option<usize>,
    /// pause (default) or throttle: how an over-budget node slows producers.
    #[arg(long, value_enum)]
    pub backpressure_mode: Option<BackpressureMode>,
    /// Most client connections served at once; at the limit the connection
    /// idle longest is closed to admit a new one.
    #[arg(long)]
    pub max_connections: Option<usize>,
    /// Node-wide budget of request bytes being received and processed
    /// (Kafka's queued.max.request.bytes); a connection whose next request
    /// does not fit stops reading until it does.
    #[arg(long)]
    pub queued_max_request_bytes: Option<usize>,
    /// Background scrubber: bytes of stored logs re-read and checked per
    /// second (0: off).
    #[arg(long)]
    pub scrub_bytes_per_second: Option<u64>,
    /// Kafka's connections.max.idle.ms: a connection that sends no request
    /// for this long is closed.
    #[arg(long)]
    pub connections_max_idle_ms: Option<u64>,
    /// Log cleaner: clean compacted topics (`log.cleaner.enable`).
    #[arg(long)]
    pub log_cleaner_enable: Option<bool>,
    /// Log cleaner: partitions cleaned at once (`log.cleaner.threads`).
    #[arg(long)]
    pub log_cleaner_threads: Option<usize>,
    /// Log cleaner: key map bytes, all threads (`log.cleaner.dedupe.buffer.size`).
    #[arg(long)]
    pub log_cleaner_dedupe_buffer_size: Option<usize>,
    /// Log cleaner: how full the key map may get
    /// (`log.cleaner.io.buffer.load.factor`).
    #[arg(long)]
    pub log_cleaner_io_buffer_load_factor: Option<f64>,
    /// Log cleaner: io buffer bytes, all threads; half of each thread's
    /// share is its write buffer (`log.cleaner.io.buffer.size`).
    #[arg(long)]
    pub log_cleaner_io_buffer_size: Option<usize>,
    /// Log cleaner: bytes read and written per second, all threads
    /// (`log.cleaner.io.max.bytes.per.second`; default unlimited).
    #[arg(long)]
    pub log_cleaner_io_max_bytes_per_second: Option<f64>,
    /// Log cleaner: pause when nothing needs cleaning (`log.cleaner.backoff.ms`).
    #[arg(long)]
    pub log_cleaner_backoff_ms: Option<u64>,
    /// Default `cleanup.policy` of a topic (`log.cleanup.policy`).
    #[arg(long)]
    pub log_cleanup_policy: Option<String>,
    /// Default `min.cleanable.dirty.ratio` (`log.cleaner.min.cleanable.ratio`).
    #[arg(long)]
    pub log_cleaner_min_cleanable_ratio: Option<f64>,
    /// Default `delete.retention.ms` (`log.cleaner.delete.retention.ms`).
    #[arg(long)]
    pub log_cleaner_delete_retention_ms: Option<i64>,
    /// Default `min.compaction.lag.ms` (`log.cleaner.min.compaction.lag.ms`).
    #[arg(long)]
    pub log_cleaner_min_compaction_lag_ms: Option<i64>,
    /// Default `max.compaction.lag.ms` (`log.cleaner.max.compaction.lag.ms`).
    #[arg(long)]
    pub log_cleaner_max_compaction_lag_ms: Option<i64>,
    /// Kafka's max.connections.per.ip.
    #[arg(long)]
    pub max_connections_per_ip: Option<usize>,
    /// Kafka's max.connections.per.ip.overrides: `IP:N,IP:N`.
    #[arg(long)]
    pub max_connections_per_ip_overrides: Option<String>,
    /// Groups: internal coordinator partitions group ids hash to
    /// (`offsets.topic.num.partitions`); fixed for the life of a data dir.
    #[arg(long)]
    pub group_coordinator_partitions: Option<u32>,
    /// Groups: how long an empty group's committed offsets are kept
    /// (`offsets.retention.minutes`).
    #[arg(long)]
    pub offsets_retention_minutes: Option<u64>,
    /// Transactions: partitions of `__transaction_state` transactional ids
    /// hash to (`transaction.state.log.num.partitions`); fixed for the life
    /// of a data dir.
    #[arg(long)]
    pub transaction_state_partitions: Option<u32>,
    /// Transactions: the longest `transaction.timeout.ms` a producer may
    /// ask for (`transaction.max.timeout.ms`).
    #[arg(long)]
    pub transaction_max_timeout_ms: Option<i32>,
    /// Transactions: how long an idle transactional id is kept
    /// (`transactional.id.expiration.ms`).
    #[arg(long)]
    pub transactional_id_expiration_ms: Option<u64>,
    /// Transactions: how often timed-out transactions are looked for and
    /// aborted (`transaction.abort.timed.out.transaction.cleanup.interval.ms`).
    #[arg(long)]
    pub transaction_abort_timed_out_transaction_cleanup_interval_ms: Option<u64>,
    /// Transactions: how often expired transactional ids are looked for
    /// (`transaction.remove.expired.transaction.cleanup.interval.ms`).
    #[arg(long)]
    pub transaction_remove_expired_transaction_cleanup_interval_ms: Option<u64>,
    /// Transactions: acknowledged records after which a
    /// `__transaction_state` partition snapshots its view and drops the
    /// log before it.
    #[arg(long)]
    pub transaction_snapshot_after_records: Option<u64>,
    /// Transactions: segment size of the `__transaction_state` logs
    /// (`transaction.state.log.segment.bytes`).
    #[arg(long)]
    pub transaction_state_log_segment_bytes: Option<u64>,
    /// Groups: delay of a new group's first rebalance
    /// (`group.initial.rebalance.delay.ms`).
    #[arg(long)]
    pub group_initial_rebalance_delay_ms: Option<u64>,
    /// Groups: smallest session timeout a member may ask for.
    #[arg(long)]
    pub group_min_session_timeout_ms: Option<i32>,
    /// Groups: largest session timeout a member may ask for.
    #[arg(long)]
    pub group_max_session_timeout_ms: Option<i32>,
    /// Groups: most members of one group (`group.max.size`).
    #[arg(long)]
    pub group_max_size: Option<usize>,
    /// Groups: acknowledged records after which a coordinator partition
    /// snapshots its view and drops the log before it.
    #[arg(long)]
    pub group_snapshot_after_records: Option<u64>,
    /// Groups: segment size of the coordinator partitions' logs
    /// (`offsets.topic.segment.bytes`).
    #[arg(long)]
    pub offsets_topic_segment_bytes: Option<u64>,
    /// Replication factor of topics created without one (default: the
    /// smaller of 3 and the number of nodes).
    #[arg(long)]
    pub default_replication_factor: Option<i16>,
    /// A follower that has not caught up with the leader for this long
    /// leaves the ISR (Kafka's `replica.lag.time.max.ms`).
    #[arg(long)]
    pub replica_lag_time_max_ms: Option<u64>,
    /// An idempotent producer idle this long in log time is forgotten
    /// (Kafka's `producer.id.expiration.ms`).
    #[arg(long)]
    pub producer_id_expiration_ms: Option<i64>,
    /// Move leadership back to preferred replicas when they are in sync
    /// (Kafka's `auto.leader.rebalance.enable`).
    #[arg(long)]
    pub auto_leader_rebalance_enable: Option<bool>,
    /// How often preferred leaders are checked
    /// (Kafka's `leader.imbalance.check.interval.seconds`, here in ms).
    #[arg(long)]
    pub leader_imbalance_check_interval_ms: Option<u64>,
    /// Shard threads driving the Raft groups (default: one per core).
    #[arg(long)]
    pub shards: Option<usize>,
    /// Length of a Raft tick in milliseconds.
    #[arg(long)]
    pub raft_tick_ms: Option<u64>,
    /// Election timeout in ticks (randomised in [n, 2n)).
    #[arg(long)]
    pub raft_election_ticks: Option<u32>,
    /// Leader heartbeat interval in ticks.
    #[arg(long)]
    pub raft_heartbeat_ticks: Option<u32>,
    /// AppendEntries in flight per follower.
    #[arg(long)]
    pub raft_max_inflight_appends: Option<usize>,
    /// Bytes of Raft log entries all groups of the node may hold in memory.
    #[arg(long)]
    pub raft_memory_budget_bytes: Option<usize>,
}

/// The effective configuration of this broker process.
#[derive(Debug, Clone)]
pub struct Config {
    /// Node id (default 1).
    pub node_id: i32,
    /// Kafka listener (default 127.0.0.1:9092).
    pub listen: SocketAddr,
    /// `host:port` put into Metadata (default: `listen`).
    pub advertised: String,
    /// Every listener, in the order given; default one `PLAINTEXT` listener
    /// on `listen`, advertised as `advertised`. `listen` and `advertised`
    /// are the first listener's.
    pub listeners: Vec<ListenerConfig>,
    /// The `SSL` / `SASL_SSL` listeners' TLS settings.
    pub tls: TlsConfig,
    /// Mutual TLS on the peer transport (None: plaintext between nodes).
    pub peer_tls: Option<PeerTlsConfig>,
    /// The `SASL_*` listeners' SASL settings.
    pub sasl: SaslConfig,
    /// The authorizer and its ACL settings (ADR 0028, slice 2).
    pub authorizer: AuthorizerConfig,
    /// Data directory (default `./helix-data`).
    pub data_dir: PathBuf,
    /// Default `replication-only`.
    pub write_durability: WriteDurability,
    /// Default `info` (RUST_LOG wins when set and no flag is given).
    pub log_level: Option<String>,
    /// Default `text`.
    pub log_format: LogFormat,
    /// Default 127.0.0.1:9644 (a cluster node: 9644 plus its position).
    pub metrics_listen: SocketAddr,
    /// The operator named `metrics_listen` (flag, file or `[[nodes]]`):
    /// failing to bind it stops the start; the default only warns.
    pub metrics_listen_chosen: bool,
    /// Default 1000.
    pub metrics_partition_series_max: usize,
    /// Default 1.
    pub default_partitions: i32,
    /// Default true.
    pub auto_create_topics: bool,
    /// Default 604800000 (7 days), as Kafka.
    pub retention_ms: i64,
    /// Default -1 (no size limit), as Kafka.
    pub retention_bytes: i64,
    /// Default 100 MiB.
    pub max_request_size: usize,
    /// Default 1048588, as Kafka's `message.max.bytes`.
    pub max_message_bytes: i32,
    /// Default 1 ms.
    pub batch_linger: Duration,
    /// Default 4 MiB.
    pub batch_max_bytes: usize,
    /// Default 1000.
    pub batch_max_requests: usize,
    /// Default 2000.
    pub max_pending_requests: usize,
    /// Default 100 MiB.
    pub max_pending_bytes: usize,
    /// Default `pause`.
    pub backpressure_mode: BackpressureMode,
    /// Default 10000.
    pub max_connections: usize,
    /// Default 256 MiB (Kafka's queued.max.request.bytes is unbounded).
    pub queued_max_request_bytes: usize,
    /// Default 8 MiB/s; 0 turns the scrubber off.
    pub scrub_bytes_per_second: u64,
    /// Default 10 minutes (Kafka's connections.max.idle.ms).
    pub connections_max_idle: Duration,
    /// Default 2147483647 (Kafka's max.connections.per.ip).
    pub max_connections_per_ip: usize,
    /// Per-IP exceptions to `max_connections_per_ip`; default none.
    pub max_connections_per_ip_overrides: std::collections::HashMap<std::net::IpAddr, usize>,
    /// The group coordinator's settings (defaults in `GroupConfig`).
    pub groups: GroupConfig,
    /// The transaction coordinator's settings (defaults in `TxnConfig`).
    pub transactions: TxnConfig,
    /// The log cleaner's settings (defaults in `CleanerConfig`).
    pub cleaner: CleanerConfig,
    /// Shard threads driving the Raft groups (default: one per core).
    pub shards: usize,
    /// Length of a Raft tick (default 50 ms).
    pub raft_tick: Duration,
    /// Election timeout in ticks, randomised in `[n, 2n)` (default 10).
    pub raft_election_ticks: u32,
    /// Leader heartbeat interval in ticks (default 1).
    pub raft_heartbeat_ticks: u32,
    /// AppendEntries in flight per follower (default 5).
    pub raft_max_inflight_appends: usize,
    /// Raft log bytes all groups of the node may hold in memory (default
    /// 128 MiB); proposals wait (REQUEST_TIMED_OUT, retried) beyond it.
    pub raft_memory_budget_bytes: usize,
    /// The cluster (`[[nodes]]`); None: a single node of its own.
    pub cluster: Option<Members>,
    /// The cluster id; default derived from the member list (a single node
    /// keeps a random one in its data directory).
    pub cluster_id: Option<String>,
    /// Default: the smaller of 3 and the number of nodes.
    pub default_replication_factor: Option<i16>,
    /// Default 10 s (Kafka: 30 s; Raft heartbeats every tick notice a
    /// stalled follower much sooner).
    pub replica_lag_time_max: Duration,
    /// Default 86400000 (1 day), as Kafka; measured on log time (ADR 0022).
    pub producer_id_expiration_ms: i64,
    /// Default true, as Kafka.
    pub auto_leader_rebalance_enable: bool,
    /// Default 10 s (Kafka: 300 s).
    pub leader_imbalance_check_interval: Duration,
}

impl Default for Config {
    fn default() -> Self {
        let listen: SocketAddr = SocketAddr::from(([127, 0, 0, 1], 9092));
        Config {
            node_id: 1,
            listen,
            advertised: listen.to_string(),
            listeners: vec![ListenerConfig {
                name: "PLAINTEXT".into(),
                protocol: SecurityProtocol::Plaintext,
                bind: listen,
                advertised: listen.to_string(),
            }],
            tls: TlsConfig::default(),
            peer_tls: None,
            sasl: SaslConfig::default(),
            authorizer: AuthorizerConfig::default(),
            data_dir: PathBuf::from("./helix-data"),
            write_durability: WriteDurability::ReplicationOnly,
            log_level: None,
            log_format: LogFormat::Text,
            metrics_listen: SocketAddr::from(([127, 0, 0, 1], DEFAULT_METRICS_PORT)),
            metrics_listen_chosen: false,
            metrics_partition_series_max: 1000,
            default_partitions: 1,
            auto_create_topics: true,
            retention_ms: 7 * 24 * 3600 * 1000,
            retention_bytes: -1,
            max_request_size: 100 * 1024 * 1024,
            max_message_bytes: 1_048_588,
            batch_linger: Duration::from_millis(1),
            batch_max_bytes: 4 * 1024 * 1024,
            batch_max_requests: 1000,
            max_pending_requests: 2000,
            max_pending_bytes: 100 * 1024 * 1024,
            backpressure_mode: BackpressureMode::Pause,
            max_connections: 10_000,
            connections_max_idle: Duration::from_secs(600),
            queued_max_request_bytes: 256 << 20,
            scrub_bytes_per_second: 8 << 20,
            max_connections_per_ip: i32::MAX as usize,
            max_connections_per_ip_overrides: std::collections::HashMap::new(),
            groups: GroupConfig::default(),
            transactions: TxnConfig::default(),
            cleaner: CleanerConfig::default(),
            shards: std::thread::available_parallelism().map_or(1, |n| n.get()),
            raft_tick: Duration::from_millis(50),
            raft_election_ticks: 10,
            raft_heartbeat_ticks: 1,
            raft_max_inflight_appends: 5,
            raft_memory_budget_bytes: 128 << 20,
            cluster: None,
            cluster_id: None,
            default_replication_factor: None,
            replica_lag_time_max: Duration::from_secs(10),
            producer_id_expiration_ms: DEFAULT_PRODUCER_ID_EXPIRATION_MS,
            auto_leader_rebalance_enable: true,
            leader_imbalance_check_interval: Duration::from_secs(300),
        }
    }
}

#[cfg(test)]
mod tests;
