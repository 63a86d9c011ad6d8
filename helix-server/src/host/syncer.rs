//! The node's fsync thread (fsync durability): shards ask for a round after
//! appending; one `SyncGroup::sync_all` covers every log appended to since
//! the last round, whichever shard appended, and every shard that asked is
//! told when it is done. Shards keep working while the disk flushes.

use std::sync::{Arc, Mutex, mpsc as std_mpsc};

use helix_wal::SyncGroup;
use tokio::sync::mpsc;

use super::input::ShardInput;
use crate::error::{HelixError, Result};

/// A request for the next round: whom to tell.
type Request = mpsc::Sender<ShardInput>;

/// Handle to the syncer thread.
#[derive(Clone)]
pub struct Syncer {
    requests: Arc<Mutex<Option<std_mpsc::Sender<Request>>>>,
}

impl Syncer {
    pub fn start(group: SyncGroup) -> Result<Syncer> {
        let (tx, rx) = std_mpsc::channel::<Request>();
        std::thread::Builder::new()
            .name("helix-syncer".into())
            .spawn(move || run(group, rx))
            .map_err(|e| HelixError::Config(format!("cannot start the syncer thread: {e}")))?;
        Ok(Syncer {
            requests: Arc::new(Mutex::new(Some(tx))),
        })
    }

    /// Asks for a round; false if the syncer has stopped.
    pub fn request(&self, reply: Request) -> bool {
        let requests = self.requests.lock().unwrap_or_else(|p| p.into_inner());
        requests.as_ref().is_some_and(|tx| tx.send(reply).is_ok())
    }

    pub fn stop(&self) {
        self.requests
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take();
    }
}

fn run(group: SyncGroup, rx: std_mpsc::Receiver<Request>) {
    while let Ok(first) = rx.recv() {
        let mut waiting = vec![first];
        waiting.extend(rx.try_iter());
        let started = std::time::Instant::now();
        // A failed round marks the logs it covered failed (helix-wal): their
        // durable positions stop, and so do their acknowledgements.
        if let Err(e) = group.sync_all() {
            tracing::error!(error = %e, "fsync round failed");
        }
        let m = crate::metrics::metrics();
        m.record(crate::metrics::Stage::Fsync, started.elapsed());
        m.busy(crate::metrics::Pool::Syncer, started.elapsed());
        for shard in waiting {
            // Never dropped: a shard that missed it would wait forever.
            let _ = shard.blocking_send(ShardInput::Synced);
        }
    }
}
