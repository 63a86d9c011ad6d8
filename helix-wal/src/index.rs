//! Sparse per-segment indexes: offset → file position and max timestamp →
//! offset, one entry per `index_interval_bytes` of batches.
//!
//! In memory they are sorted vectors searched by binary search. On disk each
//! record carries a crc32fast checksum; records are written in bulk at
//! checkpoints and when a segment is sealed, never per append. A file that
//! fails its checks is rebuilt from the segment's batch headers.

use std::fs::{File, OpenOptions};
use std::io::Read;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use crate::batch::{self, BatchHeader};
use crate::error::{Result, WalError};

/// `(offset relative to the segment base, byte position)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OffsetEntry {
    pub relative_offset: u32,
    pub position: u32,
}

/// `(largest batch max timestamp so far in the segment, relative offset of the
/// batch that starts the indexed run)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TimeEntry {
    pub timestamp: i64,
    pub relative_offset: u32,
}

/// The two sparse indexes of one segment.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SparseIndex {
    pub offsets: Vec<OffsetEntry>,
    pub times: Vec<TimeEntry>,
}

const OFFSET_RECORD: usize = 12;
const TIME_RECORD: usize = 16;

pub fn offset_path(dir: &Path, base: i64) -> PathBuf {
    dir.join(format!("{base:020}.index"))
}

pub fn time_path(dir: &Path, base: i64) -> PathBuf {
    dir.join(format!("{base:020}.timeindex"))
}

impl SparseIndex {
    /// Position to start scanning from for `relative_offset`: that of the
    /// last indexed batch at or below it, or 0.
    pub fn lookup_position(&self, relative_offset: u32) -> u32 {
        let i = self
            .offsets
            .partition_point(|e| e.relative_offset <= relative_offset);
        if i == 0 {
            0
        } else {
            self.offsets[i - 1].position
        }
    }

    /// Relative offset to start scanning from for the first batch whose max
    /// timestamp is ≥ `timestamp`: the start of the last indexed run whose
    /// running max is still below it, or 0.
    pub fn lookup_time(&self, timestamp: i64) -> u32 {
        let i = self.times.partition_point(|e| e.timestamp < timestamp);
        if i == 0 {
            0
        } else {
            self.times[i - 1].relative_offset
        }
    }

    /// Drops entries for positions ≥ `position`.
    pub fn truncate_to(&mut self, position: u32, end_relative_offset: u32) {
        let keep = self.offsets.partition_point(|e| e.position < position);
        self.offsets.truncate(keep);
        let keep = self
            .times
            .partition_point(|e| e.relative_offset < end_relative_offset);
        self.times.truncate(keep);
    }

    /// Writes records `[from_offsets..]` / `[from_times..]` at their slots.
    pub fn write_from(
        &self,
        dir: &Path,
        base: i64,
        from_offsets: usize,
        from_times: usize,
    ) -> Result<()> {
        write_at(
            &offset_path(dir, base),
            &self.encode_offsets(from_offsets),
            from_offsets * OFFSET_RECORD,
        )?;
        write_at(
            &time_path(dir, base),
            &self.encode_times(from_times),
            from_times * TIME_RECORD,
        )
    }

    /// Writes both indexes whole to the given files (a segment written
    /// beside the live ones, ADR 0027).
    #[cfg_attr(not(test), allow(dead_code))]
    pub fn write_to(&self, offsets: &Path, times: &Path) -> Result<()> {
        write_at(offsets, &self.encode_offsets(0), 0)?;
        write_at(times, &self.encode_times(0), 0)
    }

    fn encode_offsets(&self, from: usize) -> Vec<u8> {
        let mut buf =
            Vec::with_capacity((self.offsets.len() - from.min(self.offsets.len())) * OFFSET_RECORD);
        for e in self.offsets.iter().skip(from) {
            let mut r = [0u8; OFFSET_RECORD];
            r[0..4].copy_from_slice(&e.relative_offset.to_le_bytes());
            r[4..8].copy_from_slice(&e.position.to_le_bytes());
            let crc = crc32fast::hash(&r[0..8]);
            r[8..12].copy_from_slice(&crc.to_le_bytes());
            buf.extend_from_slice(&r);
        }
        buf
    }

