//! The node-wide budget of mapped sealed segments.
//!
//! Sealed segments are opened lazily: the first read maps the file (and loads
//! its sparse index), then closes the descriptor, so a mapped segment costs a
//! mapping, not a file descriptor. The budget caps how many stay mapped across
//! every log that shares it and unmaps the least recently read when over the
//! cap. Bytes already handed to readers keep their mapping alive until dropped.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};

/// What the budget needs of a segment it keeps count of (`Segment`).
pub(crate) trait Mapped: Send + Sync {
    /// Whether its file is mapped now.
    fn is_mapped(&self) -> bool;
    /// The budget tick of its last read.
    fn last_used(&self) -> u64;
    /// Drops its mapping (a later read maps it again).
    fn unmap(&self);
}

#[derive(Clone, Debug)]
pub struct FileBudget {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    max_mapped: usize,
    clock: AtomicU64,
    mapped: Mutex<Vec<Weak<dyn Mapped>>>,
}

impl Default for FileBudget {
    fn default() -> Self {
        FileBudget::new(FileBudget::DEFAULT_MAX_MAPPED)
    }
}

impl FileBudget {
    /// Default cap on mapped sealed segments per budget.
    pub const DEFAULT_MAX_MAPPED: usize = 1024;

    pub fn new(max_mapped: usize) -> Self {
        FileBudget {
            inner: Arc::new(Inner {
                max_mapped: max_mapped.max(1),
                clock: AtomicU64::new(0),
                mapped: Mutex::new(Vec::new()),
            }),
        }
    }

    /// Segments currently mapped through this budget.
    pub fn mapped(&self) -> usize {
        let mut mapped = self.lock();
        mapped.retain(|w| w.upgrade().is_some_and(|s| s.is_mapped()));
        mapped.len()
    }

    pub(crate) fn tick(&self) -> u64 {
        self.inner.clock.fetch_add(1, Ordering::Relaxed)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Weak<dyn Mapped>>> {
        // A panic while holding this lock cannot leave the list inconsistent.
        self.inner
            .mapped
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Records that `segment` was just mapped and unmaps the least recently
    /// used others while over the cap. Called without any segment lock held.
    pub(crate) fn register<S: Mapped + 'static>(&self, segment: &Arc<S>) {
        let victims = {
            let mut mapped = self.lock();
            mapped.retain(|w| w.upgrade().is_some_and(|s| s.is_mapped()));
            let weak: Weak<S> = Arc::downgrade(segment);
            mapped.push(weak as Weak<dyn Mapped>);
            let mut live: Vec<Arc<dyn Mapped>> = mapped.iter().filter_map(Weak::upgrade).collect();
            let excess = live.len().saturating_sub(self.inner.max_mapped);
            live.sort_by_key(|s| s.last_used());
            live.retain(|s| !std::ptr::addr_eq(Arc::as_ptr(s), Arc::as_ptr(segment)));
            live.truncate(excess);
            live
        };
        for victim in victims {
            victim.unmap();
        }
    }
}
