//! The node's side of the peer transport: what it sends through it and
//! where what arrives goes.
//!
//! Payloads start with a kind byte: Raft message batches (to the replica
//! host) and leadership reports (to the leader table). Unary calls start
//! with a kind byte too; each kind is served by the [`CallService`] that
//! registered it (controller commands forwarded to group 0's leader; status
//! calls, "where do you stand?", ADR 0018, from a node deciding how it
//! starts), so this glue knows nothing of what they carry. The transport is
//! reached through [`PeerLink`], bound late ([`LinkSlot`]): the replica host
//! starts before the transport, whose inbound side needs the host.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use bytes::Bytes;
use helix_raft::NodeId;

use super::ClusterState;
use super::leaders::{self, PAYLOAD_LEADERS};
use crate::error::{HelixError, Result};
use crate::host::{Outbox, PAYLOAD_RAFT, ReplicaHost};
use crate::transport::{CallFuture, Inbound, Lane, Transport};

pub type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send>>;

/// Serves one kind of unary call from peers (the body after the kind
/// byte); registered with [`PeerHandler::new`] by the service that owns the
/// kind. An `Err` is a transport-level refusal the caller sees as failed.
pub trait CallService: Send + Sync {
    fn serve(&self, from: NodeId, body: Bytes) -> BoxFuture<std::result::Result<Bytes, String>>;
}

/// Told of every peer a payload arrived from (the node's standing records
/// that the peer has formed and takes part).
pub trait PeerWitness: Send + Sync {
    fn heard_from(&self, from: NodeId);
}

/// The peer transport, as the node uses it.
pub trait PeerLink: Send + Sync + 'static {
    /// Queues a payload; false when it was dropped (full, or peer down).
    fn send(&self, to: NodeId, lane: Lane, payload: Bytes) -> bool;
    /// A unary call with a deadline.
    fn call(&self, to: NodeId, request: Bytes, timeout: Duration) -> BoxFuture<Result<Bytes>>;
    /// Whether anything arrived from `node` within `within`.
    fn heard_within(&self, node: NodeId, within: Duration) -> bool;
    /// A connection to or from `node` broke and nothing has arrived since.
    fn broke_off(&self, node: NodeId) -> bool;
}

/// The transport, once it runs.
#[derive(Default)]
pub struct LinkSlot {
    link: OnceLock<Arc<dyn PeerLink>>,
}

impl std::fmt::Debug for LinkSlot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LinkSlot")
            .field("bound", &self.link.get().is_some())
            .finish()
    }
}

impl LinkSlot {
    pub fn set(&self, link: Arc<dyn PeerLink>) {
        let _ = self.link.set(link);
    }

    /// The transport, if it runs yet.
    pub fn link(&self) -> Option<Arc<dyn PeerLink>> {
        self.link.get().cloned()
    }
}

impl Outbox for LinkSlot {
    fn send(&self, to: NodeId, lane: Lane, payload: Bytes) -> bool {
        self.link.get().is_some_and(|l| l.send(to, lane, payload))
    }
}

impl super::Liveness for LinkSlot {
    fn heard_within(&self, node: NodeId, within: Duration) -> bool {
        self.link
            .get()
            .is_some_and(|l| l.heard_within(node, within))
    }

    fn broke_off(&self, node: NodeId) -> bool {
        self.link.get().is_some_and(|l| l.broke_off(node))
    }
}

/// The tonic transport as the node's link to its peers.
pub struct TransportLink(pub Transport);

impl PeerLink for TransportLink {
    fn send(&self, to: NodeId, lane: Lane, payload: Bytes) -> bool {
        self.0.send(to.0, lane, payload)
    }

    fn call(&self, to: NodeId, request: Bytes, timeout: Duration) -> BoxFuture<Result<Bytes>> {
        let t = self.0.clone();
        Box::pin(async move {
            t.call(to.0, request, timeout)
                .await
                .map_err(|e| HelixError::Io(std::io::Error::other(e.to_string())))
        })
    }

    fn heard_within(&self, node: NodeId, within: Duration) -> bool {
        self.0.heard_within(node.0, within)
    }

    fn broke_off(&self, node: NodeId) -> bool {
        self.0.broke_off(node.0)
    }
}

impl Inbound for PeerHandler {
    fn deliver(&self, from: u64, _lane: Lane, payloads: Vec<Bytes>) {
        PeerHandler::deliver(self, NodeId(from), payloads);
    }

    fn call(&self, from: u64, request: Bytes) -> CallFuture {
        PeerHandler::call(self, NodeId(from), request)
    }

    fn peer_lost(&self, node: u64) {
        self.host.peer_lost(NodeId(node));
    }
}

/// Where what peers send goes.
pub struct PeerHandler {
    host: Arc<ReplicaHost>,
    cluster: Arc<ClusterState>,
    /// Records every peer heard from.
    witness: Arc<dyn PeerWitness>,
    /// The service of each unary call kind.
    calls: Vec<(u8, Arc<dyn CallService>)>,
}

impl std::fmt::Debug for PeerHandler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PeerHandler").finish_non_exhaustive()
    }
}

impl PeerHandler {
    pub fn new(
        host: Arc<ReplicaHost>,
        cluster: Arc<ClusterState>,
        witness: Arc<dyn PeerWitness>,
        calls: Vec<(u8, Arc<dyn CallService>)>,
    ) -> PeerHandler {
        PeerHandler {
            host,
            cluster,
            witness,
            calls,
        }
    }

    /// Payloads from `from` on one lane, in order.
    pub fn deliver(&self, from: NodeId, payloads: Vec<Bytes>) {
        if self.cluster.member(from).is_none() || from == self.cluster.me {
            tracing::warn!(
                from = from.0,
                "payload from a node that is not a peer; dropped"
            );
            return;
        }
        // A node sends only once it has formed: it takes part from here on,
        // and if it ever comes back on a new directory, this node says so.
        self.witness.heard_from(from);
        for payload in payloads {
            let Some((&kind, body)) = payload.split_first() else {
                continue;
            };
            let body = payload.slice(payload.len() - body.len()..);
            match kind {
                PAYLOAD_RAFT => match helix_raft::decode_batch(body) {
                    Ok(batch) if batch.from == from => self.host.deliver(batch),
                    Ok(batch) => tracing::warn!(
                        from = from.0,
                        claims = batch.from.0,
                        "raft batch claims another sender; dropped"
                    ),
                    Err(e) => {
                        tracing::warn!(from = from.0, error = %e, "undecodable raft batch; dropped")
                    }
                },
                PAYLOAD_LEADERS => match leaders::decode(body) {
                    Ok(reports) => self.cluster.leaders.update(from, reports),
                    Err(e) => {
                        tracing::warn!(from = from.0, error = %e, "undecodable leadership report")
                    }
                },
                other => {
                    tracing::warn!(from = from.0, kind = other, "unknown payload kind; dropped")
                }
            }
        }
    }

    /// A unary call from `from`.
    pub fn call(
        &self,
        from: NodeId,
        request: Bytes,
    ) -> BoxFuture<std::result::Result<Bytes, String>> {
        let Some(&kind) = request.first() else {
            return Box::pin(async { Err("empty call".to_string()) });
        };
        match self.calls.iter().find(|(k, _)| *k == kind) {
            Some((_, service)) => service.serve(from, request.slice(1..)),
            None => Box::pin(async move { Err(format!("unknown call kind {kind}")) }),
        }
    }
}
