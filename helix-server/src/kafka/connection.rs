//! One client connection: a read loop that frames and starts requests in
//! order, and a write loop that sends their responses in the same order
//! while later requests are already being processed (pipelining).
//!
//! A connection that sends no request for `connections_max_idle_ms` is
//! closed, as is one the admission table evicts to make room (the idle
//! longest when the node is full, see [`super::admission`]).
//!
//! Requests other than Produce and Fetch take effect one after the other,
//! in the order they were read, as on Kafka ([`super::request_order`]).
//!
//! Limits: at most [`MAX_IN_FLIGHT`] requests of a connection are being
//! processed at once; past that the read loop waits, and so does TCP. The
//! read loop also waits while the node's produce backpressure is full, and
//! in `throttle` mode stops reading after a Produce for the node's current
//! throttle (ADR 0011, the KIP-219 mute); likewise after a request that
//! took its client past a quota, for the quota's throttle (`crate::quota`).

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use kafka_protocol::messages::ApiKey;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;

use super::admission::Ticket;
use super::api_versions;
use super::dispatch::{self, PendingResponse};
use super::frame::{read_body, read_len, read_token};
use super::request_order::RequestOrder;
use super::sasl::MAX_TOKEN;
use super::segmented::{Frame, write_frame};
use super::session::{Listener, Session};
use crate::broker::Broker;
use crate::config::BackpressureMode;
use crate::error::Result;
use crate::metrics::{Metrics, Stage, metrics};

/// Requests of one connection processed concurrently before reading pauses.
pub const MAX_IN_FLIGHT: usize = 1024;

/// A request being answered: its handler, and what its latency is
/// recorded under once the response is written.
struct InFlight {
    handler: JoinHandle<Result<Option<Frame>>>,
    api: Option<(ApiKey, i16)>,
    read_at: Instant,
}

/// Counts the connection open while it lives.
struct OpenConnection;

impl OpenConnection {
    fn new() -> Self {
        let c = &metrics().counters;
        Metrics::count(&c.connections, 1);
        c.connections_open.fetch_add(1, Ordering::Relaxed);
        OpenConnection
    }
}

impl Drop for OpenConnection {
    fn drop(&mut self) {
        metrics()
            .counters
            .connections_open
            .fetch_sub(1, Ordering::Relaxed);
    }
}

/// The API key and version at the front of a request frame, if known; a
/// version this node does not serve is -1 (metric labels stay bounded
/// whatever a client sends).
fn api_of(frame: &[u8]) -> Option<(ApiKey, i16)> {
    let key = ApiKey::try_from(i16::from_be_bytes([*frame.first()?, *frame.get(1)?])).ok()?;
    let version = i16::from_be_bytes([*frame.get(2)?, *frame.get(3)?]);
    Some((
        key,
        if api_versions::serves(key, version) {
            version
        } else {
            -1
        },
    ))
}

/// Serves a connection accepted on `listener` until the client closes it,
/// it misbehaves, or the broker shuts down (then in-flight requests are
/// still answered). On a TLS listener the handshake comes first, within
/// `ssl_handshake_timeout_ms`, holding the admission ticket.
pub async fn serve(
    broker: Arc<Broker>,
    stream: TcpStream,
    listener: Arc<Listener>,
    shutdown: watch::Receiver<bool>,
    ticket: Ticket,
) {
    let peer_ip = stream.peer_addr().ok().map(|a| a.ip());
    let peer = stream
        .peer_addr()
        .map(|a| a.to_string())
        .unwrap_or_default();
    if let (Some(ip), Some(sasl)) = (peer_ip, &listener.sasl)
        && sasl.refuses(ip)
    {
        Metrics::count(&metrics().counters.sasl_failed_address_refusals, 1);
        log_refusal(ip);
        return;
    }
    let _ = stream.set_nodelay(true);
    let _open = OpenConnection::new();
    let Some(acceptor) = listener
        .tls
        .as_ref()
        .map(|t| tokio_rustls::TlsAcceptor::from(t.current()))
    else {
        let session = Session::new(listener, peer_ip, None);
        let (reader, writer) = stream.into_split();
        return serve_stream(broker, reader, writer, session, peer, shutdown, ticket).await;
    };
    let timeout = broker.config.tls.handshake_timeout;
    let tls = match tokio::time::timeout(timeout, acceptor.accept(stream)).await {
        Ok(Ok(tls)) => tls,
        Ok(Err(e)) => {
            Metrics::count(&metrics().counters.tls_handshake_failures, 1);
            tracing::info!(%peer, listener = %listener.config.name, error = %e, "closing connection: TLS handshake failed");
            return;
        }
        Err(_) => {
            Metrics::count(&metrics().counters.tls_handshake_failures, 1);
            tracing::info!(%peer, listener = %listener.config.name, timeout_ms = timeout.as_millis() as u64, "closing connection: TLS handshake not finished in time (ssl_handshake_timeout_ms)");
            return;
        }
    };
    let principal = super::tls::principal(tls.get_ref().1.peer_certificates());
    if let Some(p) = &principal {
        tracing::debug!(%peer, principal = %p, "TLS client certificate");
    }
    let session = Session::new(listener, peer_ip, principal);
    let (reader, writer) = tokio::io::split(tls);
    serve_stream(broker, reader, writer, session, peer, shutdown, ticket).await
}

