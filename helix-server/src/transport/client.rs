//! The sending side: one [`LaneQueue`] and one connection task per (peer,
//! lane). The task connects (backing off with jitter while the peer is
//! away), opens the lane's stream, and moves whatever is queued into stream
//! messages, as many payloads per message as `max_frame_bytes` allows.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use bytes::Bytes;
use tokio::sync::{Notify, mpsc};
use tokio_stream::wrappers::ReceiverStream;
use tonic::metadata::{BinaryMetadataValue, MetadataValue};
use tonic::transport::{Channel, Endpoint};

use super::proto::peer_client::PeerClient;
use super::proto::{CallRequest, Frames};
use super::{Lane, LaneStatus, Shared, TransportError};

/// HTTP/2 keepalive: a ping this often on an idle connection, and the
/// connection is dropped if a ping is not answered in time. A peer that was
/// kill -9'd or black-holed is noticed within a few seconds.
pub const KEEPALIVE_INTERVAL: Duration = Duration::from_secs(1);
pub const KEEPALIVE_TIMEOUT: Duration = Duration::from_secs(3);
const CONNECT_TIMEOUT: Duration = Duration::from_secs(1);
/// Stream messages waiting for HTTP/2 flow control (beyond that, the lane
/// queue fills and drops).
const FRAMES_IN_FLIGHT: usize = 2;
/// A frame the stream has not taken for this long means the peer stopped
/// reading it while its connection still answers keepalive pings (pings
/// are the connection's, flow control is the stream's): the lane is
/// dropped and connected again. A receiver reads every frame at once
/// (delivery never waits), so a live stream never stalls this long.
const STREAM_STALL_TIMEOUT: Duration = Duration::from_secs(5);

pub const META_FROM: &str = "x-helix-from";
pub const META_LANE: &str = "x-helix-lane";
pub const META_CLUSTER: &str = "x-helix-cluster-bin";

struct QueueInner {
    items: VecDeque<Bytes>,
    bytes: usize,
    /// The lane's channel while its stream is up; None: sends are dropped.
    channel: Option<Channel>,
}

/// What waits to be sent to one peer on one lane, bounded in bytes.
pub struct LaneQueue {
    limit: usize,
    inner: Mutex<QueueInner>,
    ready: Notify,
    sent_frames: AtomicU64,
    sent_bytes: AtomicU64,
    dropped: AtomicU64,
    reconnects: AtomicU64,
}

impl LaneQueue {
    pub fn new(limit: usize) -> LaneQueue {
        LaneQueue {
            limit,
            inner: Mutex::new(QueueInner {
                items: VecDeque::new(),
                bytes: 0,
                channel: None,
            }),
            ready: Notify::new(),
            sent_frames: AtomicU64::new(0),
            sent_bytes: AtomicU64::new(0),
            dropped: AtomicU64::new(0),
            reconnects: AtomicU64::new(0),
        }
    }

    fn lock(&self) -> MutexGuard<'_, QueueInner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Queues a payload; false (a counted drop) while the lane is down or
    /// its byte limit would be passed.
    pub fn push(&self, payload: Bytes) -> bool {
        let mut q = self.lock();
        if q.channel.is_none() || q.bytes + payload.len() > self.limit {
            drop(q);
            self.dropped.fetch_add(1, Ordering::Relaxed);
            return false;
        }
        q.bytes += payload.len();
        q.items.push_back(payload);
        drop(q);
        self.ready.notify_one();
        true
    }

    /// Counts a payload refused before queueing.
    pub fn refuse(&self) {
        self.dropped.fetch_add(1, Ordering::Relaxed);
    }

    /// Waits for payloads, then takes as many as fit `max_bytes` (at least one).
    async fn take(&self, max_bytes: usize) -> Vec<Bytes> {
        loop {
            {
                let mut q = self.lock();
                if !q.items.is_empty() {
                    let mut out = Vec::new();
                    let mut size = 0usize;
                    while let Some(front) = q.items.front() {
                        if !out.is_empty() && size + front.len() > max_bytes {
                            break;
                        }
                        size += front.len();
                        if let Some(p) = q.items.pop_front() {
                            out.push(p);
                        }
                    }
                    q.bytes -= size;
                    return out;
                }
            }
            self.ready.notified().await;
        }
    }

