//! The per-segment entry index: one fixed-size record per Raft entry,
//! `(term, index, first offset, next offset, position, length)`, guarded by a
//! crc32fast checksum.
//!
//! The active segment's entry index is a memory-mapped file: recording an
//! entry is a store into the page cache, not a syscall, so it survives a
//! process crash as soon as `append` returns. Records are contiguous in Raft
//! index, so the record of index `i` sits at slot `i - first_index`.

use std::fs::{File, OpenOptions};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use memmap2::{Advice, MmapMut};

use crate::error::{Result, WalError};
use crate::types::RaftPosition;

/// Size of one record on disk.
pub const RECORD_LEN: usize = 48;
/// Initial capacity of an active entry index file, in records.
const INITIAL_RECORDS: u64 = 1024;

/// One Raft entry as recorded in a segment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EntryRecord {
    pub pos: RaftPosition,
    pub first_offset: i64,
    pub next_offset: i64,
    /// Byte position of the entry's first batch in the segment's log file.
    pub position: u32,
    /// Bytes of the entry's batches.
    pub length: u32,
    /// crc32fast over the first 21 bytes of each of the entry's batches:
    /// the header fields the batch CRC-32C does not cover (base offset,
    /// length, partition leader epoch, magic, the CRC itself).
    pub header_sum: u32,
}

impl EntryRecord {
    /// Position just after this entry's bytes.
    pub fn end(&self) -> u64 {
        u64::from(self.position) + u64::from(self.length)
    }

    pub fn encode(&self) -> [u8; RECORD_LEN] {
        let mut b = [0u8; RECORD_LEN];
        b[0..8].copy_from_slice(&self.pos.term.to_le_bytes());
        b[8..16].copy_from_slice(&self.pos.index.to_le_bytes());
        b[16..24].copy_from_slice(&self.first_offset.to_le_bytes());
        b[24..32].copy_from_slice(&self.next_offset.to_le_bytes());
        b[32..36].copy_from_slice(&self.position.to_le_bytes());
        b[36..40].copy_from_slice(&self.length.to_le_bytes());
        b[40..44].copy_from_slice(&self.header_sum.to_le_bytes());
        let crc = crc32fast::hash(&b[0..44]);
        b[44..48].copy_from_slice(&crc.to_le_bytes());
        b
    }

    /// Decodes a record; `None` when its checksum does not match (a torn,
    /// never-written or corrupt slot). An all-zero slot never decodes.
    pub fn decode(b: &[u8]) -> Option<EntryRecord> {
        if b.len() < RECORD_LEN {
            return None;
        }
        let crc = u32::from_le_bytes(b[44..48].try_into().ok()?);
        if crc != crc32fast::hash(&b[0..44]) || b[0..48].iter().all(|&x| x == 0) {
            return None;
        }
        let u64_at = |at: usize| u64::from_le_bytes(b[at..at + 8].try_into().unwrap_or([0; 8]));
        let u32_at = |at: usize| u32::from_le_bytes(b[at..at + 4].try_into().unwrap_or([0; 4]));
        Some(EntryRecord {
            pos: RaftPosition {
                term: u64_at(0),
                index: u64_at(8),
            },
            first_offset: u64_at(16) as i64,
            next_offset: u64_at(24) as i64,
            position: u32_at(32),
            length: u32_at(36),
            header_sum: u32_at(40),
        })
    }
}

/// The `header_sum` of an entry's batches (given each batch's start).
pub fn header_sum(batches: &[u8], starts: impl Iterator<Item = usize>) -> u32 {
    let mut h = crc32fast::Hasher::new();
    for at in starts {
        h.update(&batches[at..(at + UNCOVERED_HEADER).min(batches.len())]);
    }
    h.finalize()
}

/// Header bytes of a v2 batch not covered by its CRC-32C (offsets 0..21).
const UNCOVERED_HEADER: usize = 21;

