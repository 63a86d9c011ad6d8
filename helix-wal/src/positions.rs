//! Raft-position lookups over the segments' entry indexes: the term of an
//! index, the end of a term (OffsetForLeaderEpoch), and the entry stream that
//! serves Raft catch-up from the WAL.
//!
//! Entry records are contiguous in Raft index across the whole log, so the
//! record of index `i` is found by arithmetic, and a term's end by a binary
//! search over records whose terms never decrease.

use std::fs::File;
use std::path::PathBuf;
use std::sync::Arc;

use bytes::Bytes;

use crate::entry_index::{self, EntryRecord};
use crate::error::{Result, WalError};
use crate::segment::Segment;
use crate::shared::Shared;
use crate::types::{EpochEnd, RaftPosition, StoredEntry};

/// An open entry index of one segment, read with `pread`.
struct EntryFile {
    path: PathBuf,
    file: File,
    first_index: u64,
    count: u64,
}

impl EntryFile {
    fn open(seg: &Segment) -> Result<Option<EntryFile>> {
        let Some((first_index, count)) = seg.entries() else {
            return Ok(None);
        };
        let path = entry_index::path_for(seg.dir(), seg.base_offset);
        let file = File::open(&path).map_err(|e| match seg.open_failed("open entry index", e) {
            WalError::Io { op, source, .. } => WalError::Io {
                op,
                path: path.clone(),
                source,
            },
            other => other,
        })?;
        // Opened by name after a compaction swap: maybe the new segment's.
        if seg.is_retired() {
            return Err(seg.replaced());
        }
        Ok(Some(EntryFile {
            path,
            file,
            first_index,
            count,
        }))
    }

    fn slot(&self, slot: u64) -> Result<EntryRecord> {
        let r = entry_index::read_required(&self.file, &self.path, slot)?;
        if r.pos.index != self.first_index + slot {
            return Err(WalError::Corrupt {
                file: self.path.clone(),
                position: slot * entry_index::RECORD_LEN as u64,
                reason: format!(
                    "entry record holds index {} where {} was expected",
                    r.pos.index,
                    self.first_index + slot
                ),
            });
        }
        Ok(r)
    }
}

/// The segment holding entry `index`, if any.
fn segment_of(segments: &[Arc<Segment>], index: u64) -> Option<&Arc<Segment>> {
    segments.iter().rev().find(|s| {
        s.entries()
            .is_some_and(|(first, count)| index >= first && index < first + count)
    })
}

pub fn term_of(segments: &[Arc<Segment>], index: u64) -> Result<Option<u64>> {
    let Some(seg) = segment_of(segments, index) else {
        return Ok(None);
    };
    let Some(f) = EntryFile::open(seg)? else {
        return Ok(None);
    };
    Ok(Some(f.slot(index - f.first_index)?.pos.term))
}

/// Reads the record of entry `index`.
pub fn record_of(
    segments: &[Arc<Segment>],
    index: u64,
) -> Result<Option<(Arc<Segment>, EntryRecord)>> {
    let Some(seg) = segment_of(segments, index) else {
        return Ok(None);
    };
    let Some(f) = EntryFile::open(seg)? else {
        return Ok(None);
    };
    Ok(Some((seg.clone(), f.slot(index - f.first_index)?)))
}

