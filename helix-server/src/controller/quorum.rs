//! The controller group's replication as its leader sees it
//! (DescribeQuorum): on the leader from what its replica publishes, on any
//! other node asked of the leader over the peer transport
//! ([`CALL_QUORUM`], served by [`QuorumCalls`]), as a KRaft broker
//! forwards DescribeQuorum to the active controller.

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use bytes::Bytes;
use helix_raft::{NodeId, Role};
use serde::{Deserialize, Serialize};

use super::service::Controller;
use crate::cluster::peers::{BoxFuture, CallService, LinkSlot};
use crate::error::{HelixError, Result};
use crate::replica::{FollowerProgress, QuorumProgress};

/// Kind byte of a call asking group 0's leader for its progress.
pub const CALL_QUORUM: u8 = 4;
/// How long a node waits for the leader's answer.
pub const CALL_TIMEOUT: Duration = Duration::from_secs(5);

/// The leader's progress, and who it is, as it travels.
#[derive(Debug, Serialize, Deserialize)]
struct Reply {
    leader: u64,
    epoch: i32,
    last_index: u64,
    commit: u64,
    at_ms: i64,
    /// (node, matched, heard_ms) of each follower.
    followers: Vec<(u64, u64, i64)>,
}

/// Group 0's leader's view: who leads, in which epoch, and its progress.
#[derive(Debug, Clone)]
pub struct LeaderProgress {
    pub leader: NodeId,
    pub epoch: i32,
    pub progress: QuorumProgress,
}

impl Controller {
    /// The leader's view of group 0's replication: this node's own when it
    /// leads, else asked of the leader. None while no leader is known or it
    /// does not answer.
    pub async fn leader_progress(&self, link: &LinkSlot) -> Option<LeaderProgress> {
        if let Some(here) = self.local_leader_progress() {
            return Some(here);
        }
        let leader = self.partition.leadership().leader?;
        if leader == self.me {
            return None;
        }
        match ask(link, leader).await {
            Ok(p) => Some(p),
            Err(e) => {
                tracing::debug!(to = leader.0, error = %e, "asking the controller for its progress failed");
                None
            }
        }
    }

    fn local_leader_progress(&self) -> Option<LeaderProgress> {
        let l = self.partition.leadership();
        if l.role != Role::Leader {
            return None;
        }
        Some(LeaderProgress {
            leader: self.me,
            epoch: self.partition.leader_epoch(),
            progress: self.partition.quorum_progress()?,
        })
    }
}

async fn ask(link: &LinkSlot, to: NodeId) -> Result<LeaderProgress> {
    let link = link.link().ok_or(HelixError::NotController)?;
    let answer = link
        .call(to, Bytes::from_static(&[CALL_QUORUM]), CALL_TIMEOUT)
        .await?;
    let reply: Option<Reply> = serde_json::from_slice(&answer)
        .map_err(|e| HelixError::CorruptState(format!("quorum reply from node {to}: {e}")))?;
    let r = reply.ok_or(HelixError::NotController)?;
    Ok(LeaderProgress {
        leader: NodeId(r.leader),
        epoch: r.epoch,
        progress: QuorumProgress {
            last_index: r.last_index,
            commit: r.commit,
            at_ms: r.at_ms,
            followers: r
                .followers
                .into_iter()
                .map(|(node, matched, heard_ms)| FollowerProgress {
                    node: NodeId(node),
                    matched,
                    heard_ms,
                })
                .collect(),
        },
    })
}

/// Serves peers' [`CALL_QUORUM`] once the controller is open: the
/// progress when this node leads group 0, else null (the asker answers
/// from what it knows).
#[derive(Default)]
pub struct QuorumCalls {
    controller: OnceLock<Arc<Controller>>,
}

impl std::fmt::Debug for QuorumCalls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("QuorumCalls")
            .field("open", &self.controller.get().is_some())
            .finish()
    }
}

impl QuorumCalls {
    /// Calls are served from here on.
    pub fn set(&self, controller: Arc<Controller>) {
        let _ = self.controller.set(controller);
    }
}

impl CallService for QuorumCalls {
    fn serve(&self, _from: NodeId, _body: Bytes) -> BoxFuture<std::result::Result<Bytes, String>> {
        let here = self
            .controller
            .get()
            .and_then(|c| c.local_leader_progress());
        let reply = here.map(|h| Reply {
            leader: h.leader.0,
            epoch: h.epoch,
            last_index: h.progress.last_index,
            commit: h.progress.commit,
            at_ms: h.progress.at_ms,
            followers: h
                .progress
                .followers
                .iter()
                .map(|f| (f.node.0, f.matched, f.heard_ms))
                .collect(),
        });
        Box::pin(async move {
            serde_json::to_vec(&reply)
                .map(Bytes::from)
                .map_err(|e| format!("cannot encode the reply: {e}"))
        })
    }
}
