//! The active segment as its single writer sees it: the log file it appends
//! to, the memory-mapped entry index, the sparse index being built, and the
//! bookkeeping to publish each entry to readers only once it is whole.

use std::fs::{File, OpenOptions};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};
use std::time::Instant;

use crate::batch::BatchHeader;
use crate::entry_index::{self, EntryIndexWriter, EntryRecord};
use crate::error::{Result, WalError};
use crate::fault::{self, Point};
use crate::index::IndexBuilder;
use crate::index::{self, SparseIndex, TimeEntry};
use crate::segment::{self, Segment, SegmentState};
use crate::source::ActiveBody;
use crate::types::RaftPosition;

/// Where an active segment resumes after recovery.
#[derive(Debug, Clone)]
pub struct Resume {
    pub size: u64,
    pub next_offset: i64,
    pub max_timestamp: i64,
    pub first_index: Option<u64>,
    pub entry_count: u64,
    pub index: SparseIndex,
    /// Sparse index records already on disk.
    pub persisted: (usize, usize),
    pub verified: (u64, i64),
    /// Relative offset of the last batch (for the seal-time time entry).
    pub last_batch_rel: Option<u32>,
}

pub struct ActiveSegment {
    pub seg: Arc<Segment>,
    pub file: Arc<File>,
    pub entries: EntryIndexWriter,
    pub index: Arc<RwLock<SparseIndex>>,
    dir: PathBuf,
    interval: u64,
    builder: IndexBuilder,
    pub size: u64,
    pub next_offset: i64,
    pub max_timestamp: i64,
    pub first_index: Option<u64>,
    last_batch_rel: Option<u32>,
    persisted: (usize, usize),
    pub opened_at: Instant,
    /// A failed write could not be rolled back: the file may hold bytes past
    /// `size`. No further appends until reopen (recovery cuts them).
    pub poisoned: bool,
}

impl ActiveSegment {
    /// Creates the files of a new, empty segment.
    pub fn create(dir: &Path, base: i64, interval: u64) -> Result<ActiveSegment> {
        let log = segment::log_path(dir, base);
        fault::hit(&log, Point::Roll).map_err(|e| WalError::io("create segment", &log, e))?;
        let resume = Resume {
            size: 0,
            next_offset: base,
            max_timestamp: i64::MIN,
            first_index: None,
            entry_count: 0,
            index: SparseIndex::default(),
            persisted: (0, 0),
            verified: (0, base),
            last_batch_rel: None,
        };
        index::trim_files(dir, base, 0, 0)?;
        Self::open(dir, base, interval, resume)
    }

