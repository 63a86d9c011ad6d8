//! The peer transport: how the nodes of one cluster talk, over tonic
//! (gRPC on HTTP/2), code generated from `proto/peer.proto` by protox.
//!
//! Three [`Lane`]s per peer and direction, each a long-lived client stream
//! on its own HTTP/2 connection, so a large append or a catch-up never
//! queues in front of a heartbeat. What is queued for one destination and
//! lane leaves as one stream message (all the heartbeats of a tick, from
//! every shard, in one frame). Sends never block and never grow without
//! bound: each (peer, lane) queue has a byte limit, and a lane that is not
//! connected drops at once (a down peer costs a reconnect timer, not a
//! thread or a queue; Raft resends). Reconnects back off exponentially with
//! jitter; HTTP/2 keepalives notice a peer that vanished without closing.
//!
//! Contract: [`Transport::start`] binds the listener and starts the clients;
//! [`Transport::send`], [`Transport::call`], [`Transport::status`],
//! [`Transport::shutdown`]. What arrives goes to an [`Inbound`].

mod client;
mod proto;
mod server;
#[cfg(test)]
mod tests;
pub mod tls;

use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use helix_raft::NodeId;
use tokio::sync::watch;

use client::LaneQueue;

use crate::replica::links::PeerLinks;

/// The three kinds of peer traffic.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Lane {
    /// Votes, heartbeats, responses, commit and acknowledgement notices,
    /// leadership reports: small and latency-critical.
    Control,
    /// AppendEntries that carry entries.
    Data,
    /// WAL entries streamed to a follower behind the leader's memory.
    CatchUp,
}

impl Lane {
    pub const ALL: [Lane; 3] = [Lane::Control, Lane::Data, Lane::CatchUp];

    fn index(self) -> usize {
        match self {
            Lane::Control => 0,
            Lane::Data => 1,
            Lane::CatchUp => 2,
        }
    }

    fn name(self) -> &'static str {
        match self {
            Lane::Control => "control",
            Lane::Data => "data",
            Lane::CatchUp => "catch-up",
        }
    }

    fn from_name(s: &str) -> Option<Lane> {
        Lane::ALL.into_iter().find(|l| l.name() == s)
    }
}

/// How the transport runs.
#[derive(Debug, Clone)]
pub struct TransportConfig {
    /// This node's id.
    pub node: u64,
    /// The peer listener to bind.
    pub listen: SocketAddr,
    /// Every other node: id and `host:port` of its peer listener.
    pub peers: Vec<(u64, String)>,
    /// Streams from a node announcing another cluster id are refused.
    pub cluster_id: String,
    /// Bytes that may wait to be sent, per (peer, lane).
    pub lane_queue_bytes: [usize; 3],
    /// Largest gRPC message either way.
    pub max_frame_bytes: usize,
    /// Reconnect backoff, from the first retry to the longest wait.
    pub backoff: (Duration, Duration),
    /// Mutual TLS with every peer (None: plaintext).
    pub tls: Option<tls::PeerTls>,
}

impl TransportConfig {
    /// Defaults for everything but who is who.
    pub fn new(
        node: u64,
        listen: SocketAddr,
        peers: Vec<(u64, String)>,
        cluster_id: String,
    ) -> Self {
        TransportConfig {
            node,
            listen,
            peers,
            cluster_id,
            lane_queue_bytes: [4 << 20, 64 << 20, 16 << 20],
            max_frame_bytes: 64 << 20,
            backoff: (Duration::from_millis(50), Duration::from_secs(2)),
            tls: None,
        }
    }
}

/// Where what peers send goes. Must not block.
pub trait Inbound: Send + Sync + 'static {
    /// Payloads from `from` on `lane`, in the order that peer sent them.
    fn deliver(&self, from: u64, lane: Lane, payloads: Vec<Bytes>);
    /// A unary request; the answer (or a refusal) goes back to the caller.
    fn call(&self, from: u64, request: Bytes) -> CallFuture;
    /// A connection to or from `node`, once up, broke: its process is
    /// likely gone (a killed process's connections are closed by the kernel
    /// at once). Said once until something arrives from `node` again. A
    /// hint only: it may be alive and reconnect.
    fn peer_lost(&self, node: u64);
}

