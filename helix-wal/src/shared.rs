//! What the single writer of a partition log publishes to its readers: the
//! segment list, the next offset, the log start offset and the last and
//! durable Raft positions (`reader.rs` and `positions.rs` read it, `log.rs`
//! writes it).

use std::path::PathBuf;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering, fence};
use std::sync::{Arc, RwLock};

use crate::budget::FileBudget;
use crate::segment::Segment;
use crate::types::RaftPosition;

/// State the writer publishes to readers.
#[derive(Debug)]
pub(crate) struct Shared {
    pub dir: PathBuf,
    /// Segments in base-offset order; the last one is active.
    pub segments: RwLock<Vec<Arc<Segment>>>,
    pub next_offset: AtomicI64,
    pub log_start_offset: AtomicI64,
    pub last_position: PositionCell,
    /// The last entry known durable (see `Durability`).
    pub durable: PositionCell,
    pub budget: FileBudget,
}

impl Shared {
    pub fn snapshot(&self) -> Vec<Arc<Segment>> {
        self.segments
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    pub fn set_segments(&self, segments: Vec<Arc<Segment>>) {
        *self.segments.write().unwrap_or_else(|p| p.into_inner()) = segments;
    }

    pub fn next_offset(&self) -> i64 {
        self.next_offset.load(Ordering::Acquire)
    }

    pub fn log_start_offset(&self) -> i64 {
        self.log_start_offset.load(Ordering::Acquire)
    }

    pub fn last_position(&self) -> Option<RaftPosition> {
        self.last_position.load()
    }

    /// Only the writer calls this.
    pub fn set_last_position(&self, pos: Option<RaftPosition>) {
        self.last_position.store(pos);
    }

    pub fn durable(&self) -> Option<RaftPosition> {
        self.durable.load()
    }

    /// Called by the writer (`ReplicationOnly`) or under the log's sync lock
    /// (`Fsync`), never by both for one log.
    pub fn set_durable(&self, pos: Option<RaftPosition>) {
        self.durable.store(pos);
    }
}

/// Times a read starts again after a compaction swap replaced a segment
/// it was reading. The swap marks the old segments before it moves their
/// files and publishes the new list after (a few fsyncs later), so a read
/// that meets one waits for the list, 1 ms at a time, at most ~10 s.
const MAX_REREADS: usize = 10_000;

/// Whether a read that met a replaced segment (attempt `attempt`) starts
/// again; pauses first once the immediate retries are spent.
pub(crate) fn reread(attempt: usize) -> bool {
    if attempt >= MAX_REREADS {
        return false;
    }
    if attempt >= 2 {
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    true
}

/// A Raft position readers load without a lock (a sequence lock: stores
/// must be serialized by the caller; loads retry while a store is under way).
#[derive(Debug, Default)]
pub(crate) struct PositionCell {
    seq: AtomicU64,
    term: AtomicU64,
    /// Index + 1; 0 means no position.
    index: AtomicU64,
}

impl PositionCell {
    pub fn new(pos: Option<RaftPosition>) -> Self {
        let cell = PositionCell::default();
        cell.store(pos);
        cell
    }

    pub fn store(&self, pos: Option<RaftPosition>) {
        let seq = self.seq.load(Ordering::Relaxed);
        self.seq.store(seq.wrapping_add(1), Ordering::Relaxed);
        fence(Ordering::Release);
        let (term, index) = pos.map_or((0, 0), |p| (p.term, p.index.wrapping_add(1)));
        self.term.store(term, Ordering::Relaxed);
        self.index.store(index, Ordering::Relaxed);
        self.seq.store(seq.wrapping_add(2), Ordering::Release);
    }

    pub fn load(&self) -> Option<RaftPosition> {
        loop {
            let before = self.seq.load(Ordering::Acquire);
            if before & 1 == 1 {
                std::hint::spin_loop();
                continue;
            }
            let term = self.term.load(Ordering::Relaxed);
            let index = self.index.load(Ordering::Relaxed);
            fence(Ordering::Acquire);
            if self.seq.load(Ordering::Relaxed) == before {
                return (index != 0).then(|| RaftPosition {
                    term,
                    index: index - 1,
                });
            }
        }
    }
}