    /// Opens an existing segment for appending at `resume.size`.
    pub fn open(dir: &Path, base: i64, interval: u64, r: Resume) -> Result<ActiveSegment> {
        let log = segment::log_path(dir, base);
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&log)
            .map_err(|e| WalError::io("open segment", &log, e))?;
        file.set_len(r.size)
            .map_err(|e| WalError::io("truncate segment", &log, e))?;
        let file = Arc::new(file);
        let entries = EntryIndexWriter::open(&entry_index::path_for(dir, base), r.entry_count)?;
        let builder = IndexBuilder::resume(interval, &r.index, r.size, r.max_timestamp);
        let index = Arc::new(RwLock::new(r.index));
        let body = ActiveBody::new(file.clone(), &log, index.clone())?;
        let seg = Arc::new(Segment::new(
            dir,
            base,
            interval,
            Some(body),
            SegmentState {
                len: r.size,
                next_offset: r.next_offset,
                max_timestamp: r.max_timestamp,
                verified: r.verified,
                entries: r.first_index.map(|f| (f, r.entry_count)),
            },
        ));
        Ok(ActiveSegment {
            seg,
            file,
            entries,
            index,
            dir: dir.to_path_buf(),
            interval,
            builder,
            size: r.size,
            next_offset: r.next_offset,
            max_timestamp: r.max_timestamp,
            first_index: r.first_index.filter(|_| r.entry_count > 0),
            last_batch_rel: r.last_batch_rel,
            persisted: r.persisted,
            opened_at: Instant::now(),
            poisoned: false,
        })
    }

    pub fn base(&self) -> i64 {
        self.seg.base_offset
    }

    /// Appends one entry whose batches were validated by the caller
    /// (`headers` holds each batch's header and position within `batches`).
    /// On failure nothing is published and the file is rolled back.
    pub fn write_entry(
        &mut self,
        pos: RaftPosition,
        batches: &[u8],
        headers: &[(BatchHeader, usize)],
        next_offset: i64,
        max_timestamp: i64,
    ) -> Result<EntryRecord> {
        let position = self.size;
        let record = EntryRecord {
            pos,
            first_offset: self.next_offset,
            next_offset,
            position: position as u32,
            length: batches.len() as u32,
            header_sum: entry_index::header_sum(batches, headers.iter().map(|(_, at)| *at)),
        };
        if !batches.is_empty()
            && let Err(e) = self.write_at(batches, position)
        {
            self.roll_back(position);
            return Err(e);
        }
        if let Err(e) = self.entries.push(&record) {
            self.roll_back(position);
            return Err(e);
        }
        // Sparse index records due: published under one lock taken only
        // when there is one, with no per-append allocation.
        let base = self.base();
        let mut ix = None;
        for (h, at) in headers {
            if let Some((o, t)) = self.builder.add(base, h, position + *at as u64) {
                let ix =
                    ix.get_or_insert_with(|| self.index.write().unwrap_or_else(|p| p.into_inner()));
                ix.offsets.push(o);
                ix.times.push(t);
            }
        }
        drop(ix);
        if let Some((h, _)) = headers.last() {
            self.last_batch_rel = Some((h.base_offset - self.base()) as u32);
        }
        let first_index = *self.first_index.get_or_insert(pos.index);
        self.size += batches.len() as u64;
        self.next_offset = next_offset;
        self.max_timestamp = self.max_timestamp.max(max_timestamp);
        self.seg
            .publish(self.size, next_offset, self.max_timestamp, position);
        self.seg.publish_entries(first_index, self.entries.count());
        Ok(record)
    }

    fn write_at(&self, bytes: &[u8], position: u64) -> Result<()> {
        let path = self.seg.log_path();
        if let Err(e) = fault::hit(path, Point::LogWrite) {
            // Simulate a write that got half way before the disk refused.
            let _ = self.file.write_all_at(&bytes[..bytes.len() / 2], position);
            return Err(WalError::io("write segment", path, e));
        }
        self.file
            .write_all_at(bytes, position)
            .map_err(|e| WalError::io("write segment", path, e))
    }

    fn roll_back(&mut self, position: u64) {
        let path = self.seg.log_path().to_path_buf();
        let undone = fault::hit(&path, Point::Rollback).and_then(|()| self.file.set_len(position));
        if let Err(e) = undone {
            tracing::error!(file = %path.display(), error = %e, "could not roll back a failed append; the log accepts no more writes until reopened");
            self.poisoned = true;
        }
    }

    /// After the segment was cut: the index builder restarts from what is
    /// left, and every index record is rewritten at the next persist.
    pub fn reset_index_state(&mut self) {
        let ix = self.index.read().unwrap_or_else(|p| p.into_inner()).clone();
        self.builder = IndexBuilder::resume(self.interval, &ix, self.size, self.max_timestamp);
        self.last_batch_rel = ix.offsets.last().map(|o| o.relative_offset);
        self.persisted = (0, 0);
    }

    /// Writes sparse index records not yet on disk; returns the counts that
    /// describe bytes before `position` (all when `None`).
    pub fn persist_index(&mut self, position: Option<u64>) -> Result<(usize, usize)> {
        let ix = self.index.read().unwrap_or_else(|p| p.into_inner()).clone();
        ix.write_from(&self.dir, self.base(), self.persisted.0, self.persisted.1)?;
        self.persisted = (ix.offsets.len(), ix.times.len());
        Ok(match position {
            None => self.persisted,
            Some(p) => {
                let n = ix.offsets.partition_point(|e| u64::from(e.position) < p);
                // Offset and time entries are added together until sealing.
                (n, n.min(ix.times.len()))
            }
        })
    }

    /// Finishes the segment: final time entry, index files and a trimmed
    /// entry index written. The caller syncs first when durability needs it.
    /// With `durable`, the index files and the trimmed entry index are
    /// fsynced too (`Fsync` mode: once per segment).
    pub fn seal(mut self, durable: bool) -> Result<Arc<Segment>> {
        if let Some(rel) = self.last_batch_rel {
            let mut ix = self.index.write().unwrap_or_else(|p| p.into_inner());
            if ix
                .times
                .last()
                .is_none_or(|t| t.timestamp < self.max_timestamp)
            {
                ix.times.push(TimeEntry {
                    timestamp: self.max_timestamp,
                    relative_offset: rel,
                });
            }
        }
        let (offsets, times) = self.persist_index(None)?;
        index::trim_files(&self.dir, self.base(), offsets, times)?;
        let ActiveSegment {
            seg, entries, dir, ..
        } = self;
        let base = seg.base_offset;
        entries.seal()?;
        if durable {
            for path in [
                index::offset_path(&dir, base),
                index::time_path(&dir, base),
                entry_index::path_for(&dir, base),
            ] {
                std::fs::File::open(&path)
                    .and_then(|f| f.sync_all())
                    .map_err(|e| WalError::io("fsync", &path, e))?;
            }
        }
        seg.seal();
        Ok(seg)
    }

    /// Fsyncs the log data and entry index.
    pub fn sync(&self) -> Result<()> {
        let path = self.seg.log_path();
        fault::hit(path, Point::Sync).map_err(|e| WalError::io("fsync segment", path, e))?;
        self.file
            .sync_data()
            .map_err(|e| WalError::io("fsync segment", path, e))?;
        self.entries.sync()
    }
}
