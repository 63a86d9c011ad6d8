//! Writing a cleaned segment beside the live ones (ADR 0027 §4-§5): the
//! four `<base>.<ext>.cleaned` files that `compaction::commit_swap` then
//! swaps in. The cleaner hands it, entry by entry in Raft order, the
//! cleaned batches of each entry of the segments it replaces.
//!
//! What stays true of the written segment:
//! - one entry record per Raft entry of the old segments, same term,
//!   index, first and next offset; position and length point into the new
//!   `.log` (length 0 for an entry whose batches all went), the header
//!   checksum is computed over the cleaned batches;
//! - inside an entry, batch base offsets are strictly increasing, each at
//!   or after the previous batch's next offset, all inside the entry's
//!   `[first_offset, next_offset)`; entries continue each other's offsets;
//! - the sparse indexes are rebuilt with the log's `index_interval_bytes`,
//!   the last time entry holding the segment's max timestamp, as `seal`
//!   writes them.
//!
//! Nothing calls it yet outside tests (ADR 0027, step 2).
#![cfg_attr(not(test), allow(dead_code))]

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};

use crate::batch::{BatchHeader, Batches};
use crate::compaction::{SwapIntent, cleaned_path};
use crate::entry_index::{self, EntryRecord};
use crate::error::{Result, WalError};
use crate::index::{IndexBuilder, SparseIndex, TimeEntry};
use crate::types::RaftPosition;

/// The files of one cleaned segment being written.
pub struct SegmentRewrite {
    dir: PathBuf,
    base: i64,
    log: File,
    /// Cleaned bytes not yet written to `log`: at most
    /// `write_buffer_bytes` (`log.cleaner.io.buffer.size`'s write half,
    /// Kafka's write buffer); an entry larger than that is written
    /// straight from the caller's bytes, so nothing grows past it.
    write_buffer: Vec<u8>,
    write_buffer_bytes: usize,
    /// Encoded entry records, written at `finish` (a segment's entry index
    /// is small: 48 bytes per Raft entry).
    entries: Vec<u8>,
    index: SparseIndex,
    builder: IndexBuilder,
    position: u64,
    max_timestamp: i64,
    last_batch_rel: Option<u32>,
    last: Option<EntryRecord>,
}

fn invalid(path: &Path, why: String) -> WalError {
    WalError::io(
        "write cleaned segment",
        path,
        std::io::Error::new(std::io::ErrorKind::InvalidInput, why),
    )
}

impl SegmentRewrite {
    /// Starts `<base>.*.cleaned` in `dir`, replacing any left by an
    /// abandoned pass.
    pub fn create(dir: &Path, base: i64, index_interval_bytes: u64) -> Result<SegmentRewrite> {
        let path = cleaned_path(dir, base, "log");
        let log = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .open(&path)
            .map_err(|e| WalError::io("create", &path, e))?;
        Ok(SegmentRewrite {
            dir: dir.to_path_buf(),
            base,
            log,
            write_buffer: Vec::new(),
            write_buffer_bytes: 0,
            entries: Vec::new(),
            index: SparseIndex::default(),
            builder: IndexBuilder::new(index_interval_bytes),
            position: 0,
            max_timestamp: i64::MIN,
            last_batch_rel: None,
            last: None,
        })
    }

    /// Gathers up to `bytes` of cleaned batches before each write (0:
    /// one write per entry).
    pub fn with_write_buffer(mut self, bytes: usize) -> SegmentRewrite {
        self.write_buffer = Vec::with_capacity(bytes);
        self.write_buffer_bytes = bytes;
        self
    }

    fn write(&mut self, bytes: &[u8]) -> Result<()> {
        if self.write_buffer.len() + bytes.len() > self.write_buffer_bytes {
            self.flush()?;
        }
        if bytes.len() > self.write_buffer_bytes {
            let path = cleaned_path(&self.dir, self.base, "log");
            return self
                .log
                .write_all(bytes)
                .map_err(|e| WalError::io("write", &path, e));
        }
        self.write_buffer.extend_from_slice(bytes);
        Ok(())
    }

    fn flush(&mut self) -> Result<()> {
        if self.write_buffer.is_empty() {
            return Ok(());
        }
        let path = cleaned_path(&self.dir, self.base, "log");
        self.log
            .write_all(&self.write_buffer)
            .map_err(|e| WalError::io("write", &path, e))?;
        self.write_buffer.clear();
        Ok(())
    }

