//! What a scrape reads from the node beyond the registry, at once, as
//! metric families: the produce-path histograms, counters, budgets, thread
//! pools and the process; replicas and groups come from `replicas.rs`.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use helix_raft::{GroupId, Status};
use prometheus_client::metrics::MetricType::{Counter, Gauge};
use prometheus_client::registry::Unit;

use super::families::{Families, Labels, flag};
use super::{compaction, replicas};
use crate::broker::Broker;
use crate::metrics::{Stage, metrics, process::ProcessStats};

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

/// Every family a scrape reports beyond the registry.
pub fn gather(
    broker: Option<&Arc<Broker>>,
    statuses: Vec<(GroupId, Status)>,
    busy: &mut BusySample,
) -> Families {
    let mut f = Families::default();
    f.gauge(
        "serving",
        "1 once the data directory is open and Kafka is served",
        flag(broker.is_some()),
    );
    produce_path(&mut f);
    counters(&mut f);
    pools(&mut f, broker.map_or(1, |b| b.config.shards), busy);
    if let Some(b) = broker {
        budgets(&mut f, b);
        let per_partition = replicas::replicas(&mut f, b, statuses);
        replicas::groups(&mut f, b, per_partition);
        compaction::compaction(&mut f, b, per_partition);
    }
    process(&mut f);
    f
}

fn produce_path(f: &mut Families) {
    let m = metrics();
    f.histogram(
        "produce_stage",
        "Produce path latency by stage: batcher_queue_wait, raft_commit, apply, wal_append, fsync, ack, response_write",
        Some(Unit::Seconds),
        1e-6,
        Stage::ALL
            .iter()
            .map(|s| {
                let labels = vec![("stage", s.name().to_string())];
                (labels, m.stage(*s).buckets(&STAGE_BOUNDS_US))
            })
            .collect(),
    );
    f.histogram(
        "produce_batch_records",
        "Records in each Raft entry the batcher proposes",
        None,
        1.0,
        vec![(Vec::new(), m.batch_records.buckets(&BATCH_RECORD_BOUNDS))],
    );
    f.histogram(
        "produce_batch",
        "Bytes in each Raft entry the batcher proposes",
        Some(Unit::Bytes),
        1.0,
        vec![(Vec::new(), m.batch_bytes.buckets(&BATCH_BYTE_BOUNDS))],
    );
}

