//! What the node measures, recorded where it happens: per-stage latency of
//! the produce path and batch sizes (HDR histograms), requests per Kafka
//! API, counters, and the busy time of each thread pool.
//!
//! One process-wide registry ([`metrics()`]). `crate::endpoint` serves it
//! as Prometheus text on `/metrics`; [`Metrics::summary`] renders the
//! stages for the log at shutdown.

mod hdr;
pub mod process;
mod requests;

use std::sync::OnceLock;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::time::Duration;

pub use hdr::{Buckets, Hdr};
pub use requests::{Requests, error_name};

/// A produce-path stage with its own histogram.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stage {
    /// From a request reaching the batcher to its batch being proposed.
    BatcherQueueWait,
    /// From propose to the entry being committed (Raft).
    RaftCommit,
    /// Applying one committed entry: idempotence checks, offsets, the WAL
    /// append.
    Apply,
    /// Writing an entry's batches to the WAL (part of `Apply`).
    WalAppend,
    /// The group-committed fsync (fsync mode only).
    Fsync,
    /// From propose to the acknowledgement (durable on a majority).
    Ack,
    /// Encoding and writing a response to the socket.
    ResponseWrite,
}

impl Stage {
    pub const ALL: [Stage; 7] = [
        Stage::BatcherQueueWait,
        Stage::RaftCommit,
        Stage::Apply,
        Stage::WalAppend,
        Stage::Fsync,
        Stage::Ack,
        Stage::ResponseWrite,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Stage::BatcherQueueWait => "batcher_queue_wait",
            Stage::RaftCommit => "raft_commit",
            Stage::Apply => "apply",
            Stage::WalAppend => "wal_append",
            Stage::Fsync => "fsync",
            Stage::Ack => "ack",
            Stage::ResponseWrite => "response_write",
        }
    }

    fn index(self) -> usize {
        self as usize
    }
}

/// A thread pool whose busy time is measured (seed 003: each pool's busy
/// ratio tells which one is saturated).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pool {
    /// The shard threads: Raft, apply and the WAL append.
    Shards,
    /// The syncer thread: fsync rounds.
    Syncer,
}

/// Counters of the broker.
#[derive(Debug, Default)]
pub struct Counters {
    pub produce_requests: AtomicU64,
    pub produce_bytes: AtomicU64,
    pub fetch_requests: AtomicU64,
    pub raft_entries: AtomicU64,
    /// Client connections accepted, ever.
    pub connections: AtomicU64,
    /// Client connections open now.
    pub connections_open: AtomicI64,
    /// Connections refused by the node or per-IP limits.
    pub connections_refused: AtomicU64,
    /// TLS handshakes that failed or did not finish within
    /// `ssl_handshake_timeout_ms` (ADR 0028).
    pub tls_handshake_failures: AtomicU64,
    /// SASL authentications refused (wrong password, unknown user, bad
    /// exchange).
    pub sasl_authentication_failures: AtomicU64,
    /// SASL re-authentications completed (KIP-368).
    pub sasl_reauthentications: AtomicU64,
    /// Connections closed because their SASL session ended without a
    /// re-authentication (`connections_max_reauth_ms`; Kafka's
    /// `expired-connections-killed-count`).
    pub sasl_expired_sessions_closed: AtomicU64,
    /// Connections to SASL listeners closed at accept because their address
    /// failed to authenticate too often
    /// (`max_failed_authentications_per_ip_per_minute`).
    pub sasl_failed_address_refusals: AtomicU64,
    /// Authorizer decisions that allowed an action (ADR 0028, slice 2).
    pub authorizer_allowed: AtomicU64,
    /// Authorizer decisions that denied an action.
    pub authorizer_denied: AtomicU64,
    /// Request bytes read from clients (frames with their length prefix).
    pub bytes_in: AtomicU64,
    /// Response bytes written to clients.
    pub bytes_out: AtomicU64,
    pub backpressure_timeouts: AtomicU64,
    /// Times a connection stopped reading because the produce budget was
    /// full (backpressure pauses).
    pub backpressure_pauses: AtomicU64,
    /// Times a connection stopped reading because its client went past a
    /// quota (KIP-219 mutes).
    pub quota_mutes: AtomicU64,
    /// Answers throttled because their client went past its
    /// `producer_byte_rate` (ADR 0028, slice 4).
    pub quota_throttles_produce: AtomicU64,
    /// Answers throttled by `consumer_byte_rate`.
    pub quota_throttles_fetch: AtomicU64,
    /// Answers throttled by `request_percentage` (ADR 0028, slice 5).
    pub quota_throttles_request: AtomicU64,
    /// Requests whose connection stopped reading until the node's request
    /// byte budget had room (`queued_max_request_bytes`).
    pub request_budget_waits: AtomicU64,
    /// Replicas that found damaged stored data (on read or by the scrubber)
    /// and stopped taking writes.
    pub damaged_replicas: AtomicU64,
    /// Replicas stopped because their log or vote could not be written
    /// (a full or failing disk); served again after a restart.
    pub stopped_replicas: AtomicU64,
    /// Peer messages dropped: a full shard queue or transport lane, or a
    /// peer that is down (Raft resends).
    pub peer_drops: AtomicU64,
    /// Broken connections to a peer reported to the replicas (ADR 0017).
    pub peer_losses: AtomicU64,
    /// Metadata answers that waited for an election under way (ADR 0017).
    pub metadata_election_waits: AtomicU64,
    /// Times a replica leading here lost its lease: no majority of its
    /// group answered within the lease, or their connections broke (ADR
    /// 0019). It stops naming itself leader and serving until one does.
    pub leader_lease_losses: AtomicU64,
    /// Raft entries streamed from a leader's WAL to catch a follower up.
    pub catch_up_entries: AtomicU64,
    /// Transactional batches verified with their transaction coordinator
    /// before being appended (KIP-890 part 1: a transaction's first batch
    /// on a partition; later ones find it ongoing there).
    pub txn_verifications: AtomicU64,
    /// Fetch responses encoded by copying records because their splice
    /// markers were not found unambiguously (expected: 0).
    pub fetch_copy_fallbacks: AtomicU64,
    /// Leadership changes seen by this node's replicas (role or leader).
    pub leader_changes: AtomicU64,
    /// WAL truncations to a new leader's log.
    pub wal_truncations: AtomicU64,
    /// Most produce requests / bytes held unanswered at once (high-water
    /// marks of the backpressure budget).
    pub pending_requests_peak: AtomicU64,
    pub pending_bytes_peak: AtomicU64,
    /// Nanoseconds the shard threads / the syncer spent working.
    pub shard_busy_nanos: AtomicU64,
    pub syncer_busy_nanos: AtomicU64,
}

