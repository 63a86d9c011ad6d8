//! Charging one request against its client's quotas and throttling it as
//! Kafka does (KIP-13, KIP-124, KIP-219): Produce's request bytes count
//! against `producer_byte_rate`, Fetch's answer bytes against
//! `consumer_byte_rate`, and the time this node spent handling any request
//! against `request_percentage`. A client past a quota is told to wait in
//! its answer's `throttle_time_ms`, and its connection is not read for
//! that long (the read loop does the muting).
//!
//! Handler time ([`HandlerTime`]) is the time the request's futures were
//! being polled: the decoding, authorizing and handling this node did for
//! it, and not the time it sat parked waiting for Raft to commit, for a
//! long-polling Fetch's data, or for the coordinator (Kafka likewise counts
//! its network and request threads' time, not purgatory's). ADR 0028,
//! slice 5.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use kafka_protocol::messages::{ApiKey, FetchResponse, ResponseKind};

use super::session::QuotaCharge;
use crate::controller::quotas::QuotaKey;
use crate::metrics::{Metrics, metrics};
use crate::quota::ClientQuotas;
use crate::quota::rate::WINDOW_MS;

/// Kafka bounds a request-quota throttle to one quota window
/// (`ClientRequestQuotaManager.maxThrottleTimeMs`): the client comes back
/// soon and is measured again.
pub const MAX_REQUEST_THROTTLE: Duration = Duration::from_millis(WINDOW_MS);

/// `request_percentage` is in percent of one thread per second: a second
/// of handler time is 100 percent-seconds.
fn percent_seconds(spent: Duration) -> f64 {
    spent.as_secs_f64() * 100.0
}

/// Whether a request's time is exempt from `request_percentage`, as
/// Kafka's `sendResponseExemptThrottle` callers are: the inter-broker
/// `WriteTxnMarkers`, and anything before a SASL client authenticated
/// (Kafka's authenticator answers those outside its request handlers).
pub fn exempt(key: ApiKey, authenticated: bool) -> bool {
    !authenticated || key == ApiKey::WriteTxnMarkers || super::api_versions::is_sasl(key)
}

/// The time one request has been handled for so far.
#[derive(Debug, Default)]
pub struct HandlerTime {
    clock: Mutex<Clock>,
}

#[derive(Debug, Default)]
struct Clock {
    /// Time spent in finished polls.
    spent: Duration,
    /// A poll under way began then.
    polling_since: Option<Instant>,
    /// What was charged when the answer was made; what the encoding and
    /// the last poll take after it is counted when the request is done
    /// (Kafka's `recordNoThrottle` of network-thread time).
    charged: Option<Charged>,
}

impl Clock {
    /// The time so far, the poll under way included.
    fn so_far(&self) -> Duration {
        self.spent + self.polling_since.map(|s| s.elapsed()).unwrap_or_default()
    }
}

#[derive(Debug)]
struct Charged {
    quotas: Arc<ClientQuotas>,
    user: String,
    client_id: String,
    at: Duration,
}

impl HandlerTime {
    fn clock(&self) -> std::sync::MutexGuard<'_, Clock> {
        self.clock.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn begin(&self) {
        self.clock().polling_since = Some(Instant::now());
    }

    fn end(&self, done: bool) {
        let rest = {
            let mut c = self.clock();
            if let Some(since) = c.polling_since.take() {
                c.spent += since.elapsed();
            }
            if !done {
                return;
            }
            let spent = c.spent;
            c.charged.take().map(|ch| (ch, spent))
        };
        if let Some((ch, spent)) = rest {
            let late = spent.saturating_sub(ch.at);
            if !late.is_zero() {
                ch.quotas.record(
                    QuotaKey::RequestPercentage,
                    &ch.user,
                    &ch.client_id,
                    percent_seconds(late),
                );
            }
        }
    }
}

/// A request's future whose polls count as its handler time. `last`: the
/// request is done when it resolves (its response future), and time
/// counted after its answer was charged is charged then.
pub struct Timed<F> {
    clock: Arc<HandlerTime>,
    inner: F,
    last: bool,
}

