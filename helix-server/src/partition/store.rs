//! Interim on-disk log of one partition (see docs/adr/0010): one append-only
//! file of v2 batches, an in-memory batch index rebuilt by scanning at open,
//! and a small metadata file (log start offset).
//!
//! Its surface follows helix-wal's `PartitionLog` contract (open → recovery,
//! append, reader, offset_for_timestamp, end_offset_for_term,
//! delete_records_before) so that swapping in helix-wal touches only this
//! file. Recovery stops at the first torn or corrupt batch and truncates the
//! file there: a crash can only tear the tail, never a batch in the middle.

use std::fs::{File, OpenOptions};
use std::io::{BufReader, Read};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};

use bytes::{Bytes, BytesMut};

use super::batch::{BatchHeader, HEADER_LEN};
use crate::error::{HelixError, Result};

/// Where one stored batch lives and what it covers.
#[derive(Debug, Clone, Copy)]
struct IndexEntry {
    base_offset: i64,
    last_offset: i64,
    position: u64,
    size: u32,
    max_timestamp: i64,
    /// partitionLeaderEpoch = the Raft term the batch was appended in.
    epoch: i32,
}

/// What recovery found.
#[derive(Debug, Clone, Copy)]
pub struct Recovery {
    pub next_offset: i64,
    pub log_start_offset: i64,
    /// Highest leader epoch (Raft term) found in the log, 0 when empty.
    pub last_epoch: i32,
    /// Bytes cut from a torn tail.
    pub truncated_bytes: u64,
}

#[derive(Debug)]
struct Shared {
    file: File,
    index: RwLock<Index>,
}

#[derive(Debug, Default)]
struct Index {
    entries: Vec<IndexEntry>,
    /// Bytes of the file that readers may see (published after each append).
    published_len: u64,
    log_start_offset: i64,
    next_offset: i64,
}

/// The single writer of one partition's log.
#[derive(Debug)]
pub struct PartitionLog {
    shared: Arc<Shared>,
    meta_path: PathBuf,
    end: u64,
}

/// A cloneable handle for reads running concurrently with the writer.
#[derive(Debug, Clone)]
pub struct LogReader {
    shared: Arc<Shared>,
}

const LOG_FILE: &str = "00000000.log";
const META_FILE: &str = "meta";

impl PartitionLog {
    /// Opens (creating if needed) the log in `dir` and recovers it.
    pub fn open(dir: &Path) -> Result<(PartitionLog, Recovery)> {
        std::fs::create_dir_all(dir)?;
        let path = dir.join(LOG_FILE);
        let file = OpenOptions::new()
            .read(true)
            .append(true)
            .create(true)
            .open(&path)?;
        let meta_path = dir.join(META_FILE);
        let mut log_start_offset = match std::fs::read_to_string(&meta_path) {
            Ok(s) => s
                .trim()
                .parse::<i64>()
                .map_err(|e| HelixError::CorruptState(format!("{}: {e}", meta_path.display())))?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => 0,
            Err(e) => return Err(e.into()),
        };
        let (entries, valid_len) = scan(&file)?;
        let file_len = file.metadata()?.len();
        if valid_len < file_len {
            tracing::warn!(path = %path.display(), cut = file_len - valid_len, "truncating torn log tail");
            file.set_len(valid_len)?;
        }
        let next_offset = entries
            .last()
            .map_or(log_start_offset, |e| e.last_offset + 1);
        log_start_offset = log_start_offset.min(next_offset);
        let last_epoch = entries.iter().map(|e| e.epoch).max().unwrap_or(0);
        let recovery = Recovery {
            next_offset,
            log_start_offset,
            last_epoch,
            truncated_bytes: file_len - valid_len,
        };
        let index = Index {
            entries,
            published_len: valid_len,
            log_start_offset,
            next_offset,
        };
        let shared = Arc::new(Shared {
            file,
            index: RwLock::new(index),
        });
        Ok((
            PartitionLog {
                shared,
                meta_path,
                end: valid_len,
            },
            recovery,
        ))
    }