fn counters(f: &mut Families) {
    let c = &metrics().counters;
    let counters: [(&'static str, &'static str, &AtomicU64); 31] = [
        (
            "produce_bytes",
            "Record batch bytes in Produce requests",
            &c.produce_bytes,
        ),
        (
            "raft_entries",
            "Raft entries proposed by the batcher",
            &c.raft_entries,
        ),
        (
            "connections_accepted",
            "Client connections accepted",
            &c.connections,
        ),
        (
            "connections_refused",
            "Client connections refused by the node or per-IP limits",
            &c.connections_refused,
        ),
        (
            "tls_handshake_failures",
            "TLS handshakes failed or timed out (ssl_handshake_timeout_ms)",
            &c.tls_handshake_failures,
        ),
        (
            "sasl_authentication_failures",
            "SASL authentications refused",
            &c.sasl_authentication_failures,
        ),
        (
            "sasl_reauthentications",
            "SASL re-authentications completed (KIP-368)",
            &c.sasl_reauthentications,
        ),
        (
            "sasl_expired_sessions_closed",
            "Connections closed: SASL session ended without re-authentication",
            &c.sasl_expired_sessions_closed,
        ),
        (
            "sasl_failed_address_refusals",
            "SASL connections closed at accept: the address failed too often",
            &c.sasl_failed_address_refusals,
        ),
        (
            "authorizer_allowed",
            "Authorizer decisions that allowed an action",
            &c.authorizer_allowed,
        ),
        (
            "authorizer_denied",
            "Authorizer decisions that denied an action",
            &c.authorizer_denied,
        ),
        (
            "network_received_bytes",
            "Request bytes read from clients",
            &c.bytes_in,
        ),
        (
            "network_sent_bytes",
            "Response bytes written to clients",
            &c.bytes_out,
        ),
        (
            "backpressure_pauses",
            "Times a connection stopped reading because the produce budget was full",
            &c.backpressure_pauses,
        ),
        (
            "quota_mutes",
            "Times a connection stopped reading because its client went past a quota",
            &c.quota_mutes,
        ),
        (
            "quota_throttles_produce",
            "Answers throttled because their client went past its producer_byte_rate",
            &c.quota_throttles_produce,
        ),
        (
            "quota_throttles_fetch",
            "Answers throttled because their client went past its consumer_byte_rate",
            &c.quota_throttles_fetch,
        ),
        (
            "quota_throttles_request",
            "Answers throttled because their client went past its request_percentage",
            &c.quota_throttles_request,
        ),
        (
            "backpressure_timeouts",
            "Produce requests that timed out waiting for room in the budget",
            &c.backpressure_timeouts,
        ),
        (
            "request_budget_waits",
            "Requests that waited for room in queued_max_request_bytes",
            &c.request_budget_waits,
        ),
        (
            "damaged_replicas",
            "Replicas that found damaged stored data and stopped taking writes",
            &c.damaged_replicas,
        ),
        (
            "stopped_replicas",
            "Replicas stopped because their log or vote could not be written (full or failing disk)",
            &c.stopped_replicas,
        ),
        (
            "peer_drops",
            "Peer messages dropped (full queue, peer down); Raft resends",
            &c.peer_drops,
        ),
        (
            "peer_losses",
            "Broken connections to a peer; the followers of its groups campaign at once",
            &c.peer_losses,
        ),
        (
            "leader_lease_losses",
            "Times a leader here lost its lease (no majority answered within it); it stopped naming itself leader",
            &c.leader_lease_losses,
        ),
        (
            "metadata_election_waits",
            "Metadata answers that waited for an election under way",
            &c.metadata_election_waits,
        ),
        (
            "catch_up_entries",
            "Raft entries streamed from this node's WAL to catch followers up",
            &c.catch_up_entries,
        ),
        (
            "txn_verifications",
            "Transactional batches verified with their transaction coordinator (a transaction's first on a partition)",
            &c.txn_verifications,
        ),
        (
            "fetch_copy_fallbacks",
            "Fetch responses encoded by copying records (expected 0)",
            &c.fetch_copy_fallbacks,
        ),
        (
            "leader_changes",
            "Role or leader changes seen by this node's replicas",
            &c.leader_changes,
        ),
        (
            "wal_truncations",
            "WAL truncations to a new leader's log",
            &c.wal_truncations,
        ),
    ];
    for (name, help, counter) in counters {
        f.counter(name, help, counter.load(Ordering::Relaxed) as f64);
    }
    f.gauge(
        "connections_open",
        "Client connections open",
        c.connections_open.load(Ordering::Relaxed) as f64,
    );
    f.gauge(
        "produce_pending_requests_peak",
        "Most produce requests held unanswered at once since start",
        c.pending_requests_peak.load(Ordering::Relaxed) as f64,
    );
    f.gauge(
        "produce_pending_bytes_peak",
        "Most produce bytes held unanswered at once since start",
        c.pending_bytes_peak.load(Ordering::Relaxed) as f64,
    );
}