impl<F> Timed<F> {
    pub fn new(clock: Arc<HandlerTime>, inner: F, last: bool) -> Timed<F> {
        Timed { clock, inner, last }
    }
}

impl<F: Future + Unpin> Future for Timed<F> {
    type Output = F::Output;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        self.clock.begin();
        let out = Pin::new(&mut self.inner).poll(cx);
        self.clock.end(self.last && out.is_ready());
        out
    }
}

/// One request's quota charges and the throttle they gave.
#[derive(Debug, Default)]
pub struct Throttle {
    /// None until the request is authenticated and routed (boxed: a
    /// request waiting for its header is small).
    charge: Option<Box<Charge>>,
    /// The longest wait any quota asked for (KIP-219), in ms.
    ms: AtomicI32,
}

#[derive(Debug)]
struct Charge {
    quotas: Arc<ClientQuotas>,
    mute: QuotaCharge,
    client_id: String,
    /// None: exempt from `request_percentage` ([`exempt`]).
    time: Option<Arc<HandlerTime>>,
}

impl Throttle {
    /// Charges to `mute.user` and `client_id`; handler time from `time`.
    pub fn new(
        quotas: Arc<ClientQuotas>,
        mute: QuotaCharge,
        client_id: String,
        time: Option<Arc<HandlerTime>>,
    ) -> Throttle {
        Throttle {
            charge: Some(Box::new(Charge {
                quotas,
                mute,
                client_id,
                time,
            })),
            ms: AtomicI32::new(0),
        }
    }

    /// The wait the answer must carry, in ms.
    pub fn ms(&self) -> i32 {
        self.ms.load(Ordering::Relaxed)
    }

    /// The client went past the `key` quota: its answer says how long to
    /// wait, and its connection is not read until then.
    fn apply(&self, key: QuotaKey, wait: Duration) {
        if wait.is_zero() {
            return;
        }
        let c = &metrics().counters;
        Metrics::count(
            match key {
                QuotaKey::ProducerByteRate => &c.quota_throttles_produce,
                QuotaKey::ConsumerByteRate => &c.quota_throttles_fetch,
                QuotaKey::RequestPercentage => &c.quota_throttles_request,
            },
            1,
        );
        let ms = i32::try_from(wait.as_millis()).unwrap_or(i32::MAX);
        self.ms.fetch_max(ms, Ordering::Relaxed);
        if let Some(c) = &self.charge {
            c.mute.mute(wait);
        }
    }

    /// Produce: the request's bytes count at once (KIP-219).
    pub fn produce_bytes(&self, bytes: usize) {
        let Some(c) = &self.charge else { return };
        let wait = c.quotas.record(
            QuotaKey::ProducerByteRate,
            &c.mute.user,
            &c.client_id,
            bytes as f64,
        );
        self.apply(QuotaKey::ProducerByteRate, wait);
    }

    /// Charges the handler time so far against `request_percentage` (once;
    /// the rest is charged when the request is done) and returns the wait,
    /// bounded as Kafka bounds it.
    fn request_time(&self) -> Duration {
        let Some(c) = &self.charge else {
            return Duration::ZERO;
        };
        let Some(time) = &c.time else {
            return Duration::ZERO;
        };
        let spent = {
            let mut clock = time.clock();
            if clock.charged.is_some() {
                return Duration::ZERO;
            }
            let spent = clock.so_far();
            clock.charged = Some(Charged {
                quotas: c.quotas.clone(),
                user: c.mute.user.clone(),
                client_id: c.client_id.clone(),
                at: spent,
            });
            spent
        };
        c.quotas
            .record(
                QuotaKey::RequestPercentage,
                &c.mute.user,
                &c.client_id,
                percent_seconds(spent),
            )
            .min(MAX_REQUEST_THROTTLE)
    }

    /// Charges the request's time and sets the throttle in its answer.
    pub fn answer(&self, body: &mut ResponseKind) {
        let wait = self.request_time();
        self.apply(QuotaKey::RequestPercentage, wait);
        set_throttle_time(body, self.ms());
    }