    /// Appends the Raft entry `pos`, covering offsets `[first_offset,
    /// next_offset)`, with `batches` (its cleaned batches, back to back;
    /// empty when all went).
    pub fn push_entry(
        &mut self,
        pos: RaftPosition,
        first_offset: i64,
        next_offset: i64,
        batches: &[u8],
    ) -> Result<()> {
        let path = cleaned_path(&self.dir, self.base, "log");
        match self.last {
            None if first_offset != self.base => {
                return Err(invalid(
                    &path,
                    format!(
                        "first entry at offset {first_offset}, segment base {}",
                        self.base
                    ),
                ));
            }
            Some(prev)
                if pos.index != prev.pos.index + 1
                    || pos.term < prev.pos.term
                    || first_offset != prev.next_offset =>
            {
                return Err(invalid(
                    &path,
                    format!(
                        "entry {pos:?} at offset {first_offset} does not follow {:?} ending at {}",
                        prev.pos, prev.next_offset
                    ),
                ));
            }
            _ => {}
        }
        if next_offset < first_offset {
            return Err(invalid(
                &path,
                format!("entry range {first_offset}..{next_offset}"),
            ));
        }
        let mut starts = Vec::new();
        let mut expected = first_offset;
        let mut headers: Vec<(BatchHeader, u64)> = Vec::new();
        for b in Batches::new(batches) {
            let (h, range) = b.map_err(|e| invalid(&path, e.to_string()))?;
            if h.base_offset < expected || h.next_offset() > next_offset {
                return Err(invalid(
                    &path,
                    format!(
                        "batch {}..{} outside entry {first_offset}..{next_offset} or out of order",
                        h.base_offset,
                        h.next_offset()
                    ),
                ));
            }
            expected = h.next_offset();
            starts.push(range.start);
            headers.push((h, self.position + range.start as u64));
        }
        let length = u32::try_from(batches.len())
            .map_err(|_| invalid(&path, "entry larger than 4 GiB".into()))?;
        let position = u32::try_from(self.position)
            .ok()
            .filter(|p| p.checked_add(length).is_some())
            .ok_or_else(|| invalid(&path, "segment larger than 4 GiB".into()))?;
        self.write(batches)?;
        debug_assert!(self.write_buffer.len() <= self.write_buffer_bytes);
        for (h, at) in &headers {
            if let Some((o, t)) = self.builder.add(self.base, h, *at) {
                self.index.offsets.push(o);
                self.index.times.push(t);
            }
            self.max_timestamp = self.max_timestamp.max(h.max_timestamp);
            self.last_batch_rel = Some((h.base_offset - self.base) as u32);
        }
        let record = EntryRecord {
            pos,
            first_offset,
            next_offset,
            position,
            length,
            header_sum: entry_index::header_sum(batches, starts.into_iter()),
        };
        self.entries.extend_from_slice(&record.encode());
        self.position += u64::from(length);
        self.last = Some(record);
        Ok(())
    }

