//! The node's side of the peer transport: what it sends through it and
//! where what arrives goes.
//!
//! Payloads start with a kind byte: Raft message batches (to the replica
//! host) and leadership reports (to the leader table). Unary calls carry
//! controller commands forwarded to group 0's leader, and status calls
//! ("where do you stand?", ADR 0018) from a node deciding how it starts. The transport is
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
use crate::controller::Command;
use crate::controller::service::{Controller, ForwardReply, ForwardRequest, Forwarded, Forwarder};
use crate::error::{HelixError, Result};
use crate::rejoin::{CALL_STATUS, Standing};
use crate::replica::{Outbox, PAYLOAD_RAFT, ReplicaHost};
use crate::transport::{CallFuture, Inbound, Lane, Transport};

/// Kind byte of a forwarded controller command (a unary call).
const CALL_CONTROLLER_SUBMIT: u8 = 1;

pub type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send>>;

/// The peer transport, as the node uses it.
pub trait PeerLink: Send + Sync + 'static {
    /// Queues a payload; false when it was dropped (full, or peer down).
    fn send(&self, to: NodeId, lane: Lane, payload: Bytes) -> bool;
    /// A unary call with a deadline.
    fn call(&self, to: NodeId, request: Bytes, timeout: Duration) -> BoxFuture<Result<Bytes>>;
    /// Whether anything arrived from `node` within `within`.
    fn heard_within(&self, node: NodeId, within: Duration) -> bool;
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
}

impl Forwarder for LinkSlot {
    fn forward(&self, to: NodeId, command: Command, timeout: Duration) -> Forwarded {
        let link = self.link.get().cloned();
        Box::pin(async move {
            let link = link.ok_or(HelixError::NotController)?;
            let mut request = vec![CALL_CONTROLLER_SUBMIT];
            serde_json::to_writer(&mut request, &ForwardRequest { command }).map_err(|e| {
                HelixError::CorruptState(format!("cannot encode a forwarded command: {e}"))
            })?;
            // A leader that cannot be reached is as good as none: the
            // caller retries when leadership settles.
            let answer = link
                .call(to, Bytes::from(request), timeout)
                .await
                .map_err(|e| {
                    tracing::debug!(to = to.0, error = %e, "forwarding to the controller failed");
                    HelixError::NotController
                })?;
            let reply: ForwardReply = serde_json::from_slice(&answer).map_err(|e| {
                HelixError::CorruptState(format!("controller reply from node {to}: {e}"))
            })?;
            reply.into_result()
        })
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
    /// Answers status calls; records every peer heard from.
    standing: Arc<Standing>,
    controller: OnceLock<Arc<Controller>>,
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
        standing: Arc<Standing>,
    ) -> PeerHandler {
        PeerHandler {
            host,
            cluster,
            standing,
            controller: OnceLock::new(),
        }
    }

    /// Forwarded commands are served once the controller is open.
    pub fn set_controller(&self, controller: Arc<Controller>) {
        let _ = self.controller.set(controller);
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
        self.standing.heard_from(from);
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
        let controller = self.controller.get().cloned();
        let status = (request.first() == Some(&CALL_STATUS)).then(|| self.standing.answer(from));
        Box::pin(async move {
            let Some((&kind, body)) = request.split_first() else {
                return Err("empty call".to_string());
            };
            if let Some(status) = status {
                return serde_json::to_vec(&status)
                    .map(Bytes::from)
                    .map_err(|e| format!("cannot encode the status: {e}"));
            }
            if kind != CALL_CONTROLLER_SUBMIT {
                return Err(format!("unknown call kind {kind}"));
            }
            let forwarded: ForwardRequest =
                serde_json::from_slice(body).map_err(|e| format!("bad forwarded command: {e}"))?;
            let result = match controller {
                Some(c) => c.submit_here(forwarded.command).await,
                None => Err(HelixError::NotController),
            };
            tracing::debug!(
                from = from.0,
                ok = result.is_ok(),
                "forwarded controller command"
            );
            serde_json::to_vec(&ForwardReply::from_result(result))
                .map(Bytes::from)
                .map_err(|e| format!("cannot encode the reply: {e}"))
        })
    }
}