pub fn end_offset_for_term(
    segments: &[Arc<Segment>],
    term: u64,
    log_next_offset: i64,
) -> Result<Option<EpochEnd>> {
    // The last segment whose first entry's term is ≤ `term`.
    let mut chosen = None;
    for (i, seg) in segments.iter().enumerate() {
        let Some(f) = EntryFile::open(seg)? else {
            continue;
        };
        if f.slot(0)?.pos.term <= term {
            chosen = Some((i, f));
        } else {
            break;
        }
    }
    let Some((i, f)) = chosen else {
        return Ok(None);
    };
    // Binary search for the last slot with term ≤ `term`.
    let (mut lo, mut hi) = (0u64, f.count);
    while hi - lo > 1 {
        let mid = lo + (hi - lo) / 2;
        if f.slot(mid)?.pos.term <= term {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    let found = f.slot(lo)?;
    let end_offset = if lo + 1 < f.count {
        f.slot(lo + 1)?.first_offset
    } else {
        match segments[i + 1..]
            .iter()
            .find_map(|s| s.entries().map(|_| s))
        {
            Some(next) => match EntryFile::open(next)? {
                Some(nf) => nf.slot(0)?.first_offset,
                None => log_next_offset,
            },
            None => log_next_offset,
        }
    };
    Ok(Some(EpochEnd {
        term: found.pos.term,
        end_offset,
    }))
}

/// For every term the log holds, the first index holding it, ascending
/// (what a restarted Raft replica needs to know the term of any WAL index).
/// Terms never decrease along the log, so each segment is searched by
/// bisection: a few record reads per term change, not one per entry.
pub fn term_starts(segments: &[Arc<Segment>]) -> Result<Vec<RaftPosition>> {
    let mut starts: Vec<RaftPosition> = Vec::new();
    for seg in segments {
        let Some(f) = EntryFile::open(seg)? else {
            continue;
        };
        let first = f.slot(0)?;
        let last = f.slot(f.count - 1)?;
        if starts.last().is_none_or(|s| s.term < first.pos.term) {
            starts.push(first.pos);
        }
        f.term_changes(0, first.pos.term, f.count - 1, last.pos.term, &mut starts)?;
    }
    Ok(starts)
}

impl EntryFile {
    /// Pushes the first position of every term that begins strictly after
    /// slot `lo` (of term `lo_term`) up to slot `hi` (of term `hi_term`).
    fn term_changes(
        &self,
        lo: u64,
        lo_term: u64,
        hi: u64,
        hi_term: u64,
        out: &mut Vec<RaftPosition>,
    ) -> Result<()> {
        if lo_term == hi_term {
            return Ok(());
        }
        if hi == lo + 1 {
            out.push(self.slot(hi)?.pos);
            return Ok(());
        }
        let mid = lo + (hi - lo) / 2;
        let mid_term = self.slot(mid)?.pos.term;
        self.term_changes(lo, lo_term, mid, mid_term, out)?;
        self.term_changes(mid, mid_term, hi, hi_term, out)
    }
}

/// Streams entries `(position, batches)` from a Raft index on, one at a time.
pub struct EntryStream {
    shared: Arc<Shared>,
    next_index: u64,
    current: Option<(Arc<Segment>, EntryFile)>,
    done: bool,
}

impl EntryStream {
    pub(crate) fn new(shared: Arc<Shared>, from_index: u64) -> Self {
        EntryStream {
            shared,
            next_index: from_index,
            current: None,
            done: false,
        }
    }

    /// The next entry with its offset range: what a compacting cleaner and
    /// a catch-up from a cleaned segment need, since an entry's batches
    /// may no longer cover its range (or be none at all; ADR 0027).
    pub fn next_stored(&mut self) -> Option<Result<StoredEntry>> {
        if self.done {
            return None;
        }
        match self.step() {
            Ok(Some(x)) => Some(Ok(x)),
            Ok(None) => {
                self.done = true;
                None
            }
            Err(e) => {
                self.done = true;
                Some(Err(e))
            }
        }
    }

    fn step(&mut self) -> Result<Option<StoredEntry>> {
        let mut attempts = 0;
        loop {
            match self.step_once() {
                // A compaction swap replaced the segment being streamed:
                // the same entry is in its replacement.
                Err(WalError::SegmentReplaced { .. }) if crate::shared::reread(attempts) => {
                    self.current = None;
                    attempts += 1;
                }
                other => return other,
            }
        }
    }

    fn step_once(&mut self) -> Result<Option<StoredEntry>> {
        let index = self.next_index;
        let in_current = self
            .current
            .as_ref()
            .is_some_and(|(_, f)| index >= f.first_index && index < f.first_index + f.count);
        if !in_current {
            let segments = self.shared.snapshot();
            let Some(seg) = segment_of(&segments, index) else {
                let first = segments.iter().find_map(|s| s.entries()).map(|e| e.0);
                if let Some(first) = first
                    && index < first
                {
                    return Err(WalError::EntryNotHeld {
                        index,
                        first_index: first,
                    });
                }
                return Ok(None);
            };
            let Some(f) = EntryFile::open(seg)? else {
                return Ok(None);
            };
            self.current = Some((seg.clone(), f));
        }
        let Some((seg, f)) = &self.current else {
            return Ok(None);
        };
        let r = f.slot(index - f.first_index)?;
        let bytes = seg.read_range(u64::from(r.position), r.end(), &self.shared.budget)?;
        self.next_index += 1;
        Ok(Some(StoredEntry {
            pos: r.pos,
            first_offset: r.first_offset,
            next_offset: r.next_offset,
            batches: bytes,
        }))
    }
}

impl Iterator for EntryStream {
    type Item = Result<(RaftPosition, Bytes)>;

    fn next(&mut self) -> Option<Self::Item> {
        self.next_stored().map(|r| r.map(|e| (e.pos, e.batches)))
    }
}
