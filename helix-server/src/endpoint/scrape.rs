//! `/metrics`: the registry of `crate::metrics` and a snapshot of the node
//! taken at scrape time (replicas, groups, budgets, thread pools, the
//! process), encoded by `prometheus-client`. Every name starts `helix_`;
//! docs/operations.md lists them with their meaning and alert thresholds.

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use helix_raft::{GroupId, Role, Status};
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, NoLabelSet, text};
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::{Registry, Unit};

use crate::broker::Broker;
use crate::metrics::{Buckets, Stage, metrics, process::ProcessStats};

/// How long a scrape waits for the shards' Raft status.
const OBSERVE_WITHIN: Duration = Duration::from_secs(1);

/// Stage histogram bounds, in microseconds (exported in seconds).
const STAGE_BOUNDS_US: [u64; 18] = [
    50, 100, 250, 500, 1_000, 2_500, 5_000, 10_000, 25_000, 50_000, 100_000, 250_000, 500_000,
    1_000_000, 2_500_000, 5_000_000, 10_000_000, 30_000_000,
];
const BATCH_RECORD_BOUNDS: [u64; 14] = [
    1, 2, 5, 10, 20, 50, 100, 200, 500, 1_000, 2_000, 5_000, 10_000, 50_000,
];
const BATCH_BYTE_BOUNDS: [u64; 9] = [
    256,
    1 << 10,
    4 << 10,
    16 << 10,
    64 << 10,
    256 << 10,
    1 << 20,
    4 << 20,
    16 << 20,
];

/// Busy time read at the previous scrape.
#[derive(Debug)]
pub struct BusySample {
    at: Instant,
    shards: Duration,
    syncer: Duration,
    network: Duration,
}

impl Default for BusySample {
    fn default() -> Self {
        BusySample {
            at: Instant::now(),
            shards: Duration::ZERO,
            syncer: Duration::ZERO,
            network: Duration::ZERO,
        }
    }
}

/// The Prometheus text of the node now.
pub async fn render(
    broker: Option<&Arc<Broker>>,
    busy: &mut BusySample,
) -> Result<String, fmt::Error> {
    let statuses = match broker {
        Some(b) => b.host.observe(OBSERVE_WITHIN).await,
        None => Vec::new(),
    };
    let snapshot = Snapshot::take(broker, statuses, busy);
    let m = metrics();
    let mut registry = Registry::with_prefix("helix");
    registry.register(
        "requests",
        "Kafka requests read, by API and version",
        m.requests.total.clone(),
    );
    registry.register(
        "request_errors",
        "Error codes answered (per partition where the API answers per partition) and connections closed instead of an answer (CONNECTION_CLOSED), by API",
        m.requests.errors.clone(),
    );
    registry.register_with_unit(
        "request_duration",
        "From a request's frame read to its response written, by API and version",
        Unit::Seconds,
        m.requests.latency.clone(),
    );
    registry.register_collector(Box::new(snapshot));
    let mut out = String::with_capacity(64 << 10);
    text::encode(&mut out, &registry)?;
    Ok(out)
}

/// Topic name and partition index of every replica group this node knows;
/// the controller's group 0 is `__cluster_metadata-0`, as in KRaft.
pub fn replica_names(broker: &Broker) -> HashMap<GroupId, (String, i32)> {
    let mut names = HashMap::new();
    names.insert(GroupId(0), ("__cluster_metadata".to_string(), 0));
    for t in broker.topics.all() {
        for p in &t.partitions {
            names.insert(p.group, (t.name.clone(), p.index));
        }
    }
    names
}