    fn encode_times(&self, from: usize) -> Vec<u8> {
        let mut buf =
            Vec::with_capacity((self.times.len() - from.min(self.times.len())) * TIME_RECORD);
        for e in self.times.iter().skip(from) {
            let mut r = [0u8; TIME_RECORD];
            r[0..8].copy_from_slice(&e.timestamp.to_le_bytes());
            r[8..12].copy_from_slice(&e.relative_offset.to_le_bytes());
            let crc = crc32fast::hash(&r[0..12]);
            r[12..16].copy_from_slice(&crc.to_le_bytes());
            buf.extend_from_slice(&r);
        }
        buf
    }

    /// Loads the first `offsets`/`times` records (all when `None`). Returns
    /// `None` if a file is missing, short, or a record fails its checksum or
    /// ordering: the caller then rebuilds from the log.
    pub fn load(
        dir: &Path,
        base: i64,
        limit: Option<(usize, usize)>,
    ) -> Result<Option<SparseIndex>> {
        let Some(raw_offsets) = read_file(&offset_path(dir, base))? else {
            return Ok(None);
        };
        let Some(raw_times) = read_file(&time_path(dir, base))? else {
            return Ok(None);
        };
        let (n_off, n_time) = limit.unwrap_or((
            raw_offsets.len() / OFFSET_RECORD,
            raw_times.len() / TIME_RECORD,
        ));
        if limit.is_none()
            && (raw_offsets.len() % OFFSET_RECORD != 0 || raw_times.len() % TIME_RECORD != 0)
        {
            return Ok(None);
        }
        if raw_offsets.len() < n_off * OFFSET_RECORD || raw_times.len() < n_time * TIME_RECORD {
            return Ok(None);
        }
        let mut index = SparseIndex::default();
        for r in raw_offsets.chunks_exact(OFFSET_RECORD).take(n_off) {
            let crc = u32::from_le_bytes([r[8], r[9], r[10], r[11]]);
            if crc != crc32fast::hash(&r[0..8]) {
                return Ok(None);
            }
            let e = OffsetEntry {
                relative_offset: u32::from_le_bytes([r[0], r[1], r[2], r[3]]),
                position: u32::from_le_bytes([r[4], r[5], r[6], r[7]]),
            };
            if let Some(last) = index.offsets.last()
                && (last.relative_offset >= e.relative_offset || last.position >= e.position)
            {
                return Ok(None);
            }
            index.offsets.push(e);
        }
        for r in raw_times.chunks_exact(TIME_RECORD).take(n_time) {
            let crc = u32::from_le_bytes([r[12], r[13], r[14], r[15]]);
            if crc != crc32fast::hash(&r[0..12]) {
                return Ok(None);
            }
            let mut ts = [0u8; 8];
            ts.copy_from_slice(&r[0..8]);
            let e = TimeEntry {
                timestamp: i64::from_le_bytes(ts),
                relative_offset: u32::from_le_bytes([r[8], r[9], r[10], r[11]]),
            };
            if let Some(last) = index.times.last()
                && (last.timestamp > e.timestamp || last.relative_offset > e.relative_offset)
            {
                return Ok(None);
            }
            index.times.push(e);
        }
        Ok(Some(index))
    }
}

/// Trims both index files to exactly `offsets`/`times` records.
pub fn trim_files(dir: &Path, base: i64, offsets: usize, times: usize) -> Result<()> {
    for (path, len) in [
        (offset_path(dir, base), offsets * OFFSET_RECORD),
        (time_path(dir, base), times * TIME_RECORD),
    ] {
        let f = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .map_err(|e| WalError::io("open index", &path, e))?;
        f.set_len(len as u64)
            .map_err(|e| WalError::io("trim index", &path, e))?;
    }
    Ok(())
}

fn write_at(path: &Path, buf: &[u8], at: usize) -> Result<()> {
    let f = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(false)
        .open(path)
        .map_err(|e| WalError::io("open index", path, e))?;
    f.write_all_at(buf, at as u64)
        .map_err(|e| WalError::io("write index", path, e))
}

