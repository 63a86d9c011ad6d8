//! Per-partition batcher and node-wide produce backpressure.
//!
//! The batcher gathers produce requests for one partition for up to
//! `linger`, `max_bytes` or `max_requests` (whichever comes first) into one
//! Raft proposal. A request that would overflow a full batch is carried into
//! the next one rather than closing a small tail batch.
//!
//! Backpressure bounds what the node holds for produce requests that are
//! not answered yet: `max_pending_requests` and `max_pending_bytes`. At the
//! limit, connections stop reading (see `kafka/connection.rs`), and a
//! client's request already read waits for its room however long it takes,
//! in arrival order: it is never failed for want of room, since a client
//! retrying it would store it after requests it sent later (ADR 0011).

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::{OwnedSemaphorePermit, Semaphore, mpsc, oneshot};

use crate::error::{HelixError, Result};
use crate::metrics::{Metrics, metrics};

/// Limits of one batch (one Raft entry).
#[derive(Debug, Clone, Copy)]
pub struct BatchLimits {
    pub linger: Duration,
    pub max_bytes: usize,
    pub max_requests: usize,
}

/// The answer to one produce request for one partition.
#[derive(Debug)]
pub struct ProduceAck {
    pub base_offset: i64,
    pub log_start_offset: i64,
    /// The batch was already in the log (an idempotent retry): answered
    /// with DUPLICATE_SEQUENCE_NUMBER and its original base offset.
    pub duplicate: bool,
}

pub type ProduceOutcome = Result<ProduceAck>;

/// One produce request's data for one partition, waiting to be proposed.
#[derive(Debug)]
pub struct PendingProduce {
    /// Validated v2 batches, as the producer sent them.
    pub batches: Vec<bytes::Bytes>,
    /// Bytes of `batches`.
    pub size: usize,
    /// 0, 1 or -1 (all).
    pub acks: i16,
    /// None for acks=0: nobody waits for the answer.
    pub reply: Option<oneshot::Sender<ProduceOutcome>>,
    pub enqueued: Instant,
    /// Room held in the node-wide limits until this request is answered.
    pub room: Room,
}

/// Work for a partition's worker, in arrival order.
#[derive(Debug)]
pub enum PartitionCommand {
    Produce(PendingProduce),
    DeleteRecords {
        before: i64,
        reply: oneshot::Sender<Result<i64>>,
    },
    /// Apply retention as of `now_ms`.
    Retention {
        now_ms: i64,
    },
    /// Reopen the log with new settings (changed topic configs).
    Reconfigure {
        log: helix_wal::LogConfig,
    },
    /// Stop: flush and close the log, then reply.
    Close {
        reply: oneshot::Sender<()>,
    },
}

/// What the worker does next.
#[derive(Debug)]
pub enum Work {
    Produce(Vec<PendingProduce>),
    Control(PartitionCommand),
}

/// Collects one partition's produce requests into batches.
#[derive(Debug)]
pub struct Batcher {
    rx: mpsc::Receiver<PartitionCommand>,
    limits: BatchLimits,
    /// A request that did not fit the previous batch, or a control command
    /// that must follow it.
    carry: Option<PartitionCommand>,
    /// When the previous batch was closed: a partition that saw one less
    /// than a linger ago is busy and lingers; an idle one proposes at once.
    last_batch: Option<tokio::time::Instant>,
}

impl Batcher {
    pub fn new(rx: mpsc::Receiver<PartitionCommand>, limits: BatchLimits) -> Batcher {
        Batcher {
            rx,
            limits,
            carry: None,
            last_batch: None,
        }
    }

