//! Producer ids for InitProducerId without a transactional id: handed out
//! from a block this node got from the controller (a block is durable in
//! group 0 before any id of it is used, so no id is ever reused).
//!
//! A node fetches its first block when it starts and the next one in the
//! background once the current one runs low, so a client rarely waits on
//! the controller, and a node cut off from it later still has ids. When no id is at
//! hand a client waits at most [`WAIT`]; then it is answered
//! COORDINATOR_LOAD_IN_PROGRESS (retriable) while the fetch goes on, as
//! Kafka's brokers do. A node cut off from the controller thus answers in
//! a second and the client asks another node, instead of every attempt
//! costing the controller's whole timeout.

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::sync::Notify;

use super::service::Controller;
use super::{Command, Outcome, PRODUCER_ID_BLOCK};
use crate::error::{HelixError, Result};

/// Longest a client waits for a block before a retriable answer.
pub const WAIT: Duration = Duration::from_secs(1);
/// Fetch the next block when fewer ids than this are left.
const LOW_WATER: i64 = PRODUCER_ID_BLOCK / 10;

#[derive(Debug, Default)]
struct Blocks {
    /// The current block: `next..end`.
    next: i64,
    end: i64,
    /// The start of the block after it, fetched ahead.
    spare: Option<i64>,
    fetching: bool,
}

impl Blocks {
    fn take(&mut self) -> Option<i64> {
        if self.next >= self.end {
            let start = self.spare.take()?;
            (self.next, self.end) = (start, start + PRODUCER_ID_BLOCK);
        }
        let id = self.next;
        self.next += 1;
        Some(id)
    }

    fn needs_fetch(&self) -> bool {
        !self.fetching && self.spare.is_none() && self.end - self.next < LOW_WATER
    }
}

/// This node's producer ids.
#[derive(Debug)]
pub struct ProducerIds {
    controller: Arc<Controller>,
    blocks: Mutex<Blocks>,
    fetched: Notify,
}

impl ProducerIds {
    /// Starts fetching the first block at once: a node that is cut off
    /// from the controller later still has ids to hand out.
    pub fn new(controller: Arc<Controller>) -> Arc<ProducerIds> {
        let ids = Arc::new(ProducerIds {
            controller,
            blocks: Mutex::new(Blocks {
                fetching: true,
                ..Blocks::default()
            }),
            fetched: Notify::new(),
        });
        tokio::spawn(ids.clone().fetch());
        ids
    }

    /// A fresh producer id, or `NotReady` if no block came within [`WAIT`].
    pub async fn next(self: &Arc<Self>) -> Result<i64> {
        let fetched = self.fetched.notified();
        tokio::pin!(fetched);
        // Registered before looking, so a fetch ending in between wakes us.
        fetched.as_mut().enable();
        if let Some(id) = self.take() {
            return Ok(id);
        }
        let _ = tokio::time::timeout(WAIT, fetched).await;
        self.take().ok_or(HelixError::NotReady(
            "a producer id block from the controller",
        ))
    }

    /// Takes an id if one is at hand; starts a fetch when the ids run low.
    fn take(self: &Arc<Self>) -> Option<i64> {
        let mut blocks = self.lock();
        let id = blocks.take();
        if blocks.needs_fetch() {
            blocks.fetching = true;
            tokio::spawn(self.clone().fetch());
        }
        id
    }

    async fn fetch(self: Arc<Self>) {
        let got = self
            .controller
            .submit(Command::AllocateProducerIdBlock)
            .await;
        let mut blocks = self.lock();
        blocks.fetching = false;
        match got {
            Ok(Outcome::ProducerIdBlock { start }) => blocks.spare = Some(start),
            Ok(other) => tracing::error!(?other, "producer id block without a start"),
            Err(e) => tracing::warn!(error = %e, "no producer id block from the controller"),
        }
        drop(blocks);
        self.fetched.notify_waiters();
    }

    fn lock(&self) -> MutexGuard<'_, Blocks> {
        self.blocks.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_run_through_the_current_block_then_the_spare() {
        let mut b = Blocks {
            next: 5,
            end: 7,
            spare: Some(1000),
            fetching: false,
        };
        assert_eq!(b.take(), Some(5));
        assert_eq!(b.take(), Some(6));
        assert_eq!(b.take(), Some(1000));
        assert_eq!((b.next, b.end, b.spare), (1001, 2000, None));
    }

    #[test]
    fn without_a_spare_an_empty_block_gives_nothing_and_asks_for_one() {
        let mut b = Blocks::default();
        assert_eq!(b.take(), None);
        assert!(b.needs_fetch());
        b.fetching = true;
        assert!(!b.needs_fetch(), "one fetch at a time");
    }

    #[test]
    fn the_next_block_is_fetched_when_the_current_runs_low() {
        let mut b = Blocks {
            next: 0,
            end: PRODUCER_ID_BLOCK,
            spare: None,
            fetching: false,
        };
        assert!(!b.needs_fetch());
        b.next = PRODUCER_ID_BLOCK - LOW_WATER + 1;
        assert!(b.needs_fetch());
        b.spare = Some(5000);
        assert!(!b.needs_fetch(), "a spare is already at hand");
    }
}
