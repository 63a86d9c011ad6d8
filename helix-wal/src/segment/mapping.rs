//! How a segment's bytes are reached: the active segment's body, or a
//! sealed segment's mapping, made on first use through the node's file
//! budget and dropped when the budget evicts it.

use std::fs::File;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use bytes::Bytes;
use memmap2::Mmap;

use super::{Body, Segment};
use crate::budget::{FileBudget, Mapped};
use crate::error::{Result, WalError};
use crate::index::SparseIndex;
use crate::source::{SealedView, Source};

impl Segment {
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

    pub(super) fn source(self: &Arc<Self>, budget: &FileBudget) -> Result<Source> {
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

    pub(super) fn map(&self) -> Result<SealedView> {
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
