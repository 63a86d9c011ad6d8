//! Controller commands over the peer transport: a node that does not lead
//! group 0 forwards its command to the leader ([`Forwarder`] on the node's
//! [`LinkSlot`]), and the leader serves forwarded commands
//! ([`ForwardedCalls`], registered with the peer handler under
//! [`CALL_CONTROLLER_SUBMIT`]). The cluster's peer glue carries the bytes
//! and knows nothing of commands.

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use bytes::Bytes;
use helix_raft::NodeId;

use super::Command;
use super::service::{Controller, ForwardReply, ForwardRequest, Forwarded, Forwarder};
use crate::cluster::peers::{BoxFuture, CallService, LinkSlot};
use crate::error::HelixError;

/// Kind byte of a forwarded controller command (a unary call).
pub const CALL_CONTROLLER_SUBMIT: u8 = 1;

impl Forwarder for LinkSlot {
    fn forward(&self, to: NodeId, command: Command, timeout: Duration) -> Forwarded {
        let link = self.link();
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

/// Serves commands forwarded by peers, once the controller is open; until
/// then each is answered NOT_CONTROLLER (the sender retries).
#[derive(Default)]
pub struct ForwardedCalls {
    controller: OnceLock<Arc<Controller>>,
}

impl std::fmt::Debug for ForwardedCalls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ForwardedCalls")
            .field("open", &self.controller.get().is_some())
            .finish()
    }
}

impl ForwardedCalls {
    /// Forwarded commands are served from here on.
    pub fn set(&self, controller: Arc<Controller>) {
        let _ = self.controller.set(controller);
    }
}

impl CallService for ForwardedCalls {
    fn serve(&self, from: NodeId, body: Bytes) -> BoxFuture<std::result::Result<Bytes, String>> {
        let controller = self.controller.get().cloned();
        Box::pin(async move {
            let forwarded: ForwardRequest =
                serde_json::from_slice(&body).map_err(|e| format!("bad forwarded command: {e}"))?;
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
