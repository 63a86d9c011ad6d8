//! The node's budgets for what it holds on behalf of clients, each an
//! explicit, named limit:
//!
//! - [`RequestBudget`]: request bytes being received and processed
//!   (`queued_max_request_bytes`); a connection whose next frame does not fit
//!   stops reading.
//! - [`Backpressure`]: produce requests not answered yet
//!   (`max_pending_requests`, `max_pending_bytes`). At the limit,
//!   connections stop reading (see `kafka/connection.rs`), and a client's
//!   request already read waits for its room however long it takes, in
//!   arrival order: it is never failed for want of room, since a client
//!   retrying it would store it after requests it sent later (ADR 0011).
//!
//! A leaf: the front end, the node services and the replicas all take room
//! here; nothing here knows who.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::error::{HelixError, Result};
use crate::metrics::{Metrics, metrics};

/// The node's budget of request bytes being received and processed
/// (Kafka's `queued.max.request.bytes`, finite here): a connection takes a
/// frame's declared length from it before reading the frame's bytes and
/// gives it back when the request is answered. A connection whose next
/// request does not fit stops reading until enough is given back, so
/// however many connections send large requests (or start them and stall),
/// the bytes held for requests stay within the budget.
#[derive(Debug, Clone)]
pub struct RequestBudget {
    bytes: Arc<Semaphore>,
    total: usize,
}

impl RequestBudget {
    pub fn new(total: usize) -> RequestBudget {
        let total = total.clamp(1, u32::MAX as usize);
        RequestBudget {
            bytes: Arc::new(Semaphore::new(total)),
            total,
        }
    }

    /// Waits until a frame of `len` bytes fits (one larger than the whole
    /// budget takes all of it); the bool says whether it had to wait. None
    /// only if the budget was closed (never done).
    pub async fn acquire(&self, len: usize) -> Option<(OwnedSemaphorePermit, bool)> {
        let n = len.clamp(1, self.total) as u32;
        if let Ok(p) = self.bytes.clone().try_acquire_many_owned(n) {
            return Some((p, false));
        }
        let p = self.bytes.clone().acquire_many_owned(n).await.ok()?;
        Some((p, true))
    }

    /// Bytes not taken now.
    pub fn available(&self) -> usize {
        self.bytes.available_permits()
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

    /// Room for one request and no bytes, without waiting: for tests that
    /// need a [`Room`] to hand to a batcher.
    #[cfg(test)]
    pub fn one_request_without_bytes(&self) -> Option<Room> {
        Some(Room {
            _request: self.requests.clone().try_acquire_owned().ok()?,
            _bytes: None,
        })
    }
}

#[cfg(test)]
mod tests {
    use tokio::sync::mpsc;

    use super::*;

    #[tokio::test]
    async fn a_request_that_does_not_fit_waits_until_the_budget_frees() {
        let budget = RequestBudget::new(100);
        let (first, waited) = budget.acquire(60).await.expect("open");
        assert!(!waited);
        let second = tokio::spawn({
            let budget = budget.clone();
            async move { budget.acquire(60).await.expect("open") }
        });
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        assert!(!second.is_finished(), "60 more bytes do not fit in 40");
        drop(first);
        let (second, waited) = second.await.expect("task");
        assert!(waited);
        assert_eq!(budget.available(), 40);
        drop(second);
        // A frame larger than the whole budget takes all of it, alone.
        let (all, _) = budget.acquire(1 << 30).await.expect("open");
        assert_eq!(budget.available(), 0);
        drop(all);
        assert_eq!(budget.available(), 100);
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