/// Logs a refusal for failed authentications, at most once per
/// [`REFUSAL_LOG_INTERVAL`] for the whole node (a flood must not flood the
/// log); the metric counts them all.
fn log_refusal(ip: std::net::IpAddr) {
    static LAST: std::sync::Mutex<Option<Instant>> = std::sync::Mutex::new(None);
    let mut last = LAST.lock().unwrap_or_else(|p| p.into_inner());
    let now = Instant::now();
    if last.is_some_and(|t| now.duration_since(t) < REFUSAL_LOG_INTERVAL) {
        return;
    }
    *last = Some(now);
    tracing::warn!(%ip, "closing connection at accept: its address failed SASL authentication too often (max_failed_authentications_per_ip_per_minute; logged once per 10 s, see helix_sasl_failed_address_refusals)");
}

/// How often refusals for failed authentications are logged at most.
const REFUSAL_LOG_INTERVAL: Duration = Duration::from_secs(10);

/// The request loop over a connection's two halves (TCP or TLS).
async fn serve_stream<R, W>(
    broker: Arc<Broker>,
    mut reader: R,
    writer: W,
    mut session: Session,
    peer: String,
    mut shutdown: watch::Receiver<bool>,
    ticket: Ticket,
) where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin + Send + 'static,
{
    let m = metrics();
    let (tx, rx) = mpsc::channel::<InFlight>(MAX_IN_FLIGHT);
    let write_loop = tokio::spawn(write_responses(writer, rx));
    let max = broker.config.max_request_size;
    let idle = broker.config.connections_max_idle;
    let mut order = RequestOrder::default();
    loop {
        if broker.backpressure.is_full() {
            Metrics::count(&m.counters.backpressure_pauses, 1);
        }
        tokio::select! {
            _ = shutdown.changed() => break,
            _ = broker.backpressure.wait_for_room() => {}
        }
        // A client past its quota is not read until its throttle passes
        // (KIP-219); its answer already told it how long.
        if let Some(until) = session.take_mute() {
            Metrics::count(&m.counters.quota_mutes, 1);
            tokio::select! {
                _ = shutdown.changed() => break,
                _ = tokio::time::sleep_until(until) => {}
            }
        }
        if session.expects_raw_sasl_token() {
            let token = tokio::select! {
                _ = shutdown.changed() => break,
                t = within(idle, &peer, "closing connection: no SASL token (connections_max_idle_ms)", read_token(&mut reader, MAX_TOKEN)) => t,
            };
            let Some(token) = token else { break };
            match dispatch::sasl_token(&mut session, token) {
                Ok(reply) => {
                    let in_flight = InFlight {
                        handler: tokio::spawn(reply),
                        api: None,
                        read_at: Instant::now(),
                    };
                    if tx.send(in_flight).await.is_err() {
                        break;
                    }
                    continue;
                }
                Err(close) => {
                    tracing::info!(%peer, reason = %close, "closing connection");
                    tokio::time::sleep(broker.config.sasl.failed_authentication_delay).await;
                    break;
                }
            }
        }
        let len = tokio::select! {
            _ = shutdown.changed() => break,
            _ = ticket.activity.evicted() => {
                tracing::info!(%peer, "closing connection: the node is at its connection limit and this one was idle longest");
                break;
            }
            len = within(idle, &peer, "closing idle connection (connections_max_idle_ms)", read_len(&mut reader, max)) => len,
        };
        let Some(Some(len)) = len else { break };
        Metrics::count(&m.counters.bytes_in, len as u64 + 4);
        // The frame's bytes come out of the node's request budget before
        // they are read; until they fit, this connection reads nothing.
        let room = tokio::select! {
            _ = shutdown.changed() => break,
            room = broker.request_budget.acquire(len) => room,
        };
        let Some((room, waited)) = room else { break };
        if waited {
            Metrics::count(&m.counters.request_budget_waits, 1);
        }
        let frame = tokio::select! {
            _ = shutdown.changed() => break,
            f = within(idle, &peer, "closing connection: a request's bytes stopped arriving (connections_max_idle_ms)", read_body(&mut reader, len)) => f,
        };
        let Some(frame) = frame else { break };
        let read_at = Instant::now();
        ticket.touch();
        let api = api_of(&frame);
        if let Some((key, version)) = api {
            m.requests.started(key, version);
        }
        // KIP-368: a session that ended is closed at its next request,
        // unless that request is the SaslHandshake re-authenticating it.
        if api.is_none_or(|(key, _)| key != ApiKey::SaslHandshake) && session.sasl_expired(read_at)
        {
            Metrics::count(&m.counters.sasl_expired_sessions_closed, 1);
            tracing::info!(%peer, principal = ?session.principal, "closing connection: its SASL session ended without re-authentication (connections_max_reauth_ms)");
            break;
        }
        let is_produce = api.is_some_and(|(key, _)| key == ApiKey::Produce);
        let turn = order.next(api.map(|(key, _)| key));
        let pending: PendingResponse =
            match dispatch::start_from(&broker, frame, &mut session).await {
                Ok(p) => p,
                Err(close) => {
                    m.requests.closed(api.map(|(key, _)| key));
                    tracing::info!(%peer, reason = %close, "closing connection");
                    break;
                }
            };
        // The budget is given back once the request is answered; so is
        // the connection's turn (`request_order`).
        let answered = async move {
            let done = turn.begin().await;
            let out = pending.await;
            drop(done);
            drop(room);
            out
        };
        let in_flight = InFlight {
            handler: tokio::spawn(answered),
            api,
            read_at,
        };
        if tx.send(in_flight).await.is_err() {
            break; // the writer stopped: the socket is gone
        }
        if session.close_after_answer {
            tracing::info!(%peer, "closing connection after its failed authentication is answered");
            break;
        }
        if is_produce && broker.config.backpressure_mode == BackpressureMode::Throttle {
            let mute = broker.backpressure.throttle();
            if !mute.is_zero() {
                tokio::select! {
                    _ = shutdown.changed() => break,
                    _ = tokio::time::sleep(mute) => {}
                }
            }
        }
    }
    drop(tx);
    let _ = write_loop.await;
}