    /// Writes the entry and sparse indexes, fsyncs the four files and
    /// returns the intent that swaps them in for `old_bases`.
    pub fn finish(mut self, old_bases: Vec<i64>) -> Result<SwapIntent> {
        self.flush()?;
        if let Some(rel) = self.last_batch_rel
            && self
                .index
                .times
                .last()
                .is_none_or(|t| t.timestamp < self.max_timestamp)
        {
            self.index.times.push(TimeEntry {
                timestamp: self.max_timestamp,
                relative_offset: rel,
            });
        }
        let entries = cleaned_path(&self.dir, self.base, "entries");
        let offsets = cleaned_path(&self.dir, self.base, "index");
        let times = cleaned_path(&self.dir, self.base, "timeindex");
        std::fs::write(&entries, &self.entries).map_err(|e| WalError::io("write", &entries, e))?;
        for path in [&offsets, &times] {
            File::create(path).map_err(|e| WalError::io("create", path, e))?;
        }
        self.index.write_to(&offsets, &times)?;
        let log = cleaned_path(&self.dir, self.base, "log");
        self.log
            .sync_all()
            .map_err(|e| WalError::io("fsync", &log, e))?;
        for path in [&entries, &offsets, &times] {
            File::open(path)
                .and_then(|f| f.sync_all())
                .map_err(|e| WalError::io("fsync", path, e))?;
        }
        Ok(SwapIntent {
            new_base: self.base,
            log_len: self.position,
            entries_len: self.entries.len() as u64,
            old_bases,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::batch::build_test_batch;
    use crate::compaction::{commit_swap, live_path};
    use crate::entry_index::RECORD_LEN;

    fn pos(term: u64, index: u64) -> RaftPosition {
        RaftPosition { term, index }
    }

    #[test]
    fn a_cleaned_segment_keeps_every_entry_and_its_offsets_with_gaps() {
        let dir = tempfile::tempdir().unwrap();
        let mut w = SegmentRewrite::create(dir.path(), 100, 1).unwrap();
        // Entry 7 kept one of its batches (104 went), entry 8 lost all of
        // its batches, entry 9 kept its one.
        let mut e7 = build_test_batch(100, 4, 1000, 1003, b"aaaa");
        e7.extend(build_test_batch(106, 2, 1006, 1007, b"bb"));
        w.push_entry(pos(2, 7), 100, 108, &e7).unwrap();
        w.push_entry(pos(2, 8), 108, 110, &[]).unwrap();
        let e9 = build_test_batch(110, 1, 1010, 1010, b"c");
        w.push_entry(pos(3, 9), 110, 111, &e9).unwrap();
        let intent = w.finish(vec![100, 150]).unwrap();
        assert_eq!(intent.new_base, 100);
        assert_eq!(intent.log_len, (e7.len() + e9.len()) as u64);
        assert_eq!(intent.entries_len, 3 * RECORD_LEN as u64);

        let raw = std::fs::read(cleaned_path(dir.path(), 100, "entries")).unwrap();
        let records: Vec<EntryRecord> = raw
            .chunks_exact(RECORD_LEN)
            .map(|r| EntryRecord::decode(r).unwrap())
            .collect();
        let summary: Vec<_> = records
            .iter()
            .map(|r| (r.pos, r.first_offset, r.next_offset, r.position, r.length))
            .collect();
        let e7_len = e7.len() as u32;
        assert_eq!(
            summary,
            vec![
                (pos(2, 7), 100, 108, 0, e7_len),
                (pos(2, 8), 108, 110, e7_len, 0),
                (pos(3, 9), 110, 111, e7_len, e9.len() as u32),
            ]
        );
        let ix = SparseIndex::load(dir.path(), 100, None).unwrap();
        assert!(ix.is_none(), "the live index is not written");
        // Swapped in, the indexes load and point at the kept batches.
        std::fs::write(live_path(dir.path(), 100, "log"), b"old").unwrap();
        for ext in ["entries", "index", "timeindex"] {
            std::fs::write(live_path(dir.path(), 100, ext), b"old").unwrap();
        }
        commit_swap(dir.path(), &intent).unwrap();
        let ix = SparseIndex::load(dir.path(), 100, None).unwrap().unwrap();
        let offsets: Vec<_> = ix
            .offsets
            .iter()
            .map(|o| (o.relative_offset, o.position))
            .collect();
        let first = build_test_batch(100, 4, 1000, 1003, b"aaaa").len() as u32;
        assert_eq!(offsets, vec![(0, 0), (6, first), (10, e7_len)]);
        assert_eq!(ix.times.last().unwrap().timestamp, 1010);
    }

    #[test]
    fn batches_outside_their_entry_or_entries_out_of_order_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let mut w = SegmentRewrite::create(dir.path(), 0, 4096).unwrap();
        assert!(w.push_entry(pos(1, 1), 5, 6, &[]).is_err(), "not at base");
        let b = build_test_batch(3, 1, 0, 0, b"x");
        assert!(w.push_entry(pos(1, 1), 0, 3, &b).is_err(), "past the entry");
        w.push_entry(pos(1, 1), 0, 4, &b).unwrap();
        assert!(w.push_entry(pos(1, 3), 4, 5, &[]).is_err(), "index gap");
        assert!(w.push_entry(pos(1, 2), 5, 6, &[]).is_err(), "offset gap");
        assert!(
            w.push_entry(pos(0, 2), 4, 5, &[]).is_err(),
            "term went back"
        );
        let mut twice = build_test_batch(4, 1, 0, 0, b"y");
        twice.extend(build_test_batch(4, 1, 0, 0, b"y"));
        assert!(w.push_entry(pos(1, 2), 4, 6, &twice).is_err(), "overlap");
        w.push_entry(pos(1, 2), 4, 6, &twice[..twice.len() / 2])
            .unwrap();
    }

    #[test]
    fn the_write_buffer_stays_within_its_bound_and_writes_the_same_bytes() {
        // Entries smaller and larger than the buffer, and empty ones.
        let entries: Vec<Vec<u8>> = (0..40u8)
            .map(|i| {
                let body = vec![i; usize::from(i % 7) * 90];
                if i % 5 == 4 {
                    Vec::new()
                } else {
                    build_test_batch(i64::from(i), 1, 0, 0, &body)
                }
            })
            .collect();
        let write = |buffer: usize| {
            let dir = tempfile::tempdir().unwrap();
            let mut w = SegmentRewrite::create(dir.path(), 0, 4096)
                .unwrap()
                .with_write_buffer(buffer);
            for (i, e) in entries.iter().enumerate() {
                let i = i as u64;
                w.push_entry(pos(1, i + 1), i as i64, i as i64 + 1, e)
                    .unwrap();
                assert!(w.write_buffer.len() <= buffer);
                assert!(w.write_buffer.capacity() <= buffer.max(1) * 2);
            }
            let intent = w.finish(vec![0]).unwrap();
            let log = std::fs::read(cleaned_path(dir.path(), 0, "log")).unwrap();
            let index = std::fs::read(cleaned_path(dir.path(), 0, "entries")).unwrap();
            (intent.log_len, log, index)
        };
        let unbuffered = write(0);
        assert_eq!(unbuffered.0, unbuffered.1.len() as u64);
        for buffer in [1, 300, 1000, 64 << 10] {
            assert_eq!(write(buffer), unbuffered, "write buffer {buffer}");
        }
    }
}