    /// Marks the lane up (with its channel) or down (dropping what waits).
    fn set_channel(&self, channel: Option<Channel>) {
        let mut q = self.lock();
        if channel.is_none() {
            if !q.items.is_empty() {
                self.dropped
                    .fetch_add(q.items.len() as u64, Ordering::Relaxed);
            }
            q.items.clear();
            q.bytes = 0;
        }
        q.channel = channel;
    }

    /// The lane's channel while it is up.
    pub fn channel(&self) -> Option<Channel> {
        self.lock().channel.clone()
    }

    pub fn status(&self) -> LaneStatus {
        let q = self.lock();
        LaneStatus {
            connected: q.channel.is_some(),
            queued_bytes: q.bytes,
            sent_frames: self.sent_frames.load(Ordering::Relaxed),
            sent_bytes: self.sent_bytes.load(Ordering::Relaxed),
            dropped: self.dropped.load(Ordering::Relaxed),
            reconnects: self.reconnects.load(Ordering::Relaxed),
        }
    }
}

fn endpoint(addr: &str) -> Result<Endpoint, String> {
    Endpoint::from_shared(format!("http://{addr}"))
        .map(|e| {
            e.connect_timeout(CONNECT_TIMEOUT)
                .tcp_nodelay(true)
                .http2_keep_alive_interval(KEEPALIVE_INTERVAL)
                .keep_alive_timeout(KEEPALIVE_TIMEOUT)
                .keep_alive_while_idle(true)
                .initial_stream_window_size(Some(8 << 20))
                .initial_connection_window_size(Some(16 << 20))
        })
        .map_err(|e| format!("{addr:?}: {e}"))
}

/// Adds who is sending (and on which lane) to a request.
fn identify<T>(req: &mut tonic::Request<T>, shared: &Shared, lane: Option<Lane>) {
    let m = req.metadata_mut();
    if let Ok(v) = MetadataValue::try_from(shared.config.node.to_string()) {
        m.insert(META_FROM, v);
    }
    m.insert_bin(
        META_CLUSTER,
        BinaryMetadataValue::from_bytes(shared.config.cluster_id.as_bytes()),
    );
    if let Some(lane) = lane
        && let Ok(v) = MetadataValue::try_from(lane.name())
    {
        m.insert(META_LANE, v);
    }
}

/// A pseudo-random fraction of `d` (jitter without a random number crate:
/// the clock's nanoseconds mixed with who is connecting).
fn jitter(d: Duration, salt: u64) -> Duration {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |t| u64::from(t.subsec_nanos()));
    let mixed = (nanos ^ salt).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 40;
    d.mul_f64((mixed % 1000) as f64 / 2000.0)
}

/// Keeps one lane to one peer up for as long as the transport runs.
pub async fn run(shared: Arc<Shared>, node: u64, addr: String, lane: Lane, queue: Arc<LaneQueue>) {
    let mut stop = shared.stop.subscribe();
    let (min, max) = shared.config.backoff;
    let mut backoff = min;
    let mut failures = 0u64;
    let endpoint = match endpoint(&addr) {
        Ok(e) => e,
        Err(e) => {
            tracing::error!(peer = node, lane = lane.name(), error = %e, "bad peer address; lane disabled");
            return;
        }
    };
    let salt = node.wrapping_mul(31) ^ lane.index() as u64;
    loop {
        if *stop.borrow() {
            return;
        }
        let connect = async {
            match &shared.config.tls {
                Some(t) => {
                    let connector = super::tls::Connector {
                        tls: t.client.clone(),
                    };
                    endpoint.connect_with_connector(connector).await
                }
                None => endpoint.connect().await,
            }
        };
        let attempt = tokio::select! {
            r = connect => r,
            _ = stop.changed() => return,
        };
        match attempt {
            Ok(channel) => {
                if failures > 0 {
                    queue.reconnects.fetch_add(1, Ordering::Relaxed);
                }
                tracing::info!(peer = node, lane = lane.name(), "peer lane connected");
                let began = Instant::now();
                let ended = stream(&shared, channel, lane, &queue, &mut stop).await;
                queue.set_channel(None);
                if *stop.borrow() {
                    return;
                }
                shared.lost(node);
                match ended {
                    Ok(()) => tracing::info!(peer = node, lane = lane.name(), "peer lane closed"),
                    Err(e) => {
                        tracing::info!(peer = node, lane = lane.name(), error = %e, "peer lane lost")
                    }
                }
                // A lane that served a while starts over from the shortest
                // wait; one that broke at once (a peer refusing this node's
                // certificate, say) backs off like a failed connect, never
                // a tight loop of connects.
                if began.elapsed() >= max {
                    failures = 0;
                    backoff = min;
                }
                failures += 1;
            }
            Err(e) => {
                failures += 1;
                if failures == 1 {
                    tracing::info!(peer = node, lane = lane.name(), error = %e, "peer unreachable; retrying with backoff");
                }
            }
        }
        let wait = backoff + jitter(backoff, salt);
        tokio::select! {
            _ = tokio::time::sleep(wait) => {}
            _ = stop.changed() => return,
        }
        backoff = (backoff * 2).min(max);
    }
}

