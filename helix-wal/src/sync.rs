//! Group commit for `Durability::Fsync`: one committer shared by every log of
//! a node. A round fsyncs each log that was appended to since its last sync
//! (log data and entry index) and then publishes that log's durable position.
//! Callers that ask for durability while a round runs wait for the next round
//! and share it, so there is never one fsync per append.
//!
//! A failed fsync is not retried: after Linux reports a writeback error the
//! dirty pages may already be gone, so a retry could falsely succeed. The log
//! is marked failed instead (no more appends, durable position frozen) until
//! it is reopened and recovery re-verifies its tail.

use std::fs::File;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, Weak};

use crate::error::{Result, WalError};
use crate::fault::{self, Point};
use crate::reader::Shared;
use crate::types::RaftPosition;

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// A point in a log: an entry boundary and everything recovery needs to
/// trust the bytes before it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Mark {
    pub pos: RaftPosition,
    pub segment_base: i64,
    pub position: u64,
    pub entry_count: u64,
    pub next_offset: i64,
    pub max_timestamp: i64,
}

/// The files a round must sync for one log, and what they hold.
struct Target {
    log: Arc<File>,
    log_path: PathBuf,
    entries: Arc<File>,
    appended: Option<Mark>,
    dirty: bool,
    /// Bumped by truncation so a round started before it cannot publish a
    /// position that no longer exists.
    generation: u64,
}

/// One log's registration with a [`SyncGroup`].
pub(crate) struct LogSync {
    shared: Arc<Shared>,
    target: Mutex<Target>,
    durable: Mutex<Option<Mark>>,
    failed: AtomicBool,
}

impl LogSync {
    pub fn new(shared: Arc<Shared>, log: Arc<File>, log_path: PathBuf, entries: Arc<File>) -> Self {
        LogSync {
            shared,
            target: Mutex::new(Target {
                log,
                log_path,
                entries,
                appended: None,
                dirty: false,
                generation: 0,
            }),
            durable: Mutex::new(None),
            failed: AtomicBool::new(false),
        }
    }

    /// Records an append the next round must cover.
    pub fn appended(&self, mark: Mark) {
        let mut t = lock(&self.target);
        t.appended = Some(mark);
        t.dirty = true;
    }

    /// Points the committer at a new active segment; `durable` is what the
    /// writer itself synced while rolling.
    pub fn retarget(
        &self,
        log: Arc<File>,
        log_path: PathBuf,
        entries: Arc<File>,
        durable: Option<Mark>,
    ) {
        let mut t = lock(&self.target);
        t.log = log;
        t.log_path = log_path;
        t.entries = entries;
        if let Some(m) = durable {
            self.publish(m);
        }
    }

    /// After truncation: the durable position is at most `last`.
    pub fn truncated(&self, mark: Option<Mark>) {
        let mut t = lock(&self.target);
        t.generation += 1;
        t.appended = mark;
        t.dirty = mark.is_some();
        let mut d = lock(&self.durable);
        if d.is_some_and(|d| mark.is_none_or(|m| d.pos.index > m.pos.index)) {
            *d = None;
            self.shared.set_durable(None);
        }
    }

    fn publish(&self, mark: Mark) {
        let mut d = lock(&self.durable);
        if d.is_none_or(|d| d.pos.index < mark.pos.index) {
            *d = Some(mark);
            self.shared.set_durable(Some(mark.pos));
        }
    }

    pub fn durable_mark(&self) -> Option<Mark> {
        *lock(&self.durable)
    }

    pub fn failed(&self) -> bool {
        self.failed.load(Ordering::Acquire)
    }