pub fn path_for(dir: &Path, base_offset: i64) -> PathBuf {
    dir.join(format!("{base_offset:020}.entries"))
}

/// Allocates `len` bytes of `file` from `offset` (size unchanged). A file
/// system without `fallocate` allocates on first write instead.
fn allocate(file: &File, offset: u64, len: u64) -> std::io::Result<()> {
    use std::os::fd::AsRawFd;
    let (Ok(offset), Ok(len)) = (libc::off_t::try_from(offset), libc::off_t::try_from(len)) else {
        return Err(std::io::Error::from_raw_os_error(libc::EFBIG));
    };
    if len == 0 {
        return Ok(());
    }
    // SAFETY: plain syscall on an open descriptor; no memory is passed.
    let rc = unsafe { libc::fallocate(file.as_raw_fd(), libc::FALLOC_FL_KEEP_SIZE, offset, len) };
    if rc == 0 {
        return Ok(());
    }
    let e = std::io::Error::last_os_error();
    match e.raw_os_error() {
        Some(libc::EOPNOTSUPP) => Ok(()),
        _ => Err(e),
    }
}

/// Reads slot `slot` of a closed entry index file.
pub fn read_slot(file: &File, path: &Path, slot: u64) -> Result<Option<EntryRecord>> {
    let mut buf = [0u8; RECORD_LEN];
    match file.read_exact_at(&mut buf, slot * RECORD_LEN as u64) {
        Ok(()) => Ok(EntryRecord::decode(&buf)),
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => Ok(None),
        Err(e) => Err(WalError::io("read entry index", path, e)),
    }
}

/// Reads slot `slot` of a file that must hold a valid record there.
pub fn read_required(file: &File, path: &Path, slot: u64) -> Result<EntryRecord> {
    read_slot(file, path, slot)?.ok_or_else(|| WalError::Corrupt {
        file: path.to_path_buf(),
        position: slot * RECORD_LEN as u64,
        reason: "entry index record fails its checksum".into(),
    })
}

/// Writer of the active segment's entry index (memory-mapped, grown by doubling).
pub struct EntryIndexWriter {
    path: PathBuf,
    file: Arc<File>,
    map: MmapMut,
    /// Records written.
    count: u64,
    capacity: u64,
}

