//! One segment as readers see it: a log file of whole v2 batches named by its
//! base offset, the length published by the writer, its sparse index, and how
//! far its bytes have been verified.
//!
//! Reads are zero-copy `Bytes` slices of a mapping. The active segment is
//! mapped once, longer than the file, and read only below the length the
//! writer published, so the writer and any number of readers run at once.
//! A sealed segment is mapped on first use (through the node's budget).
//! No mapped file is ever shrunk under a published length: truncation copies
//! the kept prefix to a new file and renames it over the old one. Bytes recovered from disk without
//! re-verification (before the recovery checkpoint) are CRC-checked the first
//! time a read reaches them; a failure marks the segment damaged from that
//! batch on, and reads reaching it get `WalError::Corrupt` instead of bytes.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, RwLock};

use bytes::Bytes;

use crate::error::WalError;
use crate::source::{ActiveBody, SealedView};

// The seams: how bytes are reached (mapping), what reads return (read),
// how recovered bytes are checked (verified; cleaned for segments that may
// hold gaps). This file holds the segment's published state.
mod cleaned;
mod mapping;
mod read;
mod verified;

/// Chunk size used when walking the active segment through its file.
const SCAN_CHUNK: u64 = 1 << 20;

pub fn log_path(dir: &Path, base: i64) -> PathBuf {
    dir.join(format!("{base:020}.log"))
}

/// A range found bad by verification.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Damage {
    pub position: u64,
    pub reason: String,
}

#[derive(Debug)]
struct Verified {
    /// Bytes `[0, position)` hold whole batches with good CRCs whose offsets
    /// run contiguously from the base offset to `next_offset`.
    position: u64,
    next_offset: i64,
    damage: Option<Damage>,
    /// Bumped when a truncation resets the prefix, so a verification that
    /// read the old bytes cannot publish its result.
    generation: u64,
}

#[derive(Debug)]
enum Body {
    Active(ActiveBody),
    /// Mapped on demand; `None` while unmapped.
    Sealed(Option<Arc<SealedView>>),
}

#[derive(Debug)]
pub struct Segment {
    pub base_offset: i64,
    dir: PathBuf,
    log_path: PathBuf,
    index_interval: u64,
    /// Bytes of whole entries readers may see.
    published: AtomicU64,
    /// Offset after the last batch in the segment.
    next_offset: AtomicI64,
    /// Largest batch max timestamp, `i64::MIN` when the segment has none.
    max_timestamp: AtomicI64,
    /// Raft index of the segment's first entry, `u64::MAX` while it has none.
    first_index: AtomicU64,
    /// Entry records readers may see (published with `published`).
    entry_count: AtomicU64,
    /// Fast-path mirror of `verified.position`.
    verified_to: AtomicU64,
    verified: Mutex<Verified>,
    body: RwLock<Body>,
    last_used: AtomicU64,
    /// Starts below the cleaner checkpoint: compaction (or catch-up from a
    /// compacted leader) may have left gaps between its batches (ADR 0027
    /// §5), so the lazy check accepts them and a read in a trailing gap
    /// moves to the next segment.
    may_have_gaps: AtomicBool,
    /// Replaced by a compaction swap (`replace.rs`): its files are renamed
    /// away, and the first one's live name now holds the new segment, so
    /// a reader that still holds it must not open its files by name again.
    retired: AtomicBool,
}

/// The published state a segment starts with.
#[derive(Debug, Clone, Copy)]
pub struct SegmentState {
    /// Bytes of whole entries.
    pub len: u64,
    pub next_offset: i64,
    pub max_timestamp: i64,
    /// The prefix `(position, next offset)` already known good.
    pub verified: (u64, i64),
    /// `(first Raft index, entry count)` when the segment holds entries.
    pub entries: Option<(u64, u64)>,
}