/// Busy seconds and ratios of the tokio runtime that runs network I/O, the
/// shard threads and the syncer.
fn pools(f: &mut Families, shards: usize, busy: &mut BusySample) {
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
    // (pool, threads, busy now, busy at the previous scrape)
    let pools = [
        ("network", workers, network_busy, busy.network),
        ("shards", shards, shard_busy, busy.shards),
        ("syncer", 1, syncer_busy, busy.syncer),
    ];
    let rows = |read: &dyn Fn(usize, Duration, Duration) -> f64| -> Vec<(Labels, f64)> {
        pools
            .iter()
            .map(|(pool, threads, now, before)| {
                (
                    vec![("pool", pool.to_string())],
                    read(*threads, *now, *before),
                )
            })
            .collect()
    };
    f.scalar(
        "pool_threads",
        "Threads of each pool: network (tokio runtime: Kafka and peer connections), shards (Raft, apply, WAL append), syncer (fsync)",
        None,
        Gauge,
        rows(&|threads, _, _| threads as f64),
    );
    f.scalar(
        "pool_busy",
        "Time the pool's threads spent working",
        Some(Unit::Seconds),
        Counter,
        rows(&|_, now, _| now.as_secs_f64()),
    );
    f.scalar(
        "pool_busy_ratio",
        "Busy share of the pool's threads since the previous scrape (1: saturated)",
        None,
        Gauge,
        rows(&|threads, now, before| {
            (now.saturating_sub(before).as_secs_f64() / (elapsed * threads.max(1) as f64)).min(1.0)
        }),
    );
    f.gauge(
        "runtime_alive_tasks",
        "Tasks alive in the network runtime",
        runtime.num_alive_tasks() as f64,
    );
    f.gauge(
        "runtime_global_queue_depth",
        "Tasks waiting in the network runtime's global queue (early sign of overload)",
        runtime.global_queue_depth() as f64,
    );
    *busy = BusySample {
        at: now,
        shards: shard_busy,
        syncer: syncer_busy,
        network: network_busy,
    };
}

fn budgets(f: &mut Families, b: &Broker) {
    let (requests, bytes) = b.backpressure.in_use();
    let (max_requests, max_bytes) = b.backpressure.limits();
    let total = b.config.queued_max_request_bytes;
    let gauges = [
        (
            "produce_pending_requests",
            "Produce requests held unanswered",
            requests,
        ),
        (
            "produce_pending_requests_limit",
            "max_pending_requests",
            max_requests,
        ),
        (
            "produce_pending_bytes",
            "Bytes of produce requests held unanswered",
            bytes,
        ),
        (
            "produce_pending_bytes_limit",
            "max_pending_bytes",
            max_bytes,
        ),
        (
            "request_bytes_in_use",
            "Request bytes being received and processed",
            total.saturating_sub(b.request_budget.available()),
        ),
        ("request_bytes_limit", "queued_max_request_bytes", total),
    ];
    for (name, help, value) in gauges {
        f.gauge(name, help, value as f64);
    }
}

fn process(f: &mut Families) {
    let p = ProcessStats::read();
    let float = |v: Option<u64>| v.map(|v| v as f64);
    /// Name, help, unit, type and value (None: not readable here).
    type Reading = (
        &'static str,
        &'static str,
        Option<Unit>,
        prometheus_client::metrics::MetricType,
        Option<f64>,
    );
    let readings: [Reading; 7] = [
        (
            "process_resident_memory",
            "Resident memory (VmRSS), mapped log pages included",
            Some(Unit::Bytes),
            Gauge,
            float(p.rss_bytes),
        ),
        (
            "process_anonymous_memory",
            "Anonymous resident memory (RssAnon): heap and stacks",
            Some(Unit::Bytes),
            Gauge,
            float(p.rss_anon_bytes),
        ),
        (
            "process_resident_memory_peak",
            "Peak resident memory (VmHWM)",
            Some(Unit::Bytes),
            Gauge,
            float(p.rss_peak_bytes),
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
            float(p.open_fds),
        ),
        (
            "process_max_fds",
            "Limit of open file descriptors",
            None,
            Gauge,
            float(p.max_fds),
        ),
        (
            "process_threads",
            "Threads of the process",
            None,
            Gauge,
            float(p.threads),
        ),
    ];
    for (name, help, unit, kind, value) in readings {
        if let Some(v) = value {
            f.scalar(name, help, unit, kind, vec![(Vec::new(), v)]);
        }
    }
}
