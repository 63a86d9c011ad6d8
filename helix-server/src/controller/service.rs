//! The controller as the broker uses it: the view every node applies, and
//! [`Controller::submit`], which makes a command durable through group 0
//! from any node. On the group's leader the command is appended to the
//! controller partition like any record (acks=all); any other node forwards
//! it to the leader over the peer transport ([`Forwarder`]). Either way the
//! call returns once this node has applied the command, so what a client
//! changed through a node is visible on that node when it is answered.

use std::collections::BTreeMap;
use std::future::Future;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use bytes::Bytes;
use helix_raft::{NodeId, Role};
use kafka_protocol::error::ResponseError;
use serde::{Deserialize, Serialize};
use tokio::sync::watch;
use tokio::time::Instant;

use super::{Command, ControllerView, Outcome};
use crate::budget::Backpressure;
use crate::error::{HelixError, Result};
use crate::replica::{Partition, internal};

/// How long a command may take, forwarding and retries included.
const SUBMIT_TIMEOUT: Duration = Duration::from_secs(15);
/// Pause before retrying while the controller has no known leader.
const RETRY_PAUSE: Duration = Duration::from_millis(50);
/// How long a command waits for room in the node's produce budget.
const ROOM_TIMEOUT: Duration = Duration::from_secs(5);
/// Outcomes kept for submitters that have not picked theirs up yet.
const MAX_OUTCOMES: usize = 1024;

/// Sends a command to the node leading group 0 and returns what it
/// answered: the command's offset in the controller log and its outcome.
pub trait Forwarder: Send + Sync + 'static {
    fn forward(&self, to: NodeId, command: Command, timeout: Duration) -> Forwarded;
}

/// The leader's answer to a forwarded command, on its way.
pub type Forwarded = Pin<Box<dyn Future<Output = Result<(i64, Outcome)>> + Send>>;

/// A forwarded command on the wire (JSON in a peer call).
#[derive(Debug, Serialize, Deserialize)]
pub struct ForwardRequest {
    pub command: Command,
}

/// The leader's answer to a forwarded command.
#[derive(Debug, Serialize, Deserialize)]
pub enum ForwardReply {
    Applied { offset: i64, outcome: Outcome },
    Refused { code: i16, message: String },
}

impl ForwardReply {
    pub fn from_result(r: Result<(i64, Outcome)>) -> ForwardReply {
        match r {
            Ok((offset, outcome)) => ForwardReply::Applied { offset, outcome },
            Err(e) => ForwardReply::Refused {
                code: e.kafka_code(),
                message: e.message(),
            },
        }
    }

    pub fn into_result(self) -> Result<(i64, Outcome)> {
        match self {
            ForwardReply::Applied { offset, outcome } => Ok((offset, outcome)),
            ForwardReply::Refused { code, message } => Err(HelixError::Remote(code, message)),
        }
    }
}

/// What the applier has made of the controller log so far.
#[derive(Debug, Default)]
pub struct AppliedView {
    pub view: ControllerView,
    /// Offset of the next record to apply.
    pub next_offset: i64,
    /// Recent commands' outcomes by offset, for whoever proposed them.
    outcomes: BTreeMap<i64, std::result::Result<Outcome, (i16, String)>>,
}

impl AppliedView {
    pub fn record(&mut self, offset: i64, outcome: &Result<Outcome>) {
        let kept = match outcome {
            Ok(o) => Ok(*o),
            Err(e) => Err((e.kafka_code(), e.message())),
        };
        self.outcomes.insert(offset, kept);
        while self.outcomes.len() > MAX_OUTCOMES {
            self.outcomes.pop_first();
        }
    }
}

/// The controller of this node.
pub struct Controller {
    /// This node's replica of group 0.
    pub(super) partition: Arc<Partition>,
    pub(super) me: NodeId,
    pub(super) members: Vec<NodeId>,
    pub(super) state: Mutex<AppliedView>,
    pub(super) applied: watch::Sender<i64>,
    /// Where the applied offset is remembered across restarts.
    pub(super) checkpoint: PathBuf,
    backpressure: Backpressure,
    forwarder: Arc<dyn Forwarder>,
}

impl std::fmt::Debug for Controller {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Controller")
            .field("me", &self.me)
            .field("applied", &*self.applied.borrow())
            .finish()
    }
}

impl Controller {
    pub(super) fn new(
        partition: Arc<Partition>,
        me: NodeId,
        members: Vec<NodeId>,
        applied: AppliedView,
        checkpoint: PathBuf,
        backpressure: Backpressure,
        forwarder: Arc<dyn Forwarder>,
    ) -> Controller {
        let next = applied.next_offset;
        Controller {
            partition,
            me,
            members,
            state: Mutex::new(applied),
            applied: watch::channel(next).0,
            checkpoint,
            backpressure,
            forwarder,
        }
    }

