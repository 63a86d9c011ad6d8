//! Group commit for `Durability::Fsync`: one committer shared by every log of
//! a node. A round makes every log appended to since its last round durable
//! with one `syncfs` per filesystem (or, with `SyncMethod::PerFile`, an
//! fdatasync of each such log's data and entry index) and then publishes each
//! log's durable position.
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
use crate::shared::Shared;
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

    /// After truncation: the durable position is at most `last`. A durable
    /// mark at the same index but elsewhere (the truncation crossed a
    /// segment boundary: it named a segment that is gone) is dropped too;
    /// left, it outranked the close's mark of the same index and the next
    /// open re-verified bytes a clean close had flushed.
    pub fn truncated(&self, mark: Option<Mark>) {
        let mut t = lock(&self.target);
        t.generation += 1;
        t.appended = mark;
        t.dirty = mark.is_some();
        let mut d = lock(&self.durable);
        let stale = |d: &Mark| {
            mark.is_none_or(|m| {
                d.pos.index > m.pos.index || (d.pos.index == m.pos.index && *d != m)
            })
        };
        if d.as_ref().is_some_and(stale) {
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

    /// Claims what the next round must make durable, if anything.
    fn take(&self) -> Option<Pending> {
        let mut t = lock(&self.target);
        if !t.dirty || self.failed() {
            return None;
        }
        t.dirty = false;
        Some(Pending {
            log: t.log.clone(),
            log_path: t.log_path.clone(),
            entries: t.entries.clone(),
            mark: t.appended,
            generation: t.generation,
        })
    }

    /// Publishes the durable position after a successful sync, or marks the
    /// log failed.
    fn finish(&self, pending: Pending, synced: std::io::Result<()>) -> Result<()> {
        if let Err(e) = synced {
            self.failed.store(true, Ordering::Release);
            tracing::error!(file = %pending.log_path.display(), error = %e, "fsync failed; the log is marked failed until reopened");
            return Err(WalError::io("fsync segment", pending.log_path, e));
        }
        if let Some(mark) = pending.mark
            && lock(&self.target).generation == pending.generation
        {
            self.publish(mark);
        }
        Ok(())
    }
}

/// A log and what a round claimed from it.
type Claimed = (Arc<LogSync>, Pending);

/// One log's share of a round.
struct Pending {
    log: Arc<File>,
    log_path: PathBuf,
    entries: Arc<File>,
    mark: Option<Mark>,
    generation: u64,
}

impl Pending {
    fn fdatasync(&self) -> std::io::Result<()> {
        fault::hit(&self.log_path, Point::Sync)?;
        self.log.sync_data()?;
        self.entries.sync_data()
    }

    fn device(&self) -> u64 {
        use std::os::unix::fs::MetadataExt;
        self.log.metadata().map_or(0, |m| m.dev())
    }
}

/// Most threads one `PerFile` round uses to fdatasync logs concurrently.
const MAX_SYNC_THREADS: usize = 16;

/// How a round makes its logs durable.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SyncMethod {
    /// One `syncfs` per filesystem per round, however many logs it holds:
    /// one device flush covers every partition. Flushes everything dirty on
    /// that filesystem, so give the WAL its own.
    #[default]
    Syncfs,
    /// `fdatasync` of each dirty log's data and entry index (two per log per
    /// round), issued from up to 16 threads at once so the journal merges
    /// them; for a filesystem shared with other busy writers.
    PerFile,
}

