//! Preferred leader elections on request (ElectLeaders): the node that
//! takes the request asks each partition's leader to hand its leadership
//! to the preferred replica (its first), over the peer transport
//! ([`CALL_ELECT`], served by [`ElectionCalls`]); the leader's shard
//! transfers leadership (Raft's TimeoutNow) if that replica is in sync
//! and caught up (`host::ReplicaHost::hand_back`).

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use helix_raft::{GroupId, NodeId};

use crate::cluster::peers::{BoxFuture, CallService, LinkSlot};
use crate::host::ReplicaHost;

/// Kind byte of a call asking a leader to hand a group back.
pub const CALL_ELECT: u8 = 5;
/// How long a node waits for the leader to take the call.
const CALL_TIMEOUT: Duration = Duration::from_secs(5);

/// Asks `leader` (this node or another) to hand `group` to its preferred
/// replica. Fire and forget: the caller watches leadership for the result.
pub async fn hand_back(
    link: &LinkSlot,
    host: &ReplicaHost,
    me: NodeId,
    leader: NodeId,
    group: GroupId,
) {
    if leader == me {
        host.hand_back(group);
        return;
    }
    let Some(link) = link.link() else { return };
    let mut request = vec![CALL_ELECT];
    request.extend_from_slice(&group.0.to_be_bytes());
    if let Err(e) = link.call(leader, Bytes::from(request), CALL_TIMEOUT).await {
        tracing::debug!(to = leader.0, group = group.0, error = %e, "asking for a preferred election failed");
    }
}

/// Serves peers' [`CALL_ELECT`]: hands the group back if this node leads
/// it (the shard checks).
pub struct ElectionCalls {
    host: Arc<ReplicaHost>,
}

impl std::fmt::Debug for ElectionCalls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ElectionCalls").finish()
    }
}

impl ElectionCalls {
    pub fn new(host: Arc<ReplicaHost>) -> ElectionCalls {
        ElectionCalls { host }
    }
}

impl CallService for ElectionCalls {
    fn serve(&self, from: NodeId, body: Bytes) -> BoxFuture<std::result::Result<Bytes, String>> {
        let answer = match <[u8; 8]>::try_from(body.as_ref()) {
            Ok(raw) => {
                let group = GroupId(u64::from_be_bytes(raw));
                tracing::debug!(from = from.0, group = group.0, "preferred election asked");
                self.host.hand_back(group);
                Ok(Bytes::new())
            }
            Err(_) => Err(format!("bad election call of {} bytes", body.len())),
        };
        Box::pin(async move { answer })
    }
}