    /// Syncs this log if dirty; returns the fsync calls made.
    fn sync(&self) -> Result<u64> {
        let (log, log_path, entries, mark, generation) = {
            let mut t = lock(&self.target);
            if !t.dirty || self.failed() {
                return Ok(0);
            }
            t.dirty = false;
            (
                t.log.clone(),
                t.log_path.clone(),
                t.entries.clone(),
                t.appended,
                t.generation,
            )
        };
        let synced = fault::hit(&log_path, Point::Sync)
            .and_then(|()| log.sync_data())
            .and_then(|()| entries.sync_data());
        if let Err(e) = synced {
            self.failed.store(true, Ordering::Release);
            tracing::error!(file = %log_path.display(), error = %e, "fsync failed; the log is marked failed until reopened");
            return Err(WalError::io("fsync segment", log_path, e));
        }
        if let Some(mark) = mark
            && lock(&self.target).generation == generation
        {
            self.publish(mark);
        }
        Ok(2)
    }
}

/// Counters of a group committer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SyncStats {
    /// Rounds run (each covers every log appended to since the last).
    pub rounds: u64,
    /// fsync calls made (two per dirty log per round: data and entry index).
    pub fsyncs: u64,
}

#[derive(Debug, Default)]
struct Rounds {
    started: u64,
    finished: u64,
    running: bool,
    /// The last round that failed and why.
    failure: Option<(u64, i32, String)>,
}

#[derive(Default)]
struct Inner {
    rounds: Mutex<Rounds>,
    done: Condvar,
    logs: Mutex<Vec<Weak<LogSync>>>,
    stats_rounds: AtomicU64,
    stats_fsyncs: AtomicU64,
}

impl std::fmt::Debug for Inner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SyncGroup")
            .field("rounds", &self.stats_rounds.load(Ordering::Relaxed))
            .finish()
    }
}

/// A group committer shared by the logs of a node (clone to share).
#[derive(Debug, Clone, Default)]
pub struct SyncGroup {
    inner: Arc<Inner>,
}

impl SyncGroup {
    pub fn new() -> Self {
        SyncGroup::default()
    }

    pub(crate) fn register(&self, log: &Arc<LogSync>) {
        let mut logs = lock(&self.inner.logs);
        logs.retain(|w| w.strong_count() > 0);
        logs.push(Arc::downgrade(log));
    }

    pub fn stats(&self) -> SyncStats {
        SyncStats {
            rounds: self.inner.stats_rounds.load(Ordering::Relaxed),
            fsyncs: self.inner.stats_fsyncs.load(Ordering::Relaxed),
        }
    }

    /// Blocks until every append made before the call is durable. Concurrent
    /// callers share rounds: a caller arriving during a round waits for the
    /// next one, which one of the waiters runs for all of them.
    pub fn sync_all(&self) -> Result<()> {
        let mut r = lock(&self.inner.rounds);
        // The first round that starts after this call covers its appends.
        let ticket = r.started + 1;
        loop {
            if r.finished >= ticket {
                return match &r.failure {
                    Some((round, errno, msg)) if *round >= ticket => Err(WalError::SyncFailed {
                        errno: *errno,
                        reason: msg.clone(),
                    }),
                    _ => Ok(()),
                };
            }
            if !r.running {
                r.running = true;
                r.started += 1;
                let round = r.started;
                drop(r);
                let result = self.run_round();
                r = lock(&self.inner.rounds);
                r.running = false;
                r.finished = round;
                if let Err(e) = &result {
                    r.failure = Some((round, e.raw_os_error().unwrap_or(5), e.to_string()));
                }
                self.inner.done.notify_all();
                continue;
            }
            r = self.inner.done.wait(r).unwrap_or_else(|p| p.into_inner());
        }
    }

    fn run_round(&self) -> Result<()> {
        let logs: Vec<Arc<LogSync>> = lock(&self.inner.logs)
            .iter()
            .filter_map(Weak::upgrade)
            .collect();
        self.inner.stats_rounds.fetch_add(1, Ordering::Relaxed);
        let mut first_error = None;
        for log in logs {
            match log.sync() {
                Ok(n) => {
                    self.inner.stats_fsyncs.fetch_add(n, Ordering::Relaxed);
                }
                Err(e) => {
                    first_error.get_or_insert(e);
                }
            }
        }
        first_error.map_or(Ok(()), Err)
    }
}