/// Flushes the filesystem holding `fd` (Linux `syncfs`: writes back every
/// dirty page and waits, reporting writeback errors since Linux 5.8).
fn syncfs(file: &File, path: &std::path::Path) -> std::io::Result<()> {
    use std::os::fd::AsRawFd;
    fault::hit(path, Point::Sync)?;
    // SAFETY: the descriptor is open for the duration of the call (`file`
    // is borrowed); syncfs reads no memory of ours.
    let rc = unsafe { libc::syncfs(file.as_raw_fd()) };
    if rc == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// Makes everything written to the filesystem holding `dir` durable with
/// one `syncfs` (file contents, new names, renames). For a caller that
/// staged many small files (votes of many Raft groups) and needs them all
/// durable at once, instead of two fsyncs per file.
pub fn sync_filesystem(dir: &std::path::Path) -> Result<()> {
    let f = File::open(dir).map_err(|e| WalError::io("open for syncfs", dir, e))?;
    syncfs(&f, dir).map_err(|e| WalError::io("syncfs", dir, e))
}

/// Counters of a group committer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SyncStats {
    /// Rounds run (each covers every log appended to since the last).
    pub rounds: u64,
    /// Flush calls made: `syncfs` calls (one per filesystem per round), or
    /// `fdatasync` calls (two per dirty log per round) with
    /// [`SyncMethod::PerFile`].
    pub fsyncs: u64,
    /// Logs made durable, summed over rounds.
    pub logs_synced: u64,
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
    method: SyncMethod,
    rounds: Mutex<Rounds>,
    done: Condvar,
    logs: Mutex<Vec<Weak<LogSync>>>,
    stats_rounds: AtomicU64,
    stats_fsyncs: AtomicU64,
    stats_logs: AtomicU64,
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

    pub fn with_method(method: SyncMethod) -> Self {
        SyncGroup {
            inner: Arc::new(Inner {
                method,
                ..Inner::default()
            }),
        }
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
            logs_synced: self.inner.stats_logs.load(Ordering::Relaxed),
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
        let pending: Vec<Claimed> = logs
            .into_iter()
            .filter_map(|l| l.take().map(|p| (l, p)))
            .collect();
        self.inner
            .stats_logs
            .fetch_add(pending.len() as u64, Ordering::Relaxed);
        let mut first_error = None;
        match self.inner.method {
            SyncMethod::PerFile => {
                // Issued concurrently so the filesystem journal commits them
                // together: one device flush serves the whole round.
                self.inner
                    .stats_fsyncs
                    .fetch_add(2 * pending.len() as u64, Ordering::Relaxed);
                if pending.len() == 1 {
                    // Nothing to overlap: no thread.
                    for (log, p) in pending {
                        let synced = p.fdatasync();
                        if let Err(e) = log.finish(p, synced) {
                            first_error.get_or_insert(e);
                        }
                    }
                    return first_error.map_or(Ok(()), Err);
                }
                let workers = pending.len().clamp(1, MAX_SYNC_THREADS);
                let per_worker = pending.len().div_ceil(workers);
                let mut chunks: Vec<Vec<Claimed>> = Vec::new();
                let mut pending = pending.into_iter().peekable();
                while pending.peek().is_some() {
                    chunks.push(pending.by_ref().take(per_worker).collect());
                }
                let errors: Vec<WalError> = std::thread::scope(|scope| {
                    let handles: Vec<_> = chunks
                        .into_iter()
                        .map(|chunk| {
                            scope.spawn(move || {
                                chunk
                                    .into_iter()
                                    .filter_map(|(log, p)| {
                                        let synced = p.fdatasync();
                                        log.finish(p, synced).err()
                                    })
                                    .collect::<Vec<_>>()
                            })
                        })
                        .collect();
                    handles
                        .into_iter()
                        .flat_map(|h| h.join().unwrap_or_default())
                        .collect()
                });
                if let Some(e) = errors.into_iter().next() {
                    first_error.get_or_insert(e);
                }
            }
            SyncMethod::Syncfs => {
                let mut by_device: Vec<(u64, Vec<Claimed>)> = Vec::new();
                for (log, p) in pending {
                    let dev = p.device();
                    match by_device.iter_mut().find(|(d, _)| *d == dev) {
                        Some((_, group)) => group.push((log, p)),
                        None => by_device.push((dev, vec![(log, p)])),
                    }
                }
                for (_, group) in by_device {
                    let Some((_, first)) = group.first() else {
                        continue;
                    };
                    let synced = syncfs(&first.log, &first.log_path);
                    self.inner.stats_fsyncs.fetch_add(1, Ordering::Relaxed);
                    for (log, p) in group {
                        let result = match &synced {
                            Ok(()) => Ok(()),
                            Err(e) => Err(e.raw_os_error().map_or_else(
                                || std::io::Error::new(e.kind(), e.to_string()),
                                std::io::Error::from_raw_os_error,
                            )),
                        };
                        if let Err(e) = log.finish(p, result) {
                            first_error.get_or_insert(e);
                        }
                    }
                }
            }
        }
        first_error.map_or(Ok(()), Err)
    }
}