/// One stream's life: frames flow until the peer, the network or shutdown
/// ends it.
async fn stream(
    shared: &Shared,
    channel: Channel,
    lane: Lane,
    queue: &LaneQueue,
    stop: &mut tokio::sync::watch::Receiver<bool>,
) -> Result<(), String> {
    let max = shared.config.max_frame_bytes;
    let mut client = PeerClient::new(channel.clone())
        .max_encoding_message_size(max)
        .max_decoding_message_size(max);
    let (tx, rx) = mpsc::channel::<Frames>(FRAMES_IN_FLIGHT);
    let mut req = tonic::Request::new(ReceiverStream::new(rx));
    identify(&mut req, shared, Some(lane));
    queue.set_channel(Some(channel));
    let budget = frame_budget(max);
    let pump = async {
        loop {
            let payloads = queue.take(budget).await;
            let bytes: usize = payloads.iter().map(Bytes::len).sum();
            match tokio::time::timeout(STREAM_STALL_TIMEOUT, tx.send(Frames { payloads })).await {
                Ok(Ok(())) => {}
                Ok(Err(_)) => return Ok(()),
                Err(_) => {
                    return Err(format!(
                        "the stream took no frame for {STREAM_STALL_TIMEOUT:?}: the peer stopped reading it"
                    ));
                }
            }
            queue.sent_frames.fetch_add(1, Ordering::Relaxed);
            queue.sent_bytes.fetch_add(bytes as u64, Ordering::Relaxed);
        }
    };
    tokio::select! {
        r = client.stream(req) => r.map(|_| ()).map_err(|s| format!("{}: {}", s.code(), s.message())),
        r = pump => r,
        _ = stop.changed() => Ok(()),
    }
}

/// Payload bytes one frame may carry: a little below the message limit,
/// as the message adds a few bytes of framing per payload.
pub fn frame_budget(max_frame_bytes: usize) -> usize {
    max_frame_bytes.saturating_sub(max_frame_bytes / 16).max(1)
}

/// A unary call on `channel` (the peer's control connection).
pub async fn call(
    shared: &Shared,
    channel: Channel,
    to: u64,
    request: Bytes,
    timeout: Duration,
) -> Result<Bytes, TransportError> {
    let max = shared.config.max_frame_bytes;
    let mut client = PeerClient::new(channel)
        .max_encoding_message_size(max)
        .max_decoding_message_size(max);
    let mut req = tonic::Request::new(CallRequest { body: request });
    identify(&mut req, shared, None);
    req.set_timeout(timeout);
    let answer = tokio::time::timeout(timeout, client.call(req))
        .await
        .map_err(|_| TransportError::Timeout(to))?
        .map_err(|s| match s.code() {
            // The deadline travels as grpc-timeout; either side may end it.
            tonic::Code::Cancelled | tonic::Code::DeadlineExceeded => TransportError::Timeout(to),
            code => TransportError::Call(to, format!("{code}: {}", s.message())),
        })?
        .into_inner();
    if answer.error.is_empty() {
        Ok(answer.body)
    } else {
        Err(TransportError::Call(to, answer.error))
    }
}