/// The registry.
#[derive(Debug)]
pub struct Metrics {
    stages: Vec<Hdr>,
    /// Records / bytes of each Raft entry the batcher proposes.
    pub batch_records: Hdr,
    pub batch_bytes: Hdr,
    pub requests: Requests,
    pub counters: Counters,
}

/// Largest value a stage histogram tracks: 60 s in microseconds.
const MAX_MICROS: u64 = 60_000_000;
/// Largest batch tracked: the batcher's own limits are far below.
const MAX_BATCH_RECORDS: u64 = 100_000_000;
const MAX_BATCH_BYTES: u64 = 1 << 32;

pub fn metrics() -> &'static Metrics {
    static M: OnceLock<Metrics> = OnceLock::new();
    M.get_or_init(|| Metrics {
        stages: Stage::ALL.iter().map(|_| Hdr::new(MAX_MICROS)).collect(),
        batch_records: Hdr::new(MAX_BATCH_RECORDS),
        batch_bytes: Hdr::new(MAX_BATCH_BYTES),
        requests: Requests::default(),
        counters: Counters::default(),
    })
}

impl Metrics {
    pub fn record(&self, stage: Stage, d: Duration) {
        self.stages[stage.index()].record(d.as_micros() as u64);
    }

    /// The histogram of `stage`, in microseconds.
    pub fn stage(&self, stage: Stage) -> &Hdr {
        &self.stages[stage.index()]
    }

    pub fn count(counter: &AtomicU64, n: u64) {
        counter.fetch_add(n, Ordering::Relaxed);
    }

    /// Raises a high-water mark.
    pub fn peak(gauge: &AtomicU64, value: u64) {
        gauge.fetch_max(value, Ordering::Relaxed);
    }

    /// Adds time a pool's thread spent working.
    pub fn busy(&self, pool: Pool, d: Duration) {
        let c = match pool {
            Pool::Shards => &self.counters.shard_busy_nanos,
            Pool::Syncer => &self.counters.syncer_busy_nanos,
        };
        c.fetch_add(d.as_nanos() as u64, Ordering::Relaxed);
    }

    /// One line per stage: count, p50, p99, p99.9, max in microseconds.
    pub fn summary(&self) -> String {
        let mut out = String::new();
        for stage in Stage::ALL {
            if let Some([n, p50, p99, p999, max]) = self.stage(stage).quantiles() {
                out.push_str(&format!(
                    "{}: n={n} p50={p50}us p99={p99}us p99.9={p999}us max={max}us\n",
                    stage.name(),
                ));
            }
        }
        let c = &self.counters;
        out.push_str(&format!(
            "produce_requests={} produce_bytes={} fetch_requests={} raft_entries={} connections={} backpressure_timeouts={} request_budget_waits={} damaged_replicas={} fetch_copy_fallbacks={} pending_requests_peak={} pending_bytes_peak={}",
            c.produce_requests.load(Ordering::Relaxed),
            c.produce_bytes.load(Ordering::Relaxed),
            c.fetch_requests.load(Ordering::Relaxed),
            c.raft_entries.load(Ordering::Relaxed),
            c.connections.load(Ordering::Relaxed),
            c.backpressure_timeouts.load(Ordering::Relaxed),
            c.request_budget_waits.load(Ordering::Relaxed),
            c.damaged_replicas.load(Ordering::Relaxed),
            c.fetch_copy_fallbacks.load(Ordering::Relaxed),
            c.pending_requests_peak.load(Ordering::Relaxed),
            c.pending_bytes_peak.load(Ordering::Relaxed),
        ));
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recorded_stages_appear_in_the_summary() {
        let m = metrics();
        m.record(Stage::WalAppend, Duration::from_micros(250));
        let s = m.summary();
        assert!(s.contains("wal_append: n="), "{s}");
    }

    #[test]
    fn stage_indexes_follow_the_list() {
        for (i, s) in Stage::ALL.iter().enumerate() {
            assert_eq!(s.index(), i);
        }
    }
}