/// One read of the loop under the idle limit: its value, or None (with
/// `stalled` or the read's error in the log) when the connection closes.
async fn within<T>(
    idle: Duration,
    peer: &str,
    stalled: &str,
    read: impl std::future::Future<Output = Result<T>>,
) -> Option<T> {
    match tokio::time::timeout(idle, read).await {
        Ok(Ok(v)) => Some(v),
        Ok(Err(e)) => {
            tracing::info!(%peer, error = %e, "closing connection: bad frame");
            None
        }
        Err(_) => {
            tracing::info!(%peer, idle_ms = idle.as_millis() as u64, "{stalled}");
            None
        }
    }
}

async fn write_responses<W: AsyncWrite + Unpin>(mut w: W, mut rx: mpsc::Receiver<InFlight>) {
    let m = metrics();
    while let Some(request) = rx.recv().await {
        let body = match request.handler.await {
            Ok(Ok(Some(body))) => body,
            Ok(Ok(None)) => continue,
            Ok(Err(e)) => {
                m.requests.closed(request.api.map(|(key, _)| key));
                tracing::warn!(error = %e, "closing the connection instead of answering");
                return;
            }
            Err(e) => {
                m.requests.closed(request.api.map(|(key, _)| key));
                tracing::error!(error = %e, "request handler failed; closing the connection");
                return;
            }
        };
        let started = Instant::now();
        if write_frame(&mut w, &body).await.is_err() {
            return;
        }
        m.record(Stage::ResponseWrite, started.elapsed());
        Metrics::count(&m.counters.bytes_out, body.len() as u64);
        if let Some((key, version)) = request.api {
            m.requests.finished(key, version, request.read_at.elapsed());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metric_labels_take_only_served_versions() {
        assert_eq!(api_of(&[0, 0, 0, 9, 1]), Some((ApiKey::Produce, 9)));
        assert_eq!(
            api_of(&[0, 18, 0x7f, 0xff]),
            Some((ApiKey::ApiVersions, -1))
        );
        assert_eq!(api_of(&[0, 3, 0xff, 0xfe]), Some((ApiKey::Metadata, -1)));
        assert_eq!(api_of(&[0x7f, 0x7f, 0, 0]), None);
        assert_eq!(api_of(&[0, 0, 0]), None);
    }
}