    /// The view as applied so far (hold the guard briefly: the applier
    /// waits for it).
    pub fn view(&self) -> MutexGuard<'_, AppliedView> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Whether this node's view has caught up with the controller's log:
    /// a leader of group 0 is known, this replica has applied what that
    /// leader had committed when it first heard it, and everything
    /// acknowledged is applied to the view and reconciled into the topic
    /// table. A node that just started (killed -9: it
    /// recovers its log with nothing known to be committed) holds a log
    /// whose commit it has not learned yet; until then its topic table may
    /// lack topics that exist, and a high watermark of 0 proves nothing.
    pub fn caught_up(&self) -> bool {
        let p = &self.partition;
        // `applied` moves once a record's topic change is reconciled into
        // the topic table; the view's own offset moves before.
        p.leadership().leader.is_some()
            && p.synced_since_start()
            && *self.applied.borrow() >= p.high_watermark().0
    }

    /// This node's replica of group 0.
    pub fn partition(&self) -> &Arc<Partition> {
        &self.partition
    }

    /// Makes `command` durable through group 0 and waits until this node
    /// has applied it; returns its outcome (or why it was refused).
    pub async fn submit(&self, command: Command) -> Result<Outcome> {
        let deadline = Instant::now() + SUBMIT_TIMEOUT;
        loop {
            let l = self.partition.leadership();
            let attempt = match l.leader {
                Some(n) if n == self.me && l.role == Role::Leader => {
                    self.submit_here(command.clone()).await
                }
                Some(n) if n != self.me => {
                    let left = deadline.saturating_duration_since(Instant::now());
                    self.forwarder.forward(n, command.clone(), left).await
                }
                _ => Err(HelixError::NotController),
            };
            match attempt {
                Ok((offset, outcome)) => {
                    self.wait_applied(offset + 1, deadline).await?;
                    return Ok(outcome);
                }
                Err(e) if retriable(&e) && Instant::now() + RETRY_PAUSE < deadline => {
                    tracing::debug!(error = %e, "controller command retried");
                    tokio::time::sleep(RETRY_PAUSE).await;
                }
                Err(e) if retriable(&e) => return Err(HelixError::Timeout("the controller")),
                Err(e) => return Err(e),
            }
        }
    }

    /// As group 0's leader: appends the command, waits until it is
    /// acknowledged and applied here; returns its offset and outcome. A
    /// forwarded command is handled here too.
    pub async fn submit_here(&self, command: Command) -> Result<(i64, Outcome)> {
        let deadline = Instant::now() + SUBMIT_TIMEOUT;
        let value = Bytes::from(serde_json::to_vec(&command).map_err(|e| {
            HelixError::CorruptState(format!("cannot encode a controller command: {e}"))
        })?);
        let waiting =
            internal::append(&self.partition, &self.backpressure, &value, ROOM_TIMEOUT).await?;
        let ack = tokio::time::timeout_at(deadline, waiting)
            .await
            .map_err(|_| HelixError::Timeout("a controller command"))?
            .map_err(|_| HelixError::ShuttingDown)??;
        let offset = ack.base_offset.0;
        self.wait_applied(offset + 1, deadline).await?;
        let outcome = self.view().outcomes.remove(&offset);
        match outcome {
            Some(Ok(o)) => Ok((offset, o)),
            Some(Err((code, message))) => Err(HelixError::Remote(code, message)),
            None => Err(HelixError::CorruptState(format!(
                "controller command at {offset} applied without an outcome"
            ))),
        }
    }

    /// Waits until the applier has passed `offset`.
    pub async fn wait_applied(&self, offset: i64, deadline: Instant) -> Result<()> {
        let mut rx = self.applied.subscribe();
        tokio::time::timeout_at(deadline, rx.wait_for(|a| *a >= offset))
            .await
            .map_err(|_| HelixError::Timeout("the controller log to be applied here"))?
            .map_err(|_| HelixError::ShuttingDown)?;
        Ok(())
    }
}

/// Whether a submit may be tried again: leadership moved or is unknown.
fn retriable(e: &HelixError) -> bool {
    match e {
        HelixError::NotController | HelixError::NotLeader | HelixError::RaftBackpressure => true,
        HelixError::Remote(..) => {
            e.is(ResponseError::NotController) || e.is(ResponseError::NotLeaderOrFollower)
        }
        _ => false,
    }
}