    /// Appends batches whose base offsets are already assigned and
    /// contiguous from [`PartitionLog::next_offset`].
    pub fn append(&mut self, batches: &[u8]) -> Result<()> {
        let mut new_entries = Vec::new();
        let mut pos = 0usize;
        let mut expected = self.next_offset();
        while pos < batches.len() {
            let h = BatchHeader::parse(&batches[pos..])?;
            if h.base_offset != expected || pos + h.size > batches.len() {
                return Err(HelixError::CorruptState(format!(
                    "append of offset {} where {expected} was expected",
                    h.base_offset
                )));
            }
            new_entries.push(IndexEntry {
                base_offset: h.base_offset,
                last_offset: h.last_offset(),
                position: self.end + pos as u64,
                size: h.size as u32,
                max_timestamp: h.max_timestamp,
                epoch: h.leader_epoch,
            });
            expected = h.last_offset() + 1;
            pos += h.size;
        }
        self.shared.file.write_all_at(batches, self.end)?;
        self.end += batches.len() as u64;
        let mut index = self.shared.index.write().map_err(|_| poisoned())?;
        index.entries.extend(new_entries);
        index.published_len = self.end;
        index.next_offset = expected;
        Ok(())
    }

    /// fsync of everything appended so far.
    pub fn sync(&self) -> Result<()> {
        self.shared.file.sync_data()?;
        Ok(())
    }

    pub fn next_offset(&self) -> i64 {
        self.shared.index.read().map(|i| i.next_offset).unwrap_or(0)
    }

    pub fn reader(&self) -> LogReader {
        LogReader {
            shared: self.shared.clone(),
        }
    }

    /// DeleteRecords / retention: moves the log start forward (never back,
    /// never past the end) and persists it.
    pub fn delete_records_before(&mut self, offset: i64) -> Result<i64> {
        let new_start = {
            let mut index = self.shared.index.write().map_err(|_| poisoned())?;
            if offset <= index.log_start_offset {
                return Ok(index.log_start_offset);
            }
            if offset > index.next_offset {
                return Err(HelixError::OffsetOutOfRange);
            }
            index.log_start_offset = offset;
            offset
        };
        let tmp = self.meta_path.with_extension("tmp");
        std::fs::write(&tmp, new_start.to_string())?;
        File::open(&tmp)?.sync_all()?;
        std::fs::rename(&tmp, &self.meta_path)?;
        Ok(new_start)
    }

    /// Retention by time and size: the log start moves past whole batches
    /// older than `min_timestamp` or beyond `max_bytes` from the end.
    pub fn apply_retention(
        &mut self,
        min_timestamp: Option<i64>,
        max_bytes: Option<u64>,
    ) -> Result<()> {
        let target = {
            let index = self.shared.index.read().map_err(|_| poisoned())?;
            let mut target = index.log_start_offset;
            let mut kept: u64 = index
                .entries
                .iter()
                .filter(|e| e.last_offset >= target)
                .map(|e| u64::from(e.size))
                .sum();
            // The last batch is never removed by retention, as in Kafka's
            // active segment, so the end offset stays readable.
            let deletable = index.entries.len().saturating_sub(1);
            for e in index.entries.iter().take(deletable) {
                if e.last_offset < target {
                    continue;
                }
                let too_old = min_timestamp.is_some_and(|t| e.max_timestamp < t);
                let too_big = max_bytes.is_some_and(|m| kept > m);
                if !(too_old || too_big) {
                    break;
                }
                kept -= u64::from(e.size);
                target = e.last_offset + 1;
            }
            target
        };
        self.delete_records_before(target).map(|_| ())
    }
}

impl LogReader {
    pub fn log_start_offset(&self) -> i64 {
        self.shared
            .index
            .read()
            .map(|i| i.log_start_offset)
            .unwrap_or(0)
    }