    /// The next batch or control command; None once every sender is gone.
    pub async fn next(&mut self) -> Option<Work> {
        let first = match self.carry.take() {
            Some(c) => c,
            None => self.rx.recv().await?,
        };
        let first = match first {
            PartitionCommand::Produce(p) => p,
            other => return Some(Work::Control(other)),
        };
        let now = tokio::time::Instant::now();
        let deadline = now + self.limits.linger;
        // Lingering only pays when more requests are coming: on a partition
        // idle for a whole linger a lone request is proposed at once (the
        // linger is an upper bound, "up to 1 ms"), saving a timer tick of
        // latency; a busy partition waits for company.
        let busy = self
            .last_batch
            .is_some_and(|t| now.duration_since(t) < self.limits.linger);
        let mut bytes = first.size;
        let mut batch = vec![first];
        while batch.len() < self.limits.max_requests && bytes < self.limits.max_bytes {
            let next = match self.rx.try_recv() {
                Ok(c) => c,
                Err(mpsc::error::TryRecvError::Disconnected) => break,
                Err(mpsc::error::TryRecvError::Empty) if !busy => break,
                Err(mpsc::error::TryRecvError::Empty) => {
                    match tokio::time::timeout_at(deadline, self.rx.recv()).await {
                        Ok(Some(c)) => c,
                        Ok(None) | Err(_) => break,
                    }
                }
            };
            match next {
                PartitionCommand::Produce(p) if bytes + p.size <= self.limits.max_bytes => {
                    bytes += p.size;
                    batch.push(p);
                }
                other => {
                    self.carry = Some(other);
                    break;
                }
            }
        }
        self.last_batch = Some(tokio::time::Instant::now());
        Some(Work::Produce(batch))
    }
}

/// Shortest throttle asked of a producer once the budget is half used.
pub const THROTTLE_MIN: Duration = Duration::from_millis(10);
/// Longest throttle, asked when the budget is full.
pub const THROTTLE_MAX: Duration = Duration::from_millis(1000);

/// Node-wide limits on unanswered produce requests.
#[derive(Debug, Clone)]
pub struct Backpressure {
    requests: Arc<Semaphore>,
    bytes: Arc<Semaphore>,
    max_requests: usize,
    max_bytes: usize,
}

/// Room taken in the [`Backpressure`] limits; given back when dropped.
#[derive(Debug)]
pub struct Room {
    _request: OwnedSemaphorePermit,
    _bytes: Option<OwnedSemaphorePermit>,
}

impl Backpressure {
    pub fn new(max_requests: usize, max_bytes: usize) -> Backpressure {
        Backpressure {
            requests: Arc::new(Semaphore::new(max_requests)),
            bytes: Arc::new(Semaphore::new(max_bytes)),
            max_requests,
            max_bytes,
        }
    }

    /// Waits for room for one request of `size` bytes, as long as it takes
    /// (first come, first served: the semaphores are fair). A request
    /// larger than the whole byte budget takes all of it. Room comes back
    /// as requests are answered, and every proposal is answered or failed
    /// (a leader that loses its quorum steps down and fails its waiters).
    pub async fn acquire(&self, size: usize) -> Result<Room> {
        let take = size.clamp(1, self.max_bytes) as u32;
        let request = self
            .requests
            .clone()
            .acquire_owned()
            .await
            .map_err(|_| HelixError::ShuttingDown)?;
        let bytes = self
            .bytes
            .clone()
            .acquire_many_owned(take)
            .await
            .map_err(|_| HelixError::ShuttingDown)?;
        let c = &metrics().counters;
        Metrics::peak(
            &c.pending_requests_peak,
            (self.max_requests - self.requests.available_permits()) as u64,
        );
        Metrics::peak(
            &c.pending_bytes_peak,
            (self.max_bytes - self.bytes.available_permits()) as u64,
        );
        Ok(Room {
            _request: request,
            _bytes: Some(bytes),
        })
    }

    /// [`Backpressure::acquire`] for at most `timeout`: for the node's own
    /// writers (group coordinator, controller), whose callers retry as a
    /// whole; never for a client's produce request.
    pub async fn acquire_within(&self, size: usize, timeout: Duration) -> Result<Room> {
        let room = tokio::time::timeout(timeout, self.acquire(size)).await;
        room.map_err(|_| {
            Metrics::count(&metrics().counters.backpressure_timeouts, 1);
            HelixError::Timeout("produce backpressure")
        })?
    }