/// The answer to a unary call, on its way.
pub type CallFuture = Pin<Box<dyn Future<Output = Result<Bytes, String>> + Send>>;

/// Why the transport could not do something.
#[derive(Debug, thiserror::Error)]
pub enum TransportError {
    #[error("cannot listen on {0}: {1}")]
    Bind(SocketAddr, std::io::Error),
    #[error("node {0} is not a peer")]
    UnknownPeer(u64),
    #[error("node {0} is not connected")]
    NotConnected(u64),
    #[error("call to node {0} timed out")]
    Timeout(u64),
    #[error("call to node {0} failed: {1}")]
    Call(u64, String),
}

/// One lane of one peer, as `status` reports it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LaneStatus {
    pub connected: bool,
    pub queued_bytes: usize,
    pub sent_frames: u64,
    pub sent_bytes: u64,
    pub dropped: u64,
    pub reconnects: u64,
}

/// One peer, as `status` reports it.
#[derive(Debug, Clone)]
pub struct PeerStatus {
    pub node: u64,
    /// Control, data, catch-up.
    pub lanes: [LaneStatus; 3],
    pub received_frames: u64,
    pub received_bytes: u64,
    /// When anything last arrived from this peer, on any lane.
    pub last_received: Option<Instant>,
}

impl std::fmt::Display for PeerStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "node {}: received {} frames / {} bytes",
            self.node, self.received_frames, self.received_bytes
        )?;
        match self.last_received {
            Some(at) => write!(f, ", last {} ms ago", at.elapsed().as_millis())?,
            None => write!(f, ", never heard")?,
        }
        for (lane, s) in Lane::ALL.iter().zip(&self.lanes) {
            write!(
                f,
                "; {} {}: sent {} frames / {} bytes, queued {} bytes, dropped {}, reconnects {}",
                lane.name(),
                if s.connected { "up" } else { "down" },
                s.sent_frames,
                s.sent_bytes,
                s.queued_bytes,
                s.dropped,
                s.reconnects
            )?;
        }
        Ok(())
    }
}

/// One peer: its lanes and what arrived from it.
struct Peer {
    node: u64,
    lanes: [Arc<LaneQueue>; 3],
    received_frames: AtomicU64,
    received_bytes: AtomicU64,
    last_received: Mutex<Option<Instant>>,
}

impl Peer {
    fn heard(&self, bytes: usize) {
        self.received_frames.fetch_add(1, Ordering::Relaxed);
        self.received_bytes
            .fetch_add(bytes as u64, Ordering::Relaxed);
        *self.last_received.lock().unwrap_or_else(|p| p.into_inner()) = Some(Instant::now());
    }
}

struct Shared {
    config: TransportConfig,
    inbound: Arc<dyn Inbound>,
    peers: Vec<Arc<Peer>>,
    /// The node's table of lost peer connections (its replicas read it).
    links: Arc<PeerLinks>,
    stop: watch::Sender<bool>,
}

impl Shared {
    fn peer(&self, node: u64) -> Option<&Arc<Peer>> {
        self.peers.iter().find(|p| p.node == node)
    }

    /// A connection to or from `node` broke: it is marked lost in the
    /// node's [`PeerLinks`] at once, and the inbound side is told once, by
    /// whichever lane or direction notices first, until the peer is heard
    /// from again.
    fn lost(&self, node: u64) {
        if self.peer(node).is_some() && self.links.lost(NodeId(node)) {
            self.inbound.peer_lost(node);
        }
    }

    /// A frame or call of `bytes` arrived from `peer`: its connection is up.
    fn heard(&self, peer: &Peer, bytes: usize) {
        self.links.heard(NodeId(peer.node));
        peer.heard(bytes);
    }
}

/// The running transport (cheap to clone).
#[derive(Clone)]
pub struct Transport {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for Transport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Transport")
            .field("node", &self.shared.config.node)
            .field("listen", &self.shared.config.listen)
            .finish()
    }
}