    /// Whole batches covering offsets from `from` up to (excluding)
    /// `until`, at most `max_bytes` but always the first batch if any. The
    /// bytes are read once from the file into one buffer.
    pub fn read(&self, from: i64, until: i64, max_bytes: usize) -> Result<Bytes> {
        let (position, len) = {
            let index = self.shared.index.read().map_err(|_| poisoned())?;
            let first = index.entries.partition_point(|e| e.last_offset < from);
            let mut len: u64 = 0;
            let mut position = None;
            for e in index.entries[first..].iter() {
                if e.base_offset >= until {
                    break;
                }
                if position.is_some() && len + u64::from(e.size) > max_bytes as u64 {
                    break;
                }
                position.get_or_insert(e.position);
                len += u64::from(e.size);
            }
            match position {
                Some(p) => (p, len),
                None => return Ok(Bytes::new()),
            }
        };
        let mut buf = BytesMut::zeroed(len as usize);
        self.shared.file.read_exact_at(&mut buf, position)?;
        Ok(buf.freeze())
    }

    /// First offset whose batch has a max timestamp >= `ts`, with that
    /// timestamp; None when every batch is older.
    pub fn offset_for_timestamp(&self, ts: i64) -> Option<(i64, i64)> {
        let index = self.shared.index.read().ok()?;
        index
            .entries
            .iter()
            .filter(|e| e.last_offset >= index.log_start_offset)
            .find(|e| e.max_timestamp >= ts)
            .map(|e| (e.base_offset.max(index.log_start_offset), e.max_timestamp))
    }

    /// The batch holding the largest timestamp: (its base offset, timestamp).
    pub fn max_timestamp(&self) -> Option<(i64, i64)> {
        let index = self.shared.index.read().ok()?;
        let mut best: Option<IndexEntry> = None;
        for e in index
            .entries
            .iter()
            .filter(|e| e.last_offset >= index.log_start_offset)
        {
            if best.is_none_or(|b| e.max_timestamp > b.max_timestamp) {
                best = Some(*e);
            }
        }
        best.map(|e| (e.last_offset, e.max_timestamp))
    }

    /// OffsetForLeaderEpoch: the end offset of `epoch` (the base offset of
    /// the first batch of a later epoch, or the log end) and the largest
    /// epoch <= the one asked.
    pub fn end_offset_for_epoch(&self, epoch: i32) -> (i32, i64) {
        let Ok(index) = self.shared.index.read() else {
            return (-1, -1);
        };
        let mut found = -1;
        for e in &index.entries {
            if e.epoch > epoch {
                return if found < 0 {
                    (-1, -1)
                } else {
                    (found, e.base_offset)
                };
            }
            found = e.epoch;
        }
        if found < 0 {
            (-1, -1)
        } else {
            (found, index.next_offset)
        }
    }

    /// Every stored batch header from the log start, for rebuilding state
    /// derived from the log (producer sequences).
    pub fn headers(&self) -> Result<Vec<BatchHeader>> {
        let entries: Vec<IndexEntry> = {
            let index = self.shared.index.read().map_err(|_| poisoned())?;
            index.entries.clone()
        };
        let mut out = Vec::with_capacity(entries.len());
        let mut buf = [0u8; HEADER_LEN];
        for e in entries {
            self.shared.file.read_exact_at(&mut buf, e.position)?;
            out.push(BatchHeader::parse(&buf)?);
        }
        Ok(out)
    }
}

/// Reads the file from the start and indexes every intact batch; returns the
/// index and the length of the intact prefix.
fn scan(file: &File) -> Result<(Vec<IndexEntry>, u64)> {
    let mut reader = BufReader::with_capacity(1 << 20, file.try_clone()?);
    let mut entries = Vec::new();
    let mut position: u64 = 0;
    let mut batch = Vec::new();
    let mut expected: Option<i64> = None;
    loop {
        let mut head = [0u8; HEADER_LEN];
        if read_full(&mut reader, &mut head)? < HEADER_LEN {
            break;
        }
        let Ok(h) = BatchHeader::parse(&head) else {
            break;
        };
        if expected.is_some_and(|x| x != h.base_offset) {
            break;
        }
        batch.clear();
        batch.extend_from_slice(&head);
        batch.resize(h.size, 0);
        if read_full(&mut reader, &mut batch[HEADER_LEN..])? < h.size - HEADER_LEN {
            break;
        }
        let crc = u32::from_be_bytes([batch[17], batch[18], batch[19], batch[20]]);
        if crc32c::crc32c(&batch[21..]) != crc {
            break;
        }
        entries.push(IndexEntry {
            base_offset: h.base_offset,
            last_offset: h.last_offset(),
            position,
            size: h.size as u32,
            max_timestamp: h.max_timestamp,
            epoch: h.leader_epoch,
        });
        expected = Some(h.last_offset() + 1);
        position += h.size as u64;
    }
    Ok((entries, position))
}