    /// The delay asked of a producer in `throttle` mode: zero while both
    /// budgets are at most half used, then growing linearly with the more
    /// used one from [`THROTTLE_MIN`] (just past half) to [`THROTTLE_MAX`]
    /// (full). The full budget still pauses reads ([`Self::wait_for_room`]).
    pub fn throttle(&self) -> Duration {
        let used = |max: usize, free: usize| max.saturating_sub(free) as f64 / max as f64;
        let fill = used(self.max_requests, self.requests.available_permits())
            .max(used(self.max_bytes, self.bytes.available_permits()));
        if fill <= 0.5 {
            return Duration::ZERO;
        }
        let over = ((fill - 0.5) * 2.0).min(1.0);
        THROTTLE_MIN + (THROTTLE_MAX - THROTTLE_MIN).mul_f64(over)
    }

    /// Produce requests and bytes held unanswered now.
    pub fn in_use(&self) -> (usize, usize) {
        (
            self.max_requests - self.requests.available_permits(),
            self.max_bytes - self.bytes.available_permits(),
        )
    }

    /// The limits (`max_pending_requests`, `max_pending_bytes`).
    pub fn limits(&self) -> (usize, usize) {
        (self.max_requests, self.max_bytes)
    }

    /// Either budget is used up: a connection asking for room now waits.
    pub fn is_full(&self) -> bool {
        self.requests.available_permits() == 0 || self.bytes.available_permits() == 0
    }