impl Transport {
    /// Binds the listener (an error if it cannot) and starts one client per
    /// (peer, lane) in the background, on the current tokio runtime.
    pub async fn start(
        config: TransportConfig,
        inbound: Arc<dyn Inbound>,
        links: Arc<PeerLinks>,
    ) -> Result<Transport, TransportError> {
        let listener = tokio::net::TcpListener::bind(config.listen)
            .await
            .map_err(|e| TransportError::Bind(config.listen, e))?;
        let peers: Vec<Arc<Peer>> = config
            .peers
            .iter()
            .map(|(node, _)| {
                Arc::new(Peer {
                    node: *node,
                    lanes: Lane::ALL
                        .map(|l| Arc::new(LaneQueue::new(config.lane_queue_bytes[l.index()]))),
                    received_frames: AtomicU64::new(0),
                    received_bytes: AtomicU64::new(0),
                    last_received: Mutex::new(None),
                })
            })
            .collect();
        let (stop, _) = watch::channel(false);
        let shared = Arc::new(Shared {
            config,
            inbound,
            peers,
            links,
            stop,
        });
        tokio::spawn(server::serve(shared.clone(), listener));
        if let Some(t) = &shared.config.tls {
            let mut stop = shared.stop.subscribe();
            let watch = crate::tls::watch(t.watched(), crate::tls::CHECK_EVERY);
            tokio::spawn(async move {
                tokio::select! {
                    _ = watch => {}
                    _ = stop.wait_for(|s| *s) => {}
                }
            });
        }
        for ((node, addr), peer) in shared.config.peers.iter().zip(&shared.peers) {
            for lane in Lane::ALL {
                tokio::spawn(client::run(
                    shared.clone(),
                    *node,
                    addr.clone(),
                    lane,
                    peer.lanes[lane.index()].clone(),
                ));
            }
        }
        tracing::info!(listen = %shared.config.listen, peers = shared.peers.len(), "peer transport started");
        Ok(Transport { shared })
    }

    /// Queues `payload` for `to` on `lane`. Never blocks: false (and a
    /// counted drop) when the lane is down or full, or `to` is no peer.
    pub fn send(&self, to: u64, lane: Lane, payload: Bytes) -> bool {
        let Some(peer) = self.shared.peer(to) else {
            return false;
        };
        let queue = &peer.lanes[lane.index()];
        if payload.len() > client::frame_budget(self.shared.config.max_frame_bytes) {
            // It could never leave: sending it would fail the stream, and
            // Raft would resend it forever.
            queue.refuse();
            tracing::warn!(
                peer = to,
                lane = lane.name(),
                bytes = payload.len(),
                "peer payload larger than a frame; dropped"
            );
            return false;
        }
        queue.push(payload)
    }

    /// A unary call to `to` with a deadline (on its control connection).
    pub async fn call(
        &self,
        to: u64,
        request: Bytes,
        timeout: Duration,
    ) -> Result<Bytes, TransportError> {
        let peer = self
            .shared
            .peer(to)
            .ok_or(TransportError::UnknownPeer(to))?;
        let channel = peer.lanes[Lane::Control.index()]
            .channel()
            .ok_or(TransportError::NotConnected(to))?;
        client::call(&self.shared, channel, to, request, timeout).await
    }

    /// Whether anything arrived from `node` within `within`.
    pub fn heard_within(&self, node: u64, within: Duration) -> bool {
        self.shared.peer(node).is_some_and(|p| {
            p.last_received
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .is_some_and(|at| at.elapsed() <= within)
        })
    }

    /// Whether a connection to or from `node` broke and nothing has
    /// arrived from it since (the node's [`PeerLinks`]).
    pub fn broke_off(&self, node: u64) -> bool {
        self.shared.links.is_lost(NodeId(node))
    }

    /// Counters and connection state of every peer and lane.
    pub fn status(&self) -> Vec<PeerStatus> {
        self.shared
            .peers
            .iter()
            .map(|p| PeerStatus {
                node: p.node,
                lanes: Lane::ALL.map(|l| p.lanes[l.index()].status()),
                received_frames: p.received_frames.load(Ordering::Relaxed),
                received_bytes: p.received_bytes.load(Ordering::Relaxed),
                last_received: *p.last_received.lock().unwrap_or_else(|e| e.into_inner()),
            })
            .collect()
    }

    /// Stops the clients and the server.
    pub fn shutdown(&self) {
        let _ = self.shared.stop.send(true);
    }
}