fn read_full(r: &mut impl Read, buf: &mut [u8]) -> Result<usize> {
    let mut got = 0;
    while got < buf.len() {
        match r.read(&mut buf[got..])? {
            0 => break,
            n => got += n,
        }
    }
    Ok(got)
}

fn poisoned() -> HelixError {
    HelixError::CorruptState("log index lock poisoned".into())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::partition::batch::{patch_header, tests::make_batch};

    fn batch_at(offset: i64, values: &[&[u8]], epoch: i32, ts: i64) -> Vec<u8> {
        let mut b = make_batch(values, -1, -1, ts).to_vec();
        patch_header(&mut b, offset, epoch);
        b
    }

    #[test]
    fn appended_batches_are_read_back_and_survive_reopen() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (mut log, rec) = PartitionLog::open(dir.path()).expect("open");
        assert_eq!(rec.next_offset, 0);
        let a = batch_at(0, &[b"a", b"b"], 1, 100);
        let b = batch_at(2, &[b"c"], 2, 200);
        log.append(&a).expect("append a");
        log.append(&b).expect("append b");
        let r = log.reader();
        assert_eq!(
            r.read(0, 3, 1 << 20).expect("read").len(),
            a.len() + b.len()
        );
        assert_eq!(r.read(2, 3, 1 << 20).expect("read").to_vec(), b);
        assert_eq!(
            r.read(0, 2, 1 << 20).expect("read").to_vec(),
            a,
            "stops at `until`"
        );
        assert_eq!(
            r.read(0, 3, 1).expect("read").to_vec(),
            a,
            "first batch even over max_bytes"
        );
        assert_eq!(r.offset_for_timestamp(150), Some((2, 200)));
        assert_eq!(r.end_offset_for_epoch(1), (1, 2));
        assert_eq!(r.end_offset_for_epoch(5), (2, 3));
        drop(log);
        let (log, rec) = PartitionLog::open(dir.path()).expect("reopen");
        assert_eq!(rec.next_offset, 3);
        assert_eq!(rec.last_epoch, 2);
        assert_eq!(log.reader().headers().expect("headers").len(), 2);
    }

    #[test]
    fn torn_tail_is_cut_at_the_last_whole_batch() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (mut log, _) = PartitionLog::open(dir.path()).expect("open");
        log.append(&batch_at(0, &[b"a"], 1, 0)).expect("append");
        drop(log);
        let torn = batch_at(1, &[b"bbbbbbbb"], 1, 0);
        let mut f = OpenOptions::new()
            .append(true)
            .open(dir.path().join(LOG_FILE))
            .expect("file");
        std::io::Write::write_all(&mut f, &torn[..torn.len() - 3]).expect("write");
        drop(f);
        let (mut log, rec) = PartitionLog::open(dir.path()).expect("reopen");
        assert_eq!(rec.next_offset, 1);
        assert_eq!(rec.truncated_bytes as usize, torn.len() - 3);
        log.append(&batch_at(1, &[b"c"], 2, 0))
            .expect("append after recovery");
        assert_eq!(log.next_offset(), 2);
    }

    #[test]
    fn delete_records_moves_the_start_and_persists() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (mut log, _) = PartitionLog::open(dir.path()).expect("open");
        log.append(&batch_at(0, &[b"a", b"b", b"c"], 1, 0))
            .expect("append");
        assert_eq!(log.delete_records_before(2).expect("delete"), 2);
        assert!(log.delete_records_before(9).is_err());
        drop(log);
        let (log, rec) = PartitionLog::open(dir.path()).expect("reopen");
        assert_eq!(rec.log_start_offset, 2);
        assert_eq!(log.reader().log_start_offset(), 2);
    }
}