    /// Returns once the node is below both limits (connections call this
    /// before reading the next request, so a full node stops reading).
    pub async fn wait_for_room(&self) {
        let _r = self.requests.acquire().await;
        let _b = self.bytes.acquire().await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::partition::batch::{tests::make_batch, validate};

    fn pending(bp: &Backpressure, size_hint: &[u8]) -> PendingProduce {
        let b = make_batch(&[size_hint], -1, -1, 0);
        let batches = validate(&b, 1 << 20, None)
            .expect("valid")
            .into_iter()
            .map(|v| v.bytes)
            .collect();
        let room = Room {
            _request: bp.requests.clone().try_acquire_owned().expect("room"),
            _bytes: None,
        };
        PendingProduce {
            size: b.len(),
            batches,
            acks: 1,
            reply: None,
            enqueued: Instant::now(),
            room,
        }
    }

    #[tokio::test]
    async fn requests_arriving_within_linger_share_a_batch_and_overflow_is_carried() {
        let bp = Backpressure::new(100, 1 << 20);
        let (tx, rx) = mpsc::channel(16);
        let one = pending(&bp, &[0u8; 10]).size;
        let limits = BatchLimits {
            linger: Duration::from_millis(50),
            max_bytes: one * 2,
            max_requests: 10,
        };
        let mut b = Batcher::new(rx, limits);
        for _ in 0..3 {
            tx.send(PartitionCommand::Produce(pending(&bp, &[0u8; 10])))
                .await
                .expect("send");
        }
        match b.next().await {
            Some(Work::Produce(v)) => assert_eq!(v.len(), 2, "byte limit closes the batch"),
            other => panic!("expected a batch, got {other:?}"),
        }
        drop(tx);
        match b.next().await {
            Some(Work::Produce(v)) => {
                assert_eq!(v.len(), 1, "the carried request leads the next batch")
            }
            other => panic!("expected the carried request, got {other:?}"),
        }
        assert!(b.next().await.is_none());
    }

    #[tokio::test(start_paused = true)]
    async fn an_idle_partition_proposes_at_once_and_a_busy_one_lingers() {
        let bp = Backpressure::new(100, 1 << 20);
        let (tx, rx) = mpsc::channel(16);
        let linger = Duration::from_millis(5);
        let limits = BatchLimits {
            linger,
            max_bytes: 1 << 20,
            max_requests: 10,
        };
        let mut b = Batcher::new(rx, limits);
        let start = tokio::time::Instant::now();
        tx.send(PartitionCommand::Produce(pending(&bp, b"a")))
            .await
            .expect("send");
        assert!(matches!(b.next().await, Some(Work::Produce(v)) if v.len() == 1));
        assert_eq!(
            tokio::time::Instant::now(),
            start,
            "no linger on an idle partition"
        );
        // Right after a batch the partition is busy: the next lone request
        // waits the linger for company (virtual time, no real sleep).
        let sender = tx.clone();
        let later = pending(&bp, b"c");
        tx.send(PartitionCommand::Produce(pending(&bp, b"b")))
            .await
            .expect("send");
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(2)).await;
            sender
                .send(PartitionCommand::Produce(later))
                .await
                .expect("send");
        });
        assert!(
            matches!(b.next().await, Some(Work::Produce(v)) if v.len() == 2),
            "the late request joined"
        );
    }

    #[tokio::test]
    async fn request_limit_closes_a_batch() {
        let bp = Backpressure::new(100, 1 << 20);
        let (tx, rx) = mpsc::channel(16);
        let limits = BatchLimits {
            linger: Duration::from_secs(5),
            max_bytes: 1 << 20,
            max_requests: 2,
        };
        let mut b = Batcher::new(rx, limits);
        for _ in 0..2 {
            tx.send(PartitionCommand::Produce(pending(&bp, b"x")))
                .await
                .expect("send");
        }
        match b.next().await {
            Some(Work::Produce(v)) => assert_eq!(v.len(), 2),
            other => panic!("expected a batch, got {other:?}"),
        }
    }

    #[tokio::test]
    async fn throttle_is_zero_below_half_and_bounded_above() {
        let bp = Backpressure::new(4, 1000);
        assert_eq!(bp.throttle(), Duration::ZERO);
        let a = bp.acquire(10).await.expect("room");
        let b = bp.acquire(10).await.expect("room");
        assert_eq!(bp.throttle(), Duration::ZERO, "half used is not over");
        let c = bp.acquire(10).await.expect("room");
        let three_quarters = bp.throttle();
        assert!(three_quarters > THROTTLE_MIN && three_quarters < THROTTLE_MAX);
        let d = bp.acquire(10).await.expect("room");
        assert_eq!(bp.throttle(), THROTTLE_MAX);
        drop((a, b, c, d));
        assert_eq!(bp.throttle(), Duration::ZERO);
    }

    #[tokio::test]
    async fn the_timed_acquire_times_out_when_full_and_room_frees_on_drop() {
        let bp = Backpressure::new(1, 1000);
        let room = bp
            .acquire_within(10, Duration::from_millis(10))
            .await
            .expect("room");
        let err = bp
            .acquire_within(10, Duration::from_millis(10))
            .await
            .expect_err("full");
        assert!(matches!(err, HelixError::Timeout(_)));
        assert_eq!(bp.requests.available_permits(), 0);
        assert_eq!(bp.bytes.available_permits(), 990);
        drop(room);
        assert!(
            bp.acquire_within(10, Duration::from_millis(10))
                .await
                .is_ok()
        );
    }

    /// ADR 0011: a client's request never fails for want of room; waiting
    /// requests get room in the order they asked, so a connection's
    /// requests are stored in the order it sent them.
    #[tokio::test(start_paused = true)]
    async fn requests_waiting_for_room_get_it_in_arrival_order_however_long_it_takes() {
        let bp = Backpressure::new(1, 1000);
        let held = bp.acquire(10).await.expect("room");
        let (tx, mut rx) = mpsc::unbounded_channel();
        let mut waiters = Vec::new();
        for i in 0..3 {
            let (bp, tx) = (bp.clone(), tx.clone());
            waiters.push(tokio::spawn(async move {
                let room = bp.acquire(10).await.expect("room");
                tx.send(i).expect("send");
                drop(room);
            }));
            // Let it reach the queue before the next one asks.
            tokio::task::yield_now().await;
        }
        // Longer than any timeout a client sends (paused time: instant).
        tokio::time::sleep(Duration::from_secs(120)).await;
        assert!(rx.try_recv().is_err(), "nobody got room while it was held");
        drop(held);
        for w in waiters {
            w.await.expect("waiter");
        }
        let order: Vec<i32> = std::iter::from_fn(|| rx.try_recv().ok()).collect();
        assert_eq!(order, vec![0, 1, 2]);
    }
}
