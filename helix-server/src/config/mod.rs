//! Broker configuration: one struct with documented defaults, loaded from an
//! optional TOML file (`--config`) and overridden by command-line flags.
//!
//! Every field here is listed in `docs/configuration.md` with its default;
//! keep the two in step.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use clap::{Parser, ValueEnum};
use serde::Deserialize;

use crate::error::{HelixError, Result};

pub mod cluster;
mod groups;
mod identity;
pub use cluster::{Cluster, NodeSpec};
pub use groups::GroupConfig;

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
pub enum Command {
    /// Print the cluster as any node shows it: nodes, partitions, leaders,
    /// ISR, end offsets, consumer groups and their lag.
    Status(StatusArgs),
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
    pub command: Option<Command>,
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

/// The TOML file: the same settings as [`Flags`], all optional.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileConfig {
    node_id: Option<i32>,
    listen: Option<SocketAddr>,
    advertised: Option<String>,
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
    max_connections_per_ip: Option<usize>,
    max_connections_per_ip_overrides: Option<String>,
    group_coordinator_partitions: Option<u32>,
    offsets_retention_minutes: Option<u64>,
    group_initial_rebalance_delay_ms: Option<u64>,
    group_min_session_timeout_ms: Option<i32>,
    group_max_session_timeout_ms: Option<i32>,
    group_max_size: Option<usize>,
    group_snapshot_after_records: Option<u64>,
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

/// The effective configuration of this broker process.
#[derive(Debug, Clone)]
pub struct Config {
    /// Node id (default 1).
    pub node_id: i32,
    /// Kafka listener (default 127.0.0.1:9092).
    pub listen: SocketAddr,
    /// `host:port` put into Metadata (default: `listen`).
    pub advertised: String,
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
    pub cluster: Option<Cluster>,
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
        if let Some(minutes) = flags
            .offsets_retention_minutes
            .or(file.offsets_retention_minutes)
        {
            c.groups.offsets_retention_ms = minutes.saturating_mul(60_000);
        }
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
            let cluster = Cluster::new(nodes, c.node_id)?;
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
        c.advertised = advertised.unwrap_or_else(|| c.listen.to_string());
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
        Ok(())
    }
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

#[cfg(test)]
mod tests;
