//! Where a segment read's bytes come from: the active segment's mapping
//! (bounded by the published length, with `pread` beyond the mapped window)
//! or a sealed segment's mapping. Callers keep every range below the
//! segment's published length, which is what keeps mapped reads safe.

use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::Arc;

use bytes::Bytes;

use crate::batch::{BatchHeader, HEADER_LEN};
use crate::error::{Result, WalError};
use crate::index::SparseIndex;
use crate::segment::ActiveBody;

#[derive(Debug)]
pub struct SealedView {
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
            Source::Sealed(v) => Ok(v.data.slice(from as usize..to as usize)),
            Source::Active(a) if to as usize <= a.data.len() => {
                Ok(a.data.slice(from as usize..to as usize))
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
