//! The receiving side: the `Peer` gRPC service on the node's peer address.
//! Every stream and call must say who sends (a known peer of this cluster)
//! before anything it carries is delivered; a refusal is one log line per
//! attempt and an error status, never a panic or an allocation sized by
//! the sender (tonic enforces `max_frame_bytes` on every message).

use std::sync::Arc;

use tokio_stream::wrappers::TcpListenerStream;
use tonic::metadata::MetadataMap;
use tonic::{Request, Response, Status, Streaming};

use super::client::{KEEPALIVE_INTERVAL, KEEPALIVE_TIMEOUT, META_CLUSTER, META_FROM, META_LANE};
use super::proto::peer_server::{Peer as PeerRpc, PeerServer};
use super::proto::{CallReply, CallRequest, Frames, StreamEnd};
use super::{Lane, Peer, Shared};

struct Service {
    shared: Arc<Shared>,
}

/// Serves peers until shutdown (over mutual TLS when configured).
pub async fn serve(shared: Arc<Shared>, listener: tokio::net::TcpListener) {
    match shared.config.tls.clone() {
        Some(tls) => {
            let incoming = super::tls::incoming(listener, tls.server, shared.stop.subscribe());
            serve_on(shared, incoming).await
        }
        None => serve_on(shared, TcpListenerStream::new(listener)).await,
    }
}

async fn serve_on<I, IO, IE>(shared: Arc<Shared>, incoming: I)
where
    I: tokio_stream::Stream<Item = Result<IO, IE>>,
    IO: tokio::io::AsyncRead
        + tokio::io::AsyncWrite
        + tonic::transport::server::Connected
        + Unpin
        + Send
        + 'static,
    IO::ConnectInfo: Clone + Send + Sync + 'static,
    IE: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let max = shared.config.max_frame_bytes;
    let mut stop = shared.stop.subscribe();
    let service = PeerServer::new(Service {
        shared: shared.clone(),
    })
    .max_decoding_message_size(max)
    .max_encoding_message_size(max);
    let served = tonic::transport::Server::builder()
        .tcp_nodelay(true)
        .http2_keepalive_interval(Some(KEEPALIVE_INTERVAL))
        .http2_keepalive_timeout(Some(KEEPALIVE_TIMEOUT))
        .initial_stream_window_size(Some(8 << 20))
        .initial_connection_window_size(Some(16 << 20))
        .add_service(service)
        .serve_with_incoming_shutdown(incoming, async move {
            let _ = stop.wait_for(|s| *s).await;
        })
        .await;
    if let Err(e) = served {
        tracing::error!(error = %e, "peer transport server stopped");
    }
}

impl Service {
    /// The sending peer, if it is one of this cluster's.
    fn sender(&self, m: &MetadataMap) -> Result<&Arc<Peer>, Status> {
        let from: u64 = m
            .get(META_FROM)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse().ok())
            .ok_or_else(|| refuse("no sender id"))?;
        let cluster = m
            .get_bin(META_CLUSTER)
            .and_then(|v| v.to_bytes().ok())
            .ok_or_else(|| refuse("no cluster id"))?;
        if cluster.as_ref() != self.shared.config.cluster_id.as_bytes() {
            return Err(refuse(&format!(
                "node {from} belongs to cluster {:?}",
                String::from_utf8_lossy(&cluster)
            )));
        }
        self.shared
            .peer(from)
            .ok_or_else(|| refuse(&format!("node {from} is not a member")))
    }
}

fn refuse(why: &str) -> Status {
    tracing::warn!(why, "refused a peer stream");
    Status::permission_denied(why.to_string())
}

#[tonic::async_trait]
impl PeerRpc for Service {
    async fn stream(
        &self,
        request: Request<Streaming<Frames>>,
    ) -> Result<Response<StreamEnd>, Status> {
        let peer = self.sender(request.metadata())?.clone();
        let lane = request
            .metadata()
            .get(META_LANE)
            .and_then(|v| v.to_str().ok())
            .and_then(Lane::from_name)
            .ok_or_else(|| refuse("no lane"))?;
        let mut frames = request.into_inner();
        tracing::debug!(peer = peer.node, lane = lane.name(), "peer stream opened");
        // Shutdown ends open streams too: a graceful server stop would
        // otherwise wait for peers to hang up, which they never do.
        let mut stop = self.shared.stop.subscribe();
        loop {
            let frame = tokio::select! {
                f = frames.message() => f.inspect_err(|_| self.shared.lost(peer.node))?,
                _ = stop.wait_for(|s| *s) => return Err(Status::unavailable("node shutting down")),
            };
            let Some(f) = frame else { break };
            self.shared
                .heard(&peer, f.payloads.iter().map(|p| p.len()).sum());
            self.shared.inbound.deliver(peer.node, lane, f.payloads);
        }
        Ok(Response::new(StreamEnd {}))
    }

    async fn call(&self, request: Request<CallRequest>) -> Result<Response<CallReply>, Status> {
        let peer = self.sender(request.metadata())?.clone();
        let body = request.into_inner().body;
        self.shared.heard(&peer, body.len());
        let reply = match self.shared.inbound.call(peer.node, body).await {
            Ok(body) => CallReply {
                body,
                error: String::new(),
            },
            Err(error) => CallReply {
                body: Default::default(),
                error,
            },
        };
        Ok(Response::new(reply))
    }
}
