//! Where a segment read's bytes come from: the active segment's mapping
//! (bounded by the published length, with `pread` beyond the mapped window)
//! or a sealed segment's mapping. Callers keep every range below the
//! segment's published length, which is what keeps mapped reads safe.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::{Arc, RwLock};

use bytes::Bytes;

use crate::batch::{BatchHeader, HEADER_LEN};
use crate::error::{Result, WalError};
use crate::index::SparseIndex;

/// What readers share with the writer of the active segment.
#[derive(Debug, Clone)]
pub struct ActiveBody {
    pub file: Arc<File>,
    /// A read-only mapping of the first `ACTIVE_MAP_LEN` bytes of the file,
    /// longer than the file: readers slice it only below the published
    /// length, which never exceeds the file's length, so no page past the
    /// end is ever touched. The file is never shrunk below a published
    /// length while mapped (truncation writes a new file).
    pub data: Bytes,
    pub index: Arc<RwLock<SparseIndex>>,
}

/// Largest segment the index formats address (positions are u32).
pub const MAX_SEGMENT_BYTES: u64 = 2 << 30;

/// How much of the active segment is mapped; bytes beyond (only a single
/// entry larger than a segment gets there) are read with `pread`.
pub const ACTIVE_MAP_LEN: u64 = MAX_SEGMENT_BYTES;

impl ActiveBody {
    pub fn new(
        file: Arc<File>,
        path: &Path,
        index: Arc<RwLock<SparseIndex>>,
    ) -> Result<ActiveBody> {
        // SAFETY: see `data`: the mapping is only read below the published
        // length, and the file is only replaced (never shrunk) under it.
        let map = unsafe {
            memmap2::MmapOptions::new()
                .len(ACTIVE_MAP_LEN as usize)
                .map(&*file)
        }
        .map_err(|e| WalError::io("map active segment", path, e))?;
        Ok(ActiveBody {
            file,
            data: Bytes::from_owner(map),
            index,
        })
    }
}

#[derive(Debug)]
pub struct SealedView {
    /// The segment's mapping, from its first byte (reads release their
    /// pages relative to it: [`MappedRange`]).
    pub data: Bytes,
    pub index: SparseIndex,
}

/// Where a read's bytes come from.
pub enum Source {
    Active(ActiveBody),
    Sealed(Arc<SealedView>),
}

impl Source {
    pub fn with_index<T>(&self, f: impl FnOnce(&SparseIndex) -> T) -> T {
        match self {
            Source::Active(a) => f(&a.index.read().unwrap_or_else(|p| p.into_inner())),
            Source::Sealed(v) => f(&v.index),
        }
    }

    pub fn header(&self, pos: u64, len: u64, path: &Path) -> Result<Option<BatchHeader>> {
        if len - pos < HEADER_LEN as u64 {
            return Ok(None);
        }
        match self {
            Source::Sealed(v) => Ok(BatchHeader::parse(&v.data[pos as usize..]).ok()),
            Source::Active(a) if (pos as usize) + HEADER_LEN <= a.data.len() => {
                Ok(BatchHeader::parse(&a.data[pos as usize..]).ok())
            }
            Source::Active(a) => {
                let mut buf = [0u8; HEADER_LEN];
                a.file
                    .read_exact_at(&mut buf, pos)
                    .map_err(|e| WalError::io("read segment", path, e))?;
                Ok(BatchHeader::parse(&buf).ok())
            }
        }
    }

    /// Bytes `[from, to)` of the segment (callers keep `to` ≤ published length).
    pub fn load(&self, from: u64, to: u64, path: &Path) -> Result<Bytes> {
        match self {
            Source::Sealed(v) => Ok(MappedRange::of(&v.data, from, to)),
            Source::Active(a) if to as usize <= a.data.len() => {
                Ok(MappedRange::of(&a.data, from, to))
            }
            Source::Active(a) => {
                let mut buf = vec![0u8; (to - from) as usize];
                let mut filled = 0usize;
                while filled < buf.len() {
                    match a.file.read_at(&mut buf[filled..], from + filled as u64) {
                        // A concurrent truncation shrank the file: serve what exists.
                        Ok(0) => break,
                        Ok(n) => filled += n,
                        Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                        Err(e) => return Err(WalError::io("read segment", path, e)),
                    }
                }
                buf.truncate(filled);
                Ok(Bytes::from(buf))
            }
        }
    }
}

/// A read's bytes, borrowed from a segment's mapping. When the last
/// reference goes (the Fetch response written, the catch-up sent), the
/// mapping's pages over the range are released (`MADV_DONTNEED`): they stay
/// in the page cache, but stop counting in the process's resident memory,
/// which otherwise grew with every byte consumers ever read (a node that
/// served 2.3 GB of reads showed 1.2 GB RSS, 100 MB of it its own).
struct MappedRange {
    /// The whole mapping, from its first byte.
    map: Bytes,
    from: usize,
    to: usize,
}

impl MappedRange {
    fn of(map: &Bytes, from: u64, to: u64) -> Bytes {
        let (from, to) = (from as usize, to as usize);
        if from >= to {
            return Bytes::new();
        }
        Bytes::from_owner(MappedRange {
            map: map.clone(),
            from,
            to,
        })
    }
}

impl AsRef<[u8]> for MappedRange {
    fn as_ref(&self) -> &[u8] {
        &self.map[self.from..self.to]
    }
}

impl Drop for MappedRange {
    fn drop(&mut self) {
        let page = page_size();
        let base = self.map.as_ptr() as usize;
        let start = (base + self.from) & !(page - 1);
        let end = (base + self.to).next_multiple_of(page);
        // SAFETY: `map` starts at the mapping's first (page-aligned) byte and
        // the mapping spans whole pages past its last byte, so
        // `[start, end)` lies inside it, and `map` keeps it mapped. On a
        // shared file mapping MADV_DONTNEED only drops this process's page
        // table entries: another reader of the same pages faults the file's
        // current contents back in. A failure only leaves pages resident.
        unsafe {
            libc::madvise(start as *mut libc::c_void, end - start, libc::MADV_DONTNEED);
        }
    }
}

fn page_size() -> usize {
    static PAGE: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *PAGE.get_or_init(|| {
        // SAFETY: sysconf has no preconditions.
        let n = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
        usize::try_from(n)
            .ok()
            .filter(|p| p.is_power_of_two())
            .unwrap_or(4096)
    })
}
