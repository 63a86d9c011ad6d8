//! The node's HTTP endpoint for operators (`--metrics-listen`, default
//! 127.0.0.1:9644): `/metrics` in Prometheus text (OpenMetrics, through
//! `prometheus-client`), `/health` (the process is up) and `/ready` (every
//! local replica caught up and serving).
//!
//! It is bound before the data directory is opened, so `/health` answers
//! during recovery and `/ready` says why the node is not ready yet.

mod compaction;
mod families;
mod ready;
mod replicas;
mod scrape;
mod snapshot;

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, OnceLock, Weak};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;
use tokio::sync::{Mutex, Semaphore};

use crate::broker::Broker;
use crate::error::{HelixError, Result};

/// Connections served at once; more wait to be accepted.
const MAX_CONNECTIONS: usize = 32;
/// A connection is closed after this long, whatever it is doing.
const CONNECTION_LIMIT: Duration = Duration::from_secs(30);

/// What the endpoint serves from: the broker once it is open.
#[derive(Debug, Default)]
pub struct Endpoint {
    broker: OnceLock<Weak<Broker>>,
    /// Busy time at the previous scrape (busy ratios are over the time
    /// since); one scrape renders at a time.
    busy: Mutex<snapshot::BusySample>,
}

impl Endpoint {
    /// The broker is open and its Kafka listener bound.
    pub fn serving(&self, broker: &Arc<Broker>) {
        let _ = self.broker.set(Arc::downgrade(broker));
    }

    fn broker(&self) -> Option<Arc<Broker>> {
        self.broker.get().and_then(Weak::upgrade)
    }

    async fn route(&self, req: Request<Incoming>) -> Response<Full<Bytes>> {
        if req.method() != Method::GET && req.method() != Method::HEAD {
            return text(StatusCode::METHOD_NOT_ALLOWED, "only GET\n".into());
        }
        match req.uri().path() {
            "/metrics" => {
                let broker = self.broker();
                let mut busy = self.busy.lock().await;
                match scrape::render(broker.as_ref(), &mut busy).await {
                    Ok(body) => {
                        let mut r = text(StatusCode::OK, body);
                        r.headers_mut().insert(
                            hyper::header::CONTENT_TYPE,
                            hyper::header::HeaderValue::from_static(
                                "application/openmetrics-text; version=1.0.0; charset=utf-8",
                            ),
                        );
                        r
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "cannot render /metrics");
                        text(StatusCode::INTERNAL_SERVER_ERROR, format!("{e}\n"))
                    }
                }
            }
            "/health" => text(StatusCode::OK, "ok\n".into()),
            "/ready" => {
                let r = ready::check(self.broker().as_ref());
                let code = if r.ready {
                    StatusCode::OK
                } else {
                    StatusCode::SERVICE_UNAVAILABLE
                };
                text(code, r.explain())
            }
            _ => text(
                StatusCode::NOT_FOUND,
                "not found: /metrics, /health or /ready\n".into(),
            ),
        }
    }
}

fn text(code: StatusCode, body: String) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(Bytes::from(body)));
    *r.status_mut() = code;
    r
}

/// Binds the endpoint's listener. An address the operator chose must be
/// free (an error otherwise); the default one may be taken by another
/// broker on the machine, which costs this node its endpoint, not its start.
pub async fn bind(addr: SocketAddr, chosen: bool) -> Result<Option<TcpListener>> {
    match TcpListener::bind(addr).await {
        Ok(l) => Ok(Some(l)),
        Err(e) if !chosen => {
            tracing::warn!(%addr, error = %e, "metrics endpoint not served: the default address is taken; set --metrics-listen");
            Ok(None)
        }
        Err(e) => Err(HelixError::Config(format!(
            "metrics_listen {addr}: cannot bind: {e}"
        ))),
    }
}

/// Serves HTTP/1.1 on `listener` until the process ends.
pub async fn serve(listener: TcpListener, endpoint: Arc<Endpoint>) {
    if let Ok(addr) = listener.local_addr() {
        tracing::info!(%addr, "metrics endpoint serving /metrics, /health, /ready");
    }
    let slots = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    loop {
        let Ok(slot) = slots.clone().acquire_owned().await else {
            return;
        };
        let (stream, _) = match listener.accept().await {
            Ok(a) => a,
            Err(e) => {
                tracing::warn!(error = %e, "metrics endpoint: accept failed");
                tokio::time::sleep(Duration::from_millis(10)).await;
                continue;
            }
        };
        let endpoint = endpoint.clone();
        tokio::spawn(async move {
            let service = hyper::service::service_fn(move |req| {
                let endpoint = endpoint.clone();
                async move { Ok::<_, Infallible>(endpoint.route(req).await) }
            });
            let conn = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service);
            match tokio::time::timeout(CONNECTION_LIMIT, conn).await {
                Ok(Err(e)) => tracing::debug!(error = %e, "metrics endpoint connection failed"),
                Err(_) => {
                    tracing::debug!("metrics endpoint connection closed after its time limit")
                }
                Ok(Ok(())) => {}
            }
            drop(slot);
        });
    }
}
