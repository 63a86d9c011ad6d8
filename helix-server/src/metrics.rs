//! Per-stage latency histograms of the produce path and a few counters.
//!
//! One process-wide registry ([`metrics()`]): stages record microseconds
//! into HDR histograms; `summary()` renders them for the log (at shutdown
//! and on demand). Exporting over HTTP comes with the observability work.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use hdrhistogram::Histogram;

/// A produce-path stage with its own histogram.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stage {
    /// From a request reaching the batcher to its batch being proposed.
    BatcherQueueWait,
    /// From propose to the entry being committed (Raft).
    RaftCommit,
    /// Writing an entry's batches to the WAL.
    WalAppend,
    /// The group-committed fsync (fsync mode only).
    Fsync,
    /// From propose to the acknowledgement (durable on a majority).
    Ack,
    /// Encoding and writing a response to the socket.
    ResponseWrite,
}

const STAGES: [Stage; 6] = [
    Stage::BatcherQueueWait,
    Stage::RaftCommit,
    Stage::WalAppend,
    Stage::Fsync,
    Stage::Ack,
    Stage::ResponseWrite,
];

impl Stage {
    fn name(self) -> &'static str {
        match self {
            Stage::BatcherQueueWait => "batcher_queue_wait",
            Stage::RaftCommit => "raft_commit",
            Stage::WalAppend => "wal_append",
            Stage::Fsync => "fsync",
            Stage::Ack => "ack",
            Stage::ResponseWrite => "response_write",
        }
    }
}

/// Counters of the broker.
#[derive(Debug, Default)]
pub struct Counters {
    pub produce_requests: AtomicU64,
    pub produce_bytes: AtomicU64,
    pub fetch_requests: AtomicU64,
    pub raft_entries: AtomicU64,
    pub connections: AtomicU64,
    pub backpressure_timeouts: AtomicU64,
    /// Requests whose connection stopped reading until the node's request
    /// byte budget had room (`queued_max_request_bytes`).
    pub request_budget_waits: AtomicU64,
    /// Replicas that found damaged stored data (on read or by the scrubber)
    /// and stopped taking writes.
    pub damaged_replicas: AtomicU64,
    /// Peer messages dropped: a full shard queue or transport lane, or a
    /// peer that is down (Raft resends).
    pub peer_drops: AtomicU64,
    /// Raft entries streamed from a leader's WAL to catch a follower up.
    pub catch_up_entries: AtomicU64,
    /// Fetch responses encoded by copying records because their splice
    /// markers were not found unambiguously (expected: 0).
    pub fetch_copy_fallbacks: AtomicU64,
    /// Most produce requests / bytes held unanswered at once (high-water
    /// marks of the backpressure budget).
    pub pending_requests_peak: AtomicU64,
    pub pending_bytes_peak: AtomicU64,
}

/// The registry.
#[derive(Debug)]
pub struct Metrics {
    stages: Vec<Mutex<Histogram<u64>>>,
    pub counters: Counters,
}

/// Largest value a histogram tracks: 60 s in microseconds.
const MAX_MICROS: u64 = 60_000_000;

pub fn metrics() -> &'static Metrics {
    static M: OnceLock<Metrics> = OnceLock::new();
    M.get_or_init(|| Metrics {
        stages: STAGES
            .iter()
            .map(|_| {
                Mutex::new(
                    Histogram::new_with_bounds(1, MAX_MICROS, 3).unwrap_or_else(|_| {
                        Histogram::new(3).expect("3 significant digits is valid")
                    }),
                )
            })
            .collect(),
        counters: Counters::default(),
    })
}

impl Metrics {
    pub fn record(&self, stage: Stage, d: Duration) {
        let us = (d.as_micros() as u64).clamp(1, MAX_MICROS);
        let i = STAGES.iter().position(|s| *s == stage).unwrap_or(0);
        if let Ok(mut h) = self.stages[i].lock() {
            let _ = h.record(us);
        }
    }

    pub fn count(counter: &AtomicU64, n: u64) {
        counter.fetch_add(n, Ordering::Relaxed);
    }

    /// Raises a high-water mark.
    pub fn peak(gauge: &AtomicU64, value: u64) {
        gauge.fetch_max(value, Ordering::Relaxed);
    }

    /// One line per stage: count, p50, p99, p99.9, max in microseconds.
    pub fn summary(&self) -> String {
        let mut out = String::new();
        for (i, stage) in STAGES.iter().enumerate() {
            if let Ok(h) = self.stages[i].lock() {
                if h.is_empty() {
                    continue;
                }
                out.push_str(&format!(
                    "{}: n={} p50={}us p99={}us p99.9={}us max={}us\n",
                    stage.name(),
                    h.len(),
                    h.value_at_quantile(0.5),
                    h.value_at_quantile(0.99),
                    h.value_at_quantile(0.999),
                    h.max()
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
}