type Labels = Vec<(&'static str, String)>;

/// One replica's row.
#[derive(Debug)]
struct ReplicaRow {
    labels: Labels,
    leader: bool,
    term: u64,
    log_end_offset: i64,
    high_watermark: i64,
    log_start_offset: i64,
    size_bytes: u64,
    apply_lag: u64,
    replication_lag: u64,
    caught_up: bool,
    in_sync_replicas: usize,
    replicas: usize,
}

/// A thread pool's size and busy time.
#[derive(Debug)]
struct PoolRow {
    name: &'static str,
    threads: usize,
    busy_seconds: f64,
    /// Busy share since the previous scrape.
    ratio: f64,
}

/// What a scrape reports beyond the registry, read at once.
#[derive(Debug, Default)]
struct Snapshot {
    serving: bool,
    stages: Vec<(&'static str, Buckets)>,
    batch_records: Option<Buckets>,
    batch_bytes: Option<Buckets>,
    counters: Vec<(&'static str, &'static str, u64)>,
    gauges: Vec<(&'static str, &'static str, f64)>,
    pools: Vec<PoolRow>,
    replicas: Vec<ReplicaRow>,
    per_partition: bool,
    /// (labels, lag in entries, appends in flight) per follower of a led
    /// group.
    followers: Vec<(Labels, u64, usize)>,
    roles: Vec<(&'static str, usize)>,
    elections_started: u64,
    elections_won: u64,
    /// (group labels, members, state).
    groups: Vec<(Labels, usize, &'static str)>,
    /// (labels, committed offset, lag when this node holds the partition).
    group_offsets: Vec<(Labels, i64, Option<i64>)>,
    process: ProcessStats,
}

fn role_name(role: Role) -> &'static str {
    match role {
        Role::Leader => "leader",
        Role::Follower => "follower",
        _ => "candidate",
    }
}

impl Snapshot {
    fn take(
        broker: Option<&Arc<Broker>>,
        statuses: Vec<(GroupId, Status)>,
        busy: &mut BusySample,
    ) -> Snapshot {
        let m = metrics();
        let mut s = Snapshot {
            serving: broker.is_some(),
            stages: Stage::ALL
                .iter()
                .map(|st| (st.name(), m.stage(*st).buckets(&STAGE_BOUNDS_US)))
                .collect(),
            batch_records: Some(m.batch_records.buckets(&BATCH_RECORD_BOUNDS)),
            batch_bytes: Some(m.batch_bytes.buckets(&BATCH_BYTE_BOUNDS)),
            process: ProcessStats::read(),
            ..Snapshot::default()
        };
        s.read_counters();
        s.read_pools(broker.map_or(1, |b| b.config.shards), busy);
        if let Some(b) = broker {
            s.read_budgets(b);
            s.read_replicas(b, statuses);
            s.read_groups(b);
        }
        s
    }

    fn read_counters(&mut self) {
        let c = &metrics().counters;
        let get = |a: &std::sync::atomic::AtomicU64| a.load(Ordering::Relaxed);
        self.counters = vec![
            (
                "produce_bytes",
                "Record batch bytes in Produce requests",
                get(&c.produce_bytes),
            ),
            (
                "raft_entries",
                "Raft entries proposed by the batcher",
                get(&c.raft_entries),
            ),
            (
                "connections_accepted",
                "Client connections accepted",
                get(&c.connections),
            ),
            (
                "connections_refused",
                "Client connections refused by the node or per-IP limits",
                get(&c.connections_refused),
            ),
            (
                "network_received_bytes",
                "Request bytes read from clients",
                get(&c.bytes_in),
            ),
            (
                "network_sent_bytes",
                "Response bytes written to clients",
                get(&c.bytes_out),
            ),
            (
                "backpressure_pauses",
                "Times a connection stopped reading because the produce budget was full",
                get(&c.backpressure_pauses),
            ),
            (
                "backpressure_timeouts",
                "Produce requests that timed out waiting for room in the budget",
                get(&c.backpressure_timeouts),
            ),
            (
                "request_budget_waits",
                "Requests that waited for room in queued_max_request_bytes",
                get(&c.request_budget_waits),
            ),
            (
                "damaged_replicas",
                "Replicas that found damaged stored data and stopped taking writes",
                get(&c.damaged_replicas),
            ),
            (
                "stopped_replicas",
                "Replicas stopped because their log or vote could not be written (full or failing disk)",
                get(&c.stopped_replicas),
            ),
            (
                "peer_drops",
                "Peer messages dropped (full queue, peer down); Raft resends",
                get(&c.peer_drops),
            ),
            (
                "catch_up_entries",
                "Raft entries streamed from this node's WAL to catch followers up",
                get(&c.catch_up_entries),
            ),
            (
                "fetch_copy_fallbacks",
                "Fetch responses encoded by copying records (expected 0)",
                get(&c.fetch_copy_fallbacks),
            ),
            (
                "leader_changes",
                "Role or leader changes seen by this node's replicas",
                get(&c.leader_changes),
            ),
            (
                "wal_truncations",
                "WAL truncations to a new leader's log",
                get(&c.wal_truncations),
            ),
        ];
        self.gauges.push((
            "connections_open",
            "Client connections open",
            c.connections_open.load(Ordering::Relaxed) as f64,
        ));
        self.gauges.push((
            "produce_pending_requests_peak",
            "Most produce requests held unanswered at once since start",
            get(&c.pending_requests_peak) as f64,
        ));
        self.gauges.push((
            "produce_pending_bytes_peak",
            "Most produce bytes held unanswered at once since start",
            get(&c.pending_bytes_peak) as f64,
        ));
    }

    /// Busy seconds and ratios of the shard threads, the syncer and the
    /// tokio runtime that runs network I/O.
    fn read_pools(&mut self, shards: usize, busy: &mut BusySample) {
        let c = &metrics().counters;
        let now = Instant::now();
        let elapsed = now.duration_since(busy.at).as_secs_f64().max(1e-9);
        let shard_busy = Duration::from_nanos(c.shard_busy_nanos.load(Ordering::Relaxed));
        let syncer_busy = Duration::from_nanos(c.syncer_busy_nanos.load(Ordering::Relaxed));
        let runtime = tokio::runtime::Handle::current().metrics();
        let workers = runtime.num_workers();
        let network_busy: Duration = (0..workers)
            .map(|w| runtime.worker_total_busy_duration(w))
            .sum();
        let row = |name, threads: usize, now: Duration, before: Duration| PoolRow {
            name,
            threads,
            busy_seconds: now.as_secs_f64(),
            ratio: (now.saturating_sub(before).as_secs_f64() / (elapsed * threads.max(1) as f64))
                .min(1.0),
        };
        self.pools = vec![
            row("network", workers, network_busy, busy.network),
            row("shards", shards, shard_busy, busy.shards),
            row("syncer", 1, syncer_busy, busy.syncer),
        ];
        self.gauges.push((
            "runtime_alive_tasks",
            "Tasks alive in the network runtime",
            runtime.num_alive_tasks() as f64,
        ));
        self.gauges.push((
            "runtime_global_queue_depth",
            "Tasks waiting in the network runtime's global queue (early sign of overload)",
            runtime.global_queue_depth() as f64,
        ));
        *busy = BusySample {
            at: now,
            shards: shard_busy,
            syncer: syncer_busy,
            network: network_busy,
        };
    }

    fn read_budgets(&mut self, b: &Broker) {
        let (requests, bytes) = b.backpressure.in_use();
        let (max_requests, max_bytes) = b.backpressure.limits();
        let total = b.config.queued_max_request_bytes;
        self.gauges.extend([
            (
                "produce_pending_requests",
                "Produce requests held unanswered",
                requests as f64,
            ),
            (
                "produce_pending_requests_limit",
                "max_pending_requests",
                max_requests as f64,
            ),
            (
                "produce_pending_bytes",
                "Bytes of produce requests held unanswered",
                bytes as f64,
            ),
            (
                "produce_pending_bytes_limit",
                "max_pending_bytes",
                max_bytes as f64,
            ),
            (
                "request_bytes_in_use",
                "Request bytes being received and processed",
                total.saturating_sub(b.request_budget.available()) as f64,
            ),
            (
                "request_bytes_limit",
                "queued_max_request_bytes",
                total as f64,
            ),
        ]);
    }

    fn read_replicas(&mut self, b: &Broker, statuses: Vec<(GroupId, Status)>) {
        let names = replica_names(b);
        let statuses: HashMap<GroupId, Status> = statuses.into_iter().collect();
        let replicas = b.host.replicas();
        self.per_partition = replicas.len() <= b.config.metrics_partition_series_max;
        let mut roles: HashMap<&'static str, usize> = HashMap::new();
        for p in &replicas {
            let Some(status) = statuses.get(&p.group) else {
                continue;
            };
            *roles.entry(role_name(status.role)).or_default() += 1;
            self.elections_started += status.elections_started;
            self.elections_won += status.elections_won;
            let (topic, index) = names
                .get(&p.group)
                .cloned()
                .unwrap_or_else(|| (format!("group-{}", p.group.0), p.index));
            let labels: Labels = vec![("topic", topic), ("partition", index.to_string())];
            let leader = status.role == Role::Leader;
            for f in &status.followers {
                let mut l = labels.clone();
                l.push(("follower", f.node.0.to_string()));
                self.followers.push((
                    l,
                    status.last_index.0.saturating_sub(f.matched.0),
                    f.inflight,
                ));
            }
            self.replicas.push(ReplicaRow {
                labels,
                leader,
                term: status.term.0,
                log_end_offset: p.log_end_offset(),
                high_watermark: p.high_watermark(),
                log_start_offset: p.log_start_offset(),
                size_bytes: p.size_bytes(),
                apply_lag: status.commit.0.saturating_sub(status.applied.0),
                replication_lag: if leader {
                    0
                } else {
                    status.leader_commit.0.saturating_sub(status.durable.0)
                },
                caught_up: p.caught_up(),
                in_sync_replicas: if leader { p.isr().len().max(1) } else { 0 },
                replicas: p.voters().len(),
            });
        }
        self.replicas.sort_by(|a, b| a.labels.cmp(&b.labels));
        self.followers.sort_by(|a, b| a.0.cmp(&b.0));
        let mut roles: Vec<(&'static str, usize)> = roles.into_iter().collect();
        roles.sort();
        self.roles = roles;
    }

    fn read_groups(&mut self, b: &Broker) {
        let mut high_watermarks: HashMap<(String, i32), i64> = HashMap::new();
        for t in b.topics.all() {
            for p in &t.partitions {
                if let Some(local) = &p.local {
                    high_watermarks.insert((t.name.clone(), p.index), local.high_watermark());
                }
            }
        }
        let mut groups = b.groups.observe();
        groups.sort_by(|a, b| a.id.cmp(&b.id));
        for g in groups {
            self.groups
                .push((vec![("group", g.id.clone())], g.members, g.state));
            if !self.per_partition {
                continue;
            }
            for (topic, partition, offset) in g.offsets {
                let lag = high_watermarks
                    .get(&(topic.clone(), partition))
                    .map(|hw| (hw - offset).max(0));
                let labels = vec![
                    ("group", g.id.clone()),
                    ("topic", topic),
                    ("partition", partition.to_string()),
                ];
                self.group_offsets.push((labels, offset, lag));
            }
        }
    }
}

/// Writes one metric family of scalar values.
fn family<L: EncodeLabelSet>(
    enc: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    unit: Option<&Unit>,
    kind: MetricType,
    rows: &[(L, f64)],
) -> fmt::Result {
    if rows.is_empty() {
        return Ok(());
    }
    let mut me = enc.encode_descriptor(name, help, unit, kind)?;
    for (labels, value) in rows {
        let mut m = me.encode_family(labels)?;
        match kind {
            MetricType::Counter => m.encode_counter::<NoLabelSet, f64, f64>(value, None)?,
            _ => m.encode_gauge(value)?,
        }
    }
    Ok(())
}

/// One metric without labels.
fn one(
    enc: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    kind: MetricType,
    value: f64,
) -> fmt::Result {
    one_in(enc, name, help, None, kind, value)
}

fn one_in(
    enc: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    unit: Option<&Unit>,
    kind: MetricType,
    value: f64,
) -> fmt::Result {
    let mut me = enc.encode_descriptor(name, help, unit, kind)?;
    match kind {
        MetricType::Counter => me.encode_counter::<NoLabelSet, f64, f64>(&value, None),
        _ => me.encode_gauge(&value),
    }
}

/// A histogram family in `unit`s; values were recorded in `scale` of them.
fn histograms(
    enc: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    unit: Option<&Unit>,
    scale: f64,
    rows: &[(Labels, &Buckets)],
) -> fmt::Result {
    let mut me = enc.encode_descriptor(name, help, unit, MetricType::Histogram)?;
    for (labels, b) in rows {
        let buckets: Vec<(f64, u64)> = b
            .buckets
            .iter()
            .map(|(bound, n)| {
                let upper = if *bound == u64::MAX {
                    f64::INFINITY
                } else {
                    *bound as f64 * scale
                };
                (upper, *n)
            })
            .collect();
        let (sum, count) = (b.sum as f64 * scale, b.count);
        if labels.is_empty() {
            me.encode_histogram::<NoLabelSet>(sum, count, &buckets, None)?;
        } else {
            me.encode_family(labels)?
                .encode_histogram::<NoLabelSet>(sum, count, &buckets, None)?;
        }
    }
    Ok(())
}

impl Collector for Snapshot {
    fn encode(&self, mut enc: DescriptorEncoder) -> fmt::Result {
        use MetricType::{Counter, Gauge};
        let e = &mut enc;
        one(
            e,
            "serving",
            "1 once the data directory is open and Kafka is served",
            Gauge,
            f64::from(u8::from(self.serving)),
        )?;
        let stages: Vec<(Labels, &Buckets)> = self
            .stages
            .iter()
            .map(|(name, b)| (vec![("stage", name.to_string())], b))
            .collect();
        histograms(
            e,
            "produce_stage",
            "Produce path latency by stage: batcher_queue_wait, raft_commit, apply, wal_append, fsync, ack, response_write",
            Some(&Unit::Seconds),
            1e-6,
            &stages,
        )?;
        if let Some(b) = &self.batch_records {
            histograms(
                e,
                "produce_batch_records",
                "Records in each Raft entry the batcher proposes",
                None,
                1.0,
                &[(Vec::new(), b)],
            )?;
        }
        if let Some(b) = &self.batch_bytes {
            histograms(
                e,
                "produce_batch",
                "Bytes in each Raft entry the batcher proposes",
                Some(&Unit::Bytes),
                1.0,
                &[(Vec::new(), b)],
            )?;
        }
        for (name, help, v) in &self.counters {
            one(e, name, help, Counter, *v as f64)?;
        }
        for (name, help, v) in &self.gauges {
            one(e, name, help, Gauge, *v)?;
        }
        let pool = |f: &dyn Fn(&PoolRow) -> f64| -> Vec<(Labels, f64)> {
            self.pools
                .iter()
                .map(|p| (vec![("pool", p.name.to_string())], f(p)))
                .collect()
        };
        family(
            e,
            "pool_threads",
            "Threads of each pool: network (tokio runtime: Kafka and peer connections), shards (Raft, apply, WAL append), syncer (fsync)",
            None,
            Gauge,
            &pool(&|p| p.threads as f64),
        )?;
        family(
            e,
            "pool_busy",
            "Time the pool's threads spent working",
            Some(&Unit::Seconds),
            Counter,
            &pool(&|p| p.busy_seconds),
        )?;
        family(
            e,
            "pool_busy_ratio",
            "Busy share of the pool's threads since the previous scrape (1: saturated)",
            None,
            Gauge,
            &pool(&|p| p.ratio),
        )?;
        let roles: Vec<(Labels, f64)> = self
            .roles
            .iter()
            .map(|(r, n)| (vec![("role", r.to_string())], *n as f64))
            .collect();
        family(
            e,
            "replicas",
            "Replicas this node holds, by Raft role",
            None,
            Gauge,
            &roles,
        )?;
        let count =
            |f: &dyn Fn(&ReplicaRow) -> bool| self.replicas.iter().filter(|r| f(r)).count() as f64;
        one(
            e,
            "replicas_behind",
            "Replicas not caught up with their leader (/ready is false while above 0)",
            Gauge,
            count(&|r| !r.caught_up),
        )?;
        one(
            e,
            "partitions_under_replicated",
            "Partitions led here whose ISR is smaller than their replica set",
            Gauge,
            count(&|r| r.leader && r.in_sync_replicas < r.replicas),
        )?;
        let max =
            |f: &dyn Fn(&ReplicaRow) -> u64| self.replicas.iter().map(f).max().unwrap_or(0) as f64;
        one(
            e,
            "apply_lag_entries_max",
            "Largest committed-but-not-applied entry count of any replica",
            Gauge,
            max(&|r| r.apply_lag),
        )?;
        one(
            e,
            "replication_lag_entries_max",
            "Largest count of entries a follower here is behind its leader's commit",
            Gauge,
            max(&|r| r.replication_lag),
        )?;
        one(
            e,
            "follower_lag_entries_max",
            "Largest count of entries a follower of a group led here is behind",
            Gauge,
            self.followers.iter().map(|f| f.1).max().unwrap_or(0) as f64,
        )?;
        one(
            e,
            "raft_elections_started",
            "Elections started by this node's replicas (since they were opened)",
            Counter,
            self.elections_started as f64,
        )?;
        one(
            e,
            "raft_elections_won",
            "Elections won by this node's replicas (since they were opened)",
            Counter,
            self.elections_won as f64,
        )?;
        one(
            e,
            "partition_series_enabled",
            "1 when per-partition series are exported (replicas held <= metrics_partition_series_max)",
            Gauge,
            f64::from(u8::from(self.per_partition)),
        )?;
        if self.per_partition {
            let rows = |f: &dyn Fn(&ReplicaRow) -> f64| -> Vec<(Labels, f64)> {
                self.replicas
                    .iter()
                    .map(|r| (r.labels.clone(), f(r)))
                    .collect()
            };
            type Read = fn(&ReplicaRow) -> f64;
            let per_replica: [(&str, &str, Option<Unit>, Read); 9] = [
                (
                    "partition_log_end_offset",
                    "Offset the next record appended gets",
                    None,
                    |r| r.log_end_offset as f64,
                ),
                (
                    "partition_high_watermark",
                    "Acknowledged end: what consumers may read",
                    None,
                    |r| r.high_watermark as f64,
                ),
                (
                    "partition_log_start_offset",
                    "First offset still stored",
                    None,
                    |r| r.log_start_offset as f64,
                ),
                (
                    "partition_size",
                    "Bytes of the partition's segment files",
                    Some(Unit::Bytes),
                    |r| r.size_bytes as f64,
                ),
                (
                    "partition_leader",
                    "1 when this node leads the partition",
                    None,
                    |r| f64::from(u8::from(r.leader)),
                ),
                (
                    "partition_raft_term",
                    "Raft term (Kafka's leader epoch)",
                    None,
                    |r| r.term as f64,
                ),
                (
                    "partition_apply_lag_entries",
                    "Entries committed but not yet applied to the WAL",
                    None,
                    |r| r.apply_lag as f64,
                ),
                (
                    "partition_replication_lag_entries",
                    "Follower: entries its leader committed that are not yet durable here",
                    None,
                    |r| r.replication_lag as f64,
                ),
                (
                    "partition_caught_up",
                    "1 when the replica leads or has caught up with its leader",
                    None,
                    |r| f64::from(u8::from(r.caught_up)),
                ),
            ];
            for (name, help, unit, read) in per_replica {
                family(e, name, help, unit.as_ref(), Gauge, &rows(&read))?;
            }
            let led: Vec<(Labels, f64)> = self
                .replicas
                .iter()
                .filter(|r| r.leader)
                .map(|r| (r.labels.clone(), r.in_sync_replicas as f64))
                .collect();
            family(
                e,
                "partition_in_sync_replicas",
                "ISR size of a partition led here",
                None,
                Gauge,
                &led,
            )?;
            let lag: Vec<(Labels, f64)> = self
                .followers
                .iter()
                .map(|f| (f.0.clone(), f.1 as f64))
                .collect();
            family(
                e,
                "partition_follower_lag_entries",
                "Leader: entries a follower has not matched yet",
                None,
                Gauge,
                &lag,
            )?;
            let inflight: Vec<(Labels, f64)> = self
                .followers
                .iter()
                .map(|f| (f.0.clone(), f.2 as f64))
                .collect();
            family(
                e,
                "partition_follower_inflight_appends",
                "Leader: AppendEntries in flight to a follower",
                None,
                Gauge,
                &inflight,
            )?;
        }
        let members: Vec<(Labels, f64)> = self
            .groups
            .iter()
            .map(|g| (g.0.clone(), g.1 as f64))
            .collect();
        family(
            e,
            "group_members",
            "Members of a consumer group coordinated here",
            None,
            Gauge,
            &members,
        )?;
        let states: Vec<(Labels, f64)> = self
            .groups
            .iter()
            .map(|g| {
                let mut l = g.0.clone();
                l.push(("state", g.2.to_string()));
                (l, 1.0)
            })
            .collect();
        family(
            e,
            "group_state",
            "1 for the state a consumer group coordinated here is in",
            None,
            Gauge,
            &states,
        )?;
        let committed: Vec<(Labels, f64)> = self
            .group_offsets
            .iter()
            .map(|o| (o.0.clone(), o.1 as f64))
            .collect();
        family(
            e,
            "group_committed_offset",
            "Offset a consumer group committed for a partition",
            None,
            Gauge,
            &committed,
        )?;
        let lag: Vec<(Labels, f64)> = self
            .group_offsets
            .iter()
            .filter_map(|o| Some((o.0.clone(), o.2? as f64)))
            .collect();
        family(
            e,
            "group_lag",
            "High watermark minus committed offset (where this node holds the partition)",
            None,
            Gauge,
            &lag,
        )?;
        let p = &self.process;
        /// Name, help, unit, type and value (None: not readable here).
        type Reading<'a> = (&'a str, &'a str, Option<Unit>, MetricType, Option<f64>);
        let process: [Reading; 7] = [
            (
                "process_resident_memory",
                "Resident memory (VmRSS), mapped log pages included",
                Some(Unit::Bytes),
                Gauge,
                p.rss_bytes.map(|v| v as f64),
            ),
            (
                "process_anonymous_memory",
                "Anonymous resident memory (RssAnon): heap and stacks",
                Some(Unit::Bytes),
                Gauge,
                p.rss_anon_bytes.map(|v| v as f64),
            ),
            (
                "process_resident_memory_peak",
                "Peak resident memory (VmHWM)",
                Some(Unit::Bytes),
                Gauge,
                p.rss_peak_bytes.map(|v| v as f64),
            ),
            (
                "process_cpu",
                "User and system CPU time",
                Some(Unit::Seconds),
                Counter,
                p.cpu.map(|d| d.as_secs_f64()),
            ),
            (
                "process_open_fds",
                "Open file descriptors",
                None,
                Gauge,
                p.open_fds.map(|v| v as f64),
            ),
            (
                "process_max_fds",
                "Limit of open file descriptors",
                None,
                Gauge,
                p.max_fds.map(|v| v as f64),
            ),
            (
                "process_threads",
                "Threads of the process",
                None,
                Gauge,
                p.threads.map(|v| v as f64),
            ),
        ];
        for (name, help, unit, kind, v) in process {
            if let Some(v) = v {
                one_in(e, name, help, unit.as_ref(), kind, v)?;
            }
        }
        Ok(())
    }
}