    /// Fetch, as Kafka's `handleFetchRequest`: the request's time and the
    /// answer's record bytes both count; past either quota the data stays
    /// unsent (its bytes uncounted), the answer is empty and carries the
    /// longer wait.
    pub fn fetch(&self, resp: &mut FetchResponse) {
        let request_wait = self.request_time();
        if let Some(c) = &self.charge {
            let bytes: usize = resp
                .responses
                .iter()
                .flat_map(|t| &t.partitions)
                .filter_map(|p| p.records.as_ref())
                .map(|r| r.len())
                .sum();
            let (user, client) = (&c.mute.user, &c.client_id);
            let bytes = bytes as f64;
            let byte_wait = c
                .quotas
                .record(QuotaKey::ConsumerByteRate, user, client, bytes);
            if !byte_wait.is_zero() || !request_wait.is_zero() {
                c.quotas
                    .record(QuotaKey::ConsumerByteRate, user, client, -bytes);
                resp.responses.clear();
            }
            if byte_wait > request_wait {
                self.apply(QuotaKey::ConsumerByteRate, byte_wait);
            } else {
                self.apply(QuotaKey::RequestPercentage, request_wait);
            }
        }
        resp.throttle_time_ms = resp.throttle_time_ms.max(self.ms());
    }
}

/// Sets `throttle_time_ms` in every answer that has one (a version
/// without the field does not encode it).
fn set_throttle_time(body: &mut ResponseKind, ms: i32) {
    macro_rules! throttled {
        ($($kind:ident),* $(,)?) => {
            match body {
                $(ResponseKind::$kind(r) => r.throttle_time_ms = r.throttle_time_ms.max(ms),)*
                _ => {}
            }
        };
    }
    if ms == 0 {
        return;
    }
    throttled!(
        Produce,
        Fetch,
        ListOffsets,
        Metadata,
        OffsetCommit,
        OffsetFetch,
        FindCoordinator,
        JoinGroup,
        Heartbeat,
        LeaveGroup,
        SyncGroup,
        DescribeGroups,
        ListGroups,
        ApiVersions,
        CreateTopics,
        DeleteTopics,
        DeleteRecords,
        InitProducerId,
        OffsetForLeaderEpoch,
        AddPartitionsToTxn,
        AddOffsetsToTxn,
        EndTxn,
        TxnOffsetCommit,
        DescribeAcls,
        CreateAcls,
        DeleteAcls,
        DescribeConfigs,
        AlterConfigs,
        CreatePartitions,
        DeleteGroups,
        IncrementalAlterConfigs,
        OffsetDelete,
        DescribeClientQuotas,
        AlterClientQuotas,
        DescribeUserScramCredentials,
        AlterUserScramCredentials,
        DescribeCluster,
        DescribeProducers,
        DescribeTransactions,
        ListTransactions,
        ConsumerGroupHeartbeat,
        ConsumerGroupDescribe,
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_of_handler_time_is_a_hundred_percent_seconds() {
        assert!((percent_seconds(Duration::from_secs(1)) - 100.0).abs() < 1e-9);
        assert!((percent_seconds(Duration::from_millis(10)) - 1.0).abs() < 1e-9);
    }

    #[test]
    fn internal_and_unauthenticated_requests_are_exempt() {
        assert!(exempt(ApiKey::WriteTxnMarkers, true));
        assert!(exempt(ApiKey::SaslAuthenticate, true));
        assert!(exempt(ApiKey::ApiVersions, false));
        assert!(!exempt(ApiKey::ApiVersions, true));
        assert!(!exempt(ApiKey::Metadata, true));
    }

    #[test]
    fn only_polls_count_as_handler_time() {
        let time = HandlerTime::default();
        time.begin();
        std::thread::sleep(Duration::from_millis(5));
        time.end(false);
        let polled = time.clock().so_far();
        assert!(polled >= Duration::from_millis(5));
        // Parked between polls: nothing counts.
        std::thread::sleep(Duration::from_millis(5));
        assert_eq!(time.clock().so_far(), polled);
    }

    #[test]
    fn the_throttle_is_set_in_answers_that_carry_one() {
        let mut body = ResponseKind::Metadata(Default::default());
        set_throttle_time(&mut body, 250);
        assert!(matches!(body, ResponseKind::Metadata(ref m) if m.throttle_time_ms == 250));
    }
}
