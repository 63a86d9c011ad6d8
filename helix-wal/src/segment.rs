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

use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, RwLock};

use bytes::Bytes;
use memmap2::Mmap;

use crate::batch::{self, BatchHeader};
use crate::budget::{FileBudget, Mapped};
use crate::error::{Result, WalError};
use crate::index::SparseIndex;
use crate::source::{ActiveBody, SealedView, Source};
use crate::verify;

mod cleaned;

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

    pub fn is_mapped(&self) -> bool {
        matches!(
            &*self.body.read().unwrap_or_else(|p| p.into_inner()),
            Body::Sealed(Some(_))
        )
    }

    /// Drops the mapping of a sealed segment (the budget evicted it).
    pub fn unmap(&self) {
        let mut body = self.body.write().unwrap_or_else(|p| p.into_inner());
        if let Body::Sealed(view) = &mut *body {
            *view = None;
        }
    }

    fn source(self: &Arc<Self>, budget: &FileBudget) -> Result<Source> {
        self.last_used.store(budget.tick(), Ordering::Relaxed);
        {
            let body = self.body.read().unwrap_or_else(|p| p.into_inner());
            match &*body {
                Body::Active(a) => return Ok(Source::Active(a.clone())),
                Body::Sealed(Some(v)) => return Ok(Source::Sealed(v.clone())),
                Body::Sealed(None) => {}
            }
        }
        let view = {
            let mut body = self.body.write().unwrap_or_else(|p| p.into_inner());
            match &*body {
                Body::Active(a) => return Ok(Source::Active(a.clone())),
                Body::Sealed(Some(v)) => return Ok(Source::Sealed(v.clone())),
                Body::Sealed(None) => {}
            }
            let view = Arc::new(self.map()?);
            *body = Body::Sealed(Some(view.clone()));
            view
        };
        budget.register(self);
        Ok(Source::Sealed(view))
    }

    fn map(&self) -> Result<SealedView> {
        let len = self.len();
        let data = if len == 0 {
            Bytes::new()
        } else {
            let file =
                File::open(&self.log_path).map_err(|e| self.open_failed("open segment", e))?;
            // Opened by name after a swap renamed it: maybe the new file.
            if self.is_retired() {
                return Err(self.replaced());
            }
            let file_len = file
                .metadata()
                .map_err(|e| WalError::io("stat segment", &self.log_path, e))?
                .len();
            if file_len < len {
                return Err(WalError::Corrupt {
                    file: self.log_path.clone(),
                    position: file_len,
                    reason: format!("segment holds {file_len} bytes, its entries end at {len}"),
                });
            }
            // SAFETY: sealed segments are never modified in place: truncation
            // writes a new file and renames it over, retention unlinks. The
            // mapping therefore never shrinks under a reader.
            let map = unsafe { Mmap::map(&file) }
                .map_err(|e| WalError::io("map segment", &self.log_path, e))?;
            Bytes::from_owner(map).slice(0..len as usize)
        };
        let index = match SparseIndex::load(&self.dir, self.base_offset, None)? {
            Some(ix) => ix,
            None => {
                tracing::warn!(segment = %self.log_path.display(), "sparse index unreadable, rebuilding from batch headers");
                crate::index::build_index(&data, self.base_offset, self.index_interval)
            }
        };
        // The index, too, was opened by name.
        if self.is_retired() {
            return Err(self.replaced());
        }
        Ok(SealedView { data, index })
    }

    /// Reads whole batches starting with the one containing `from` (which
    /// must be ≥ the base offset), up to `max_bytes` but at least one batch.
    /// `None` when the segment holds nothing at or after `from`.
    pub fn read(
        self: &Arc<Self>,
        from: i64,
        max_bytes: usize,
        budget: &FileBudget,
    ) -> Result<Option<Chunk>> {
        let len = self.len();
        let src = self.source(budget)?;
        let Some((pos, first)) = self.find_batch(&src, from, len, |h| h.last_offset() >= from)?
        else {
            return Ok(None);
        };
        let want = (first.total_len() as u64).max(max_bytes as u64);
        let end_cap = len.min(pos + want);
        let chunk = src.load(pos, end_cap, &self.log_path)?;
        let mut taken = 0usize;
        let mut next = first.base_offset;
        for b in batch::Batches::new(&chunk) {
            let Ok((h, range)) = b else { break };
            if taken > 0 && range.end > max_bytes {
                break;
            }
            taken = range.end;
            next = h.next_offset();
        }
        if taken == 0 {
            return Err(self.corrupt(pos, "batch does not fit in the segment"));
        }
        let end = self.ensure_verified(&src, pos + taken as u64)?;
        if end <= pos {
            let d = self.damage().map(|d| d.position).unwrap_or(pos);
            return Err(self.corrupt(d, "range failed verification"));
        }
        if end < pos + taken as u64 {
            // Damage inside the chunk: serve the good batches before it.
            let keep = (end - pos) as usize;
            let mut next_ok = first.base_offset;
            for b in batch::Batches::new(&chunk[..keep]).flatten() {
                next_ok = b.0.next_offset();
            }
            return Ok(Some(Chunk {
                bytes: chunk.slice(0..keep),
                position: pos,
                first_offset: first.base_offset,
                next_offset: next_ok,
            }));
        }
        Ok(Some(Chunk {
            bytes: chunk.slice(0..taken),
            position: pos,
            first_offset: first.base_offset,
            next_offset: next,
        }))
    }

    /// The scrubber's read: like [`Segment::read`] (whole batches from the
    /// one holding `from`, about `max_bytes`), but every batch's CRC is
    /// checked again on the bytes as they are now, even where this process
    /// verified them before (stored bytes can rot after they were checked).
    /// A mismatch marks the segment damaged from that batch on and is
    /// returned as `Corrupt` with the batch's position.
    pub fn reverify(
        self: &Arc<Self>,
        from: i64,
        max_bytes: usize,
        budget: &FileBudget,
    ) -> Result<Option<Chunk>> {
        let Some(chunk) = self.read(from, max_bytes, budget)? else {
            return Ok(None);
        };
        for b in batch::Batches::new(&chunk.bytes) {
            let Ok((_, range)) = b else { break };
            if let Err(e) = batch::verify_crc(&chunk.bytes[range.clone()]) {
                let at = chunk.position + range.start as u64;
                let reason = format!("a batch fails its CRC when re-read: {e}");
                self.mark_damaged(at, &reason);
                return Err(self.corrupt(at, &reason));
            }
        }
        Ok(Some(chunk))
    }

    /// Bytes `[from, to)`, which must be whole batches (an entry's range),
    /// verified before they are returned.
    pub fn read_range(self: &Arc<Self>, from: u64, to: u64, budget: &FileBudget) -> Result<Bytes> {
        if to > self.len() {
            return Err(self.corrupt(to, "entry ends beyond the segment's data"));
        }
        if from == to {
            return Ok(Bytes::new());
        }
        let src = self.source(budget)?;
        let good = self.ensure_verified(&src, to)?;
        if good < to {
            let d = self.damage().map_or(good, |d| d.position);
            return Err(self.corrupt(d, "range failed verification"));
        }
        src.load(from, to, &self.log_path)
    }

    /// The base offset of the first batch whose max timestamp is ≥ `ts`;
    /// batches ending below `min_offset` (the log start) are skipped.
    pub fn offset_for_timestamp(
        self: &Arc<Self>,
        ts: i64,
        min_offset: i64,
        budget: &FileBudget,
    ) -> Result<Option<i64>> {
        if self.max_timestamp() < ts {
            return Ok(None);
        }
        let len = self.len();
        let src = self.source(budget)?;
        let start = src.with_index(|ix| ix.lookup_time(ts));
        let from = (self.base_offset + i64::from(start)).max(min_offset);
        // The whole segment is verified first (once per process): an answer
        // is given only from bytes before any damage, and "no match" only
        // when there is none. Lookups by time are rare; reads pay this too.
        let good = self.ensure_verified(&src, len)?;
        let refuse = || {
            let d = self.damage().map_or(good, |d| d.position);
            Err(self.corrupt(d, "range failed verification"))
        };
        let found = if good < len {
            // Only the verified prefix can be walked.
            self.find_batch(&src, from, good, |h| {
                h.last_offset() >= from && h.max_timestamp >= ts
            })?
        } else {
            self.find_batch(&src, from, len, |h| {
                h.last_offset() >= from && h.max_timestamp >= ts
            })?
        };
        match found {
            Some((_, h)) => Ok(Some(h.base_offset)),
            None if good < len => refuse(),
            None => Ok(None),
        }
    }

    /// Walks batch headers from the index entry at or below `from` to the
    /// first batch satisfying `hit`.
    fn find_batch(
        &self,
        src: &Source,
        from: i64,
        len: u64,
        hit: impl Fn(&BatchHeader) -> bool,
    ) -> Result<Option<(u64, BatchHeader)>> {
        // Below the base: from the start; beyond u32: from the last entry.
        let rel = u32::try_from((from - self.base_offset).max(0)).unwrap_or(u32::MAX);
        let mut pos = u64::from(src.with_index(|ix| ix.lookup_position(rel)));
        while pos < len {
            let h = src.header(pos, len, &self.log_path)?;
            let h = match h {
                Some(h) if h.validate((len - pos) as usize).is_ok() => h,
                _ => return Err(self.corrupt(pos, "unreadable batch header")),
            };
            if hit(&h) {
                return Ok(Some((pos, h)));
            }
            pos += h.total_len() as u64;
        }
        Ok(None)
    }

    /// Verifies bytes up to at least `upto` (a batch end). Returns how far the
    /// good prefix reaches (≥ `upto` unless damage was found before it).
    fn ensure_verified(&self, src: &Source, upto: u64) -> Result<u64> {
        if self.may_have_gaps() {
            return self.ensure_cleaned_verified(src, upto);
        }
        loop {
            if self.verified_to.load(Ordering::Acquire) >= upto {
                return Ok(upto);
            }
            // Snapshot, then verify without the lock: the writer publishes
            // through the same lock on every append and must not wait for a
            // reader checking a large recovered range.
            let (position, next_offset, generation) = {
                let v = lock(&self.verified);
                if let Some(d) = &v.damage {
                    return Ok(d.position.min(upto));
                }
                if v.position >= upto {
                    return Ok(upto);
                }
                (v.position, v.next_offset, v.generation)
            };
            let len = self.len();
            let mut chunk_end = len.min(position + SCAN_CHUNK);
            if let Some(h) = src.header(position, len, &self.log_path)?
                && h.batch_length >= batch::MIN_BATCH_LENGTH
            {
                chunk_end = chunk_end.max(len.min(position + h.total_len() as u64));
            }
            let chunk = src.load(position, chunk_end, &self.log_path)?;
            let gaps = self.may_have_gaps();
            let outcome = verify::chunk(&chunk, next_offset, upto - position, gaps);
            let mut v = lock(&self.verified);
            if v.position != position || v.generation != generation || v.damage.is_some() {
                continue; // someone else moved it (or a truncation reset it)
            }
            match outcome {
                verify::Outcome::Good { bytes, next_offset } => {
                    v.position += bytes;
                    v.next_offset = next_offset;
                    self.verified_to.store(v.position, Ordering::Release);
                }
                verify::Outcome::Bad { at, reason } => {
                    let position = position + at;
                    tracing::error!(file = %self.log_path.display(), position, %reason,
                        "stored batch failed verification; refusing to serve from here");
                    v.position = position;
                    v.damage = Some(Damage { position, reason });
                    self.verified_to.store(position, Ordering::Release);
                    return Ok(position.min(upto));
                }
            }
        }
    }

    fn corrupt(&self, position: u64, reason: &str) -> WalError {
        WalError::Corrupt {
            file: self.log_path.clone(),
            position,
            reason: reason.into(),
        }
    }
}

impl Mapped for Segment {
    fn is_mapped(&self) -> bool {
        Segment::is_mapped(self)
    }

    fn last_used(&self) -> u64 {
        Segment::last_used(self)
    }

    fn unmap(&self) {
        Segment::unmap(self)
    }
}