fn read_file(path: &Path) -> Result<Option<Vec<u8>>> {
    match File::open(path) {
        Ok(mut f) => {
            let mut buf = Vec::new();
            f.read_to_end(&mut buf)
                .map_err(|e| WalError::io("read index", path, e))?;
            Ok(Some(buf))
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(WalError::io("open index", path, e)),
    }
}

/// Rebuilds a segment's sparse index from its batch headers.
pub fn build_index(data: &[u8], base: i64, interval: u64) -> SparseIndex {
    let mut ix = SparseIndex::default();
    let mut builder = IndexBuilder::new(interval);
    for (h, range) in batch::Batches::new(data).map_while(|b| b.ok()) {
        if let Some((o, t)) = builder.add(base, &h, range.start as u64) {
            ix.offsets.push(o);
            ix.times.push(t);
        }
    }
    ix
}

/// Decides where sparse index entries go as batches are appended.
#[derive(Debug, Clone)]
pub struct IndexBuilder {
    interval: u64,
    bytes_since: u64,
    max_timestamp: i64,
}

impl IndexBuilder {
    pub fn new(interval: u64) -> Self {
        IndexBuilder {
            interval,
            bytes_since: u64::MAX,
            max_timestamp: i64::MIN,
        }
    }

    /// Resumes after `ix` (recovery): the next batch gets an entry only once
    /// `interval` bytes have passed since the last indexed position.
    pub fn resume(interval: u64, ix: &SparseIndex, position: u64, max_timestamp: i64) -> Self {
        let last = ix.offsets.last().map(|e| u64::from(e.position));
        IndexBuilder {
            interval,
            bytes_since: last.map_or(u64::MAX, |p| position.saturating_sub(p)),
            max_timestamp,
        }
    }

    /// Accounts for a batch at `position`; returns the index entries due for it.
    pub fn add(
        &mut self,
        base: i64,
        h: &BatchHeader,
        position: u64,
    ) -> Option<(OffsetEntry, TimeEntry)> {
        self.max_timestamp = self.max_timestamp.max(h.max_timestamp);
        let due = (self.bytes_since >= self.interval).then(|| {
            let rel = (h.base_offset - base) as u32;
            self.bytes_since = 0;
            (
                OffsetEntry {
                    relative_offset: rel,
                    position: position as u32,
                },
                TimeEntry {
                    timestamp: self.max_timestamp,
                    relative_offset: rel,
                },
            )
        });
        self.bytes_since = self.bytes_since.saturating_add(h.total_len() as u64);
        due
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> SparseIndex {
        SparseIndex {
            offsets: vec![
                OffsetEntry {
                    relative_offset: 0,
                    position: 0,
                },
                OffsetEntry {
                    relative_offset: 10,
                    position: 4100,
                },
                OffsetEntry {
                    relative_offset: 25,
                    position: 8300,
                },
            ],
            times: vec![
                TimeEntry {
                    timestamp: 100,
                    relative_offset: 0,
                },
                TimeEntry {
                    timestamp: 150,
                    relative_offset: 10,
                },
                TimeEntry {
                    timestamp: 150,
                    relative_offset: 25,
                },
            ],
        }
    }

    #[test]
    fn lookups_take_the_floor_entry() {
        let ix = sample();
        assert_eq!(ix.lookup_position(0), 0);
        assert_eq!(ix.lookup_position(9), 0);
        assert_eq!(ix.lookup_position(10), 4100);
        assert_eq!(ix.lookup_position(1000), 8300);
        assert_eq!(ix.lookup_time(50), 0);
        assert_eq!(ix.lookup_time(120), 0);
        assert_eq!(ix.lookup_time(151), 25);
    }

    #[test]
    fn files_round_trip_and_reject_flips() {
        let dir = tempfile::tempdir().unwrap();
        let ix = sample();
        ix.write_from(dir.path(), 5, 0, 0).unwrap();
        assert_eq!(
            SparseIndex::load(dir.path(), 5, None).unwrap(),
            Some(ix.clone())
        );
        let limited = SparseIndex::load(dir.path(), 5, Some((1, 2)))
            .unwrap()
            .unwrap();
        assert_eq!(limited.offsets.len(), 1);
        assert_eq!(limited.times.len(), 2);
        let path = offset_path(dir.path(), 5);
        let mut raw = std::fs::read(&path).unwrap();
        raw[13] ^= 4;
        std::fs::write(&path, raw).unwrap();
        assert_eq!(SparseIndex::load(dir.path(), 5, None).unwrap(), None);
    }
}