impl EntryIndexWriter {
    /// Opens (creating if needed) an entry index that already holds `count`
    /// valid records; anything after them is zeroed.
    pub fn open(path: &Path, count: u64) -> Result<EntryIndexWriter> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(path)
            .map_err(|e| WalError::io("open entry index", path, e))?;
        let used = count * RECORD_LEN as u64;
        // Drop stale slots so a later crash cannot resurrect them.
        file.set_len(used)
            .map_err(|e| WalError::io("truncate entry index", path, e))?;
        let capacity = (count * 2).max(INITIAL_RECORDS);
        let map = Self::map(&file, path, count, capacity)?;
        Ok(EntryIndexWriter {
            path: path.to_path_buf(),
            file: Arc::new(file),
            map,
            count,
            capacity,
        })
    }

    /// Sizes the file to `capacity` records and maps it. The slots from
    /// `used` records on are allocated on disk (so a full disk is an error
    /// here, never a SIGBUS on a later store) and write-faulted in one call,
    /// instead of one page fault per 85 records on the append path.
    fn map(file: &File, path: &Path, used: u64, capacity: u64) -> Result<MmapMut> {
        let (from, to) = (used * RECORD_LEN as u64, capacity * RECORD_LEN as u64);
        file.set_len(to)
            .map_err(|e| WalError::io("grow entry index", path, e))?;
        allocate(file, from, to - from).map_err(|e| WalError::io("grow entry index", path, e))?;
        // SAFETY: the file belongs to this log's directory and is written only
        // through this map by the single writer; readers use `pread`.
        let map = unsafe { MmapMut::map_mut(file) }
            .map_err(|e| WalError::io("map entry index", path, e))?;
        // Only a speed-up: a kernel without MADV_POPULATE_WRITE (< 5.14)
        // faults the pages in on first store instead.
        let _ = map.advise_range(Advice::PopulateWrite, from as usize, (to - from) as usize);
        Ok(map)
    }

    pub fn count(&self) -> u64 {
        self.count
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The file descriptor, shared with the group committer (an fdatasync of
    /// it also writes back pages dirtied through the mapping).
    pub fn file(&self) -> &Arc<File> {
        &self.file
    }

    /// Records one entry. Grows the file first when full, so a failure here
    /// leaves the index unchanged.
    pub fn push(&mut self, record: &EntryRecord) -> Result<()> {
        if self.count == self.capacity {
            crate::fault::hit(&self.path, crate::fault::Point::EntryIndexGrow)
                .map_err(|e| WalError::io("grow entry index", &self.path, e))?;
            let capacity = self.capacity * 2;
            self.map = Self::map(&self.file, &self.path, self.count, capacity)?;
            self.capacity = capacity;
        }
        let at = (self.count as usize) * RECORD_LEN;
        self.map[at..at + RECORD_LEN].copy_from_slice(&record.encode());
        self.count += 1;
        Ok(())
    }

    /// Reads back slot `slot` (< count).
    pub fn get(&self, slot: u64) -> Option<EntryRecord> {
        if slot >= self.count {
            return None;
        }
        let at = slot as usize * RECORD_LEN;
        EntryRecord::decode(&self.map[at..at + RECORD_LEN])
    }

    /// Flushes records to disk (Fsync mode and clean close).
    pub fn sync(&self) -> Result<()> {
        self.map
            .flush()
            .map_err(|e| WalError::io("sync entry index", &self.path, e))
    }

    /// Trims the preallocated tail and closes: the file then holds exactly
    /// `count` records.
    pub fn seal(self) -> Result<()> {
        let EntryIndexWriter {
            path,
            file,
            map,
            count,
            ..
        } = self;
        drop(map);
        file.set_len(count * RECORD_LEN as u64)
            .map_err(|e| WalError::io("trim entry index", &path, e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(i: u64) -> EntryRecord {
        EntryRecord {
            pos: RaftPosition { term: 3, index: i },
            first_offset: i as i64 * 10,
            next_offset: i as i64 * 10 + 10,
            position: i as u32 * 100,
            length: 100,
            header_sum: 7,
        }
    }

    #[test]
    fn record_round_trips_and_rejects_flips() {
        let r = rec(9);
        let b = r.encode();
        assert_eq!(EntryRecord::decode(&b), Some(r));
        let mut bad = b;
        bad[3] ^= 1;
        assert_eq!(EntryRecord::decode(&bad), None);
        assert_eq!(EntryRecord::decode(&[0u8; RECORD_LEN]), None);
    }

    #[test]
    fn writer_grows_and_seals_to_exact_length() {
        let dir = tempfile::tempdir().unwrap();
        let path = path_for(dir.path(), 0);
        let mut w = EntryIndexWriter::open(&path, 0).unwrap();
        for i in 0..3000 {
            w.push(&rec(i)).unwrap();
        }
        assert_eq!(w.get(2999), Some(rec(2999)));
        assert_eq!(w.get(3000), None);
        w.seal().unwrap();
        let f = File::open(&path).unwrap();
        assert_eq!(f.metadata().unwrap().len(), 3000 * RECORD_LEN as u64);
        assert_eq!(read_slot(&f, &path, 2999).unwrap(), Some(rec(2999)));
        assert_eq!(read_slot(&f, &path, 3000).unwrap(), None);
        // Reopening with fewer records drops the rest.
        let w = EntryIndexWriter::open(&path, 2000).unwrap();
        assert_eq!(w.get(1999), Some(rec(1999)));
        assert_eq!(w.get(2000), None);
    }
}