/// Batches found by a read within one segment.
pub struct Chunk {
    pub bytes: Bytes,
    /// Where `bytes` start in the segment's `.log`.
    pub position: u64,
    pub first_offset: i64,
    pub next_offset: i64,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Segment {
    /// A segment whose bytes up to `verified` are known good.
    pub fn new(
        dir: &Path,
        base_offset: i64,
        index_interval: u64,
        active: Option<ActiveBody>,
        state: SegmentState,
    ) -> Segment {
        let SegmentState {
            len,
            next_offset,
            max_timestamp,
            verified,
            entries,
        } = state;
        Segment {
            base_offset,
            dir: dir.to_path_buf(),
            log_path: log_path(dir, base_offset),
            index_interval,
            published: AtomicU64::new(len),
            next_offset: AtomicI64::new(next_offset),
            max_timestamp: AtomicI64::new(max_timestamp),
            first_index: AtomicU64::new(entries.map_or(u64::MAX, |e| e.0)),
            entry_count: AtomicU64::new(entries.map_or(0, |e| e.1)),
            verified_to: AtomicU64::new(verified.0),
            verified: Mutex::new(Verified {
                position: verified.0,
                next_offset: verified.1,
                damage: None,
                generation: 0,
            }),
            body: RwLock::new(match active {
                Some(a) => Body::Active(a),
                None => Body::Sealed(None),
            }),
            last_used: AtomicU64::new(0),
            may_have_gaps: AtomicBool::new(false),
            retired: AtomicBool::new(false),
        }
    }

    /// Marks the segment as one that may hold gaps (it starts below the
    /// cleaner checkpoint: cleaned, or holding entries stored by catch-up).
    pub fn allow_gaps(&self) {
        self.may_have_gaps.store(true, Ordering::Release);
    }

    pub fn may_have_gaps(&self) -> bool {
        self.may_have_gaps.load(Ordering::Acquire)
    }

    /// Marks the segment replaced by a compaction swap, before its files
    /// are renamed (see `retired`); `false` undoes it when the swap rolled
    /// back.
    pub fn set_retired(&self, retired: bool) {
        self.retired.store(retired, Ordering::SeqCst);
    }

    /// Whether a file of this segment opened by name may be another
    /// segment's; checked after the open (see `set_retired`).
    pub fn is_retired(&self) -> bool {
        self.retired.load(Ordering::SeqCst)
    }

    /// The error a reader of a retired segment gets: read again from a
    /// fresh segment list.
    pub fn replaced(&self) -> WalError {
        WalError::SegmentReplaced {
            base_offset: self.base_offset,
        }
    }

    /// A file of this segment could not be opened by name: renamed away
    /// by a compaction swap, or a real I/O error.
    pub fn open_failed(&self, op: &'static str, e: std::io::Error) -> WalError {
        if self.is_retired() {
            self.replaced()
        } else {
            WalError::io(op, &self.log_path, e)
        }
    }

    pub fn log_path(&self) -> &Path {
        &self.log_path
    }

    pub fn len(&self) -> u64 {
        self.published.load(Ordering::Acquire)
    }

    pub fn next_offset(&self) -> i64 {
        self.next_offset.load(Ordering::Acquire)
    }

    pub fn max_timestamp(&self) -> i64 {
        self.max_timestamp.load(Ordering::Acquire)
    }

    /// `(first Raft index, entry count)`; `None` while the segment holds no entry.
    pub fn entries(&self) -> Option<(u64, u64)> {
        let count = self.entry_count.load(Ordering::Acquire);
        let first = self.first_index.load(Ordering::Acquire);
        (count > 0 && first != u64::MAX).then_some((first, count))
    }

    /// Publishes the entry records (after the bytes they describe).
    pub fn publish_entries(&self, first_index: u64, count: u64) {
        self.first_index.store(
            if count == 0 { u64::MAX } else { first_index },
            Ordering::Release,
        );
        self.entry_count.store(count, Ordering::Release);
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    pub fn last_used(&self) -> u64 {
        self.last_used.load(Ordering::Relaxed)
    }

    pub fn damage(&self) -> Option<Damage> {
        lock(&self.verified).damage.clone()
    }

    /// Refuses reads from `position` on (recovery found the segment inconsistent).
    pub fn mark_damaged(&self, position: u64, reason: &str) {
        let mut v = lock(&self.verified);
        v.damage = Some(Damage {
            position,
            reason: reason.into(),
        });
        v.position = v.position.min(position);
        self.verified_to.store(v.position, Ordering::Release);
    }

    /// Publishes bytes `[checked_from, len)` that the writer appended and
    /// checked; they extend the verified prefix when contiguous with it.
    pub fn publish(&self, len: u64, next_offset: i64, max_timestamp: i64, checked_from: u64) {
        {
            let mut v = lock(&self.verified);
            if v.damage.is_none() && v.position == checked_from {
                v.position = len;
                v.next_offset = next_offset;
                self.verified_to.store(len, Ordering::Release);
            }
        }
        self.max_timestamp
            .fetch_max(max_timestamp, Ordering::AcqRel);
        self.next_offset.store(next_offset, Ordering::Release);
        self.published.store(len, Ordering::Release);
    }

    /// Shrinks the readable range (truncation); verified state follows.
    pub fn retract(&self, len: u64, next_offset: i64, max_timestamp: i64) {
        self.published.store(len, Ordering::Release);
        self.next_offset.store(next_offset, Ordering::Release);
        self.max_timestamp.store(max_timestamp, Ordering::Release);
        let mut v = lock(&self.verified);
        v.generation += 1;
        if v.position > len {
            v.position = 0;
            v.next_offset = self.base_offset;
            self.verified_to.store(0, Ordering::Release);
        }
        if v.damage.as_ref().is_some_and(|d| d.position >= len) {
            v.damage = None;
        }
    }

    /// Turns the active segment into a sealed one (mapped on next read).
    pub fn seal(&self) {
        let mut body = self.body.write().unwrap_or_else(|p| p.into_inner());
        *body = Body::Sealed(None);
    }
}
