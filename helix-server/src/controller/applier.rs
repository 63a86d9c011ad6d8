//! Applying the controller log on every node: group 0's acknowledged
//! records, in order, into the view, each followed by its [`ViewFollower`]'s
//! reconciliation (the topic table: this node opens, closes or reconfigures
//! its replicas).
//! Only acknowledged records are applied (durable on a majority, never
//! truncated), so nothing a node did on behalf of the view is ever undone.
//!
//! The offset applied so far is kept in `controller/applied-offset`; at
//! start the view is rebuilt from the log up to it, before any replica
//! opens, and the applier carries on from there as the group acknowledges
//! more.

use std::future::Future;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::Arc;

use bytes::Bytes;
use helix_raft::NodeId;

use super::service::{AppliedView, Controller, Forwarder};
use super::{Command, ControllerView, TopicRecord};
use crate::budget::Backpressure;
use crate::error::{HelixError, Result};
use crate::replica::{Partition, internal};

const CHECKPOINT_FILE: &str = "applied-offset";

/// What follows the controller's view on this node (the topic table, which
/// opens, closes and reconfigures this node's replicas). Told of every
/// topic a command changed, in log order, before the applied offset moves
/// past that command; a failure is retried from the same command. The
/// controller publishes through it and knows nothing of who listens.
pub trait ViewFollower: Send + Sync {
    /// `name` now reads `record` in the view (None: deleted). Must be
    /// idempotent: after a restart the same change may be told again.
    fn topic_changed<'a>(
        &'a self,
        name: &'a str,
        record: Option<&'a TopicRecord>,
    ) -> Pin<Box<dyn Future<Output = Result<()>> + Send + 'a>>;
}

/// Decodes one controller record.
pub fn decode(offset: i64, value: &Bytes) -> Result<Command> {
    serde_json::from_slice(value).map_err(|e| {
        HelixError::CorruptState(format!("controller command at offset {offset}: {e}"))
    })
}

/// Builds the controller over its recovered replica: the view from the
/// log up to the applied checkpoint (for a lone voter, its whole log: all of
/// it is acknowledged).
pub fn open(
    partition: Arc<Partition>,
    me: NodeId,
    members: Vec<NodeId>,
    dir: &Path,
    backpressure: Backpressure,
    forwarder: Arc<dyn Forwarder>,
) -> Result<Controller> {
    let checkpoint = dir.join(CHECKPOINT_FILE);
    let end = if members.len() == 1 {
        partition.high_watermark().0
    } else {
        read_checkpoint(&checkpoint)?.min(partition.high_watermark().0)
    };
    let mut applied = AppliedView::default();
    let next = internal::for_each_value(&partition, 0, end, |offset, value| {
        let command = decode(offset, &value)?;
        // Nobody waits for these outcomes: their proposers were answered
        // before the restart.
        let _ = apply_one(&mut applied.view, &command, &members, me, offset);
        Ok(())
    })?;
    applied.next_offset = next;
    tracing::info!(
        topics = applied.view.topics.len(),
        applied = applied.next_offset,
        "controller view rebuilt"
    );
    Ok(Controller::new(
        partition,
        me,
        members,
        applied,
        checkpoint,
        backpressure,
        forwarder,
    ))
}

/// Applies one command; a refused command is logged (it conflicted with
/// an earlier one) and changes nothing.
fn apply_one(
    view: &mut ControllerView,
    command: &Command,
    members: &[NodeId],
    me: NodeId,
    offset: i64,
) -> Result<super::Outcome> {
    let outcome = view.apply(command, members, me);
    if let Err(e) = &outcome {
        tracing::debug!(offset, error = %e, "controller command refused at apply");
    }
    outcome
}

/// Applies what group 0 acknowledges, for as long as the node runs.
pub async fn run(controller: Arc<Controller>, follower: Arc<dyn ViewFollower>) {
    let mut hw = controller.partition.watch_high_watermark();
    loop {
        let target = hw.borrow_and_update().0;
        if let Err(e) = apply_to(&controller, follower.as_ref(), target).await {
            tracing::error!(error = %e, "applying the controller log failed; retrying");
            tokio::time::sleep(std::time::Duration::from_millis(500)).await;
            continue;
        }
        if hw.changed().await.is_err() {
            return;
        }
    }
}

/// Applies records up to `target` and reconciles what they changed.
async fn apply_to(controller: &Controller, follower: &dyn ViewFollower, target: i64) -> Result<()> {
    let from = controller.view().next_offset;
    if from >= target {
        return Ok(());
    }
    let mut commands = Vec::new();
    internal::for_each_value(&controller.partition, from, target, |offset, value| {
        commands.push((offset, decode(offset, &value)?));
        Ok(())
    })?;
    for (offset, command) in commands {
        let record = {
            let mut state = controller.view();
            let outcome = apply_one(
                &mut state.view,
                &command,
                &controller.members,
                controller.me,
                offset,
            );
            state.record(offset, &outcome);
            state.next_offset = offset + 1;
            command
                .topic()
                .map(|name| (name.to_string(), state.view.topics.get(name).cloned()))
        };
        if let Some((name, record)) = record {
            follower.topic_changed(&name, record.as_ref()).await?;
        }
        write_checkpoint(&controller.checkpoint, offset + 1);
        controller.applied.send_replace(offset + 1);
    }
    Ok(())
}

fn read_checkpoint(path: &PathBuf) -> Result<i64> {
    match std::fs::read_to_string(path) {
        Ok(text) => text.trim().parse().map_err(|_| {
            HelixError::CorruptState(format!("{}: {text:?} is not an offset", path.display()))
        }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(0),
        Err(e) => Err(e.into()),
    }
}

/// Not fsynced: a checkpoint that is older after a crash only makes the
/// next start replay less and apply the rest again (reconciling is
/// idempotent).
fn write_checkpoint(path: &Path, next: i64) {
    let tmp = path.with_extension("tmp");
    let result =
        std::fs::write(&tmp, format!("{next}\n")).and_then(|()| std::fs::rename(&tmp, path));
    if let Err(e) = result {
        tracing::warn!(file = %path.display(), error = %e, "cannot save the controller checkpoint");
    }
}
