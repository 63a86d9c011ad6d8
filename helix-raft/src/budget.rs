//! A memory budget shared by every group of a node (or of one worker).
//!
//! Each group's in-memory log adds what it holds and subtracts what it
//! releases; a leader refuses proposals (`ProposeError::Backpressure`) while
//! the node is over its budget, so a slow follower or a burst turns into
//! back-pressure to producers, never into unbounded memory. Followers count
//! toward the budget but never refuse appends (they release on apply).
//! Lock-free: one relaxed atomic add per change, so groups stay independent
//! across worker threads.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

/// A shared byte budget. Cloning shares it.
#[derive(Clone, Debug)]
pub struct MemoryBudget {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    used: AtomicUsize,
    limit: usize,
}

impl MemoryBudget {
    #[must_use]
    pub fn new(limit: usize) -> Self {
        MemoryBudget {
            inner: Arc::new(Inner {
                used: AtomicUsize::new(0),
                limit,
            }),
        }
    }

    #[must_use]
    pub fn used(&self) -> usize {
        self.inner.used.load(Ordering::Relaxed)
    }

    #[must_use]
    pub fn limit(&self) -> usize {
        self.inner.limit
    }

    /// Would `bytes` more fit?
    #[must_use]
    pub fn fits(&self, bytes: usize) -> bool {
        self.used().saturating_add(bytes) <= self.inner.limit
    }

    pub(crate) fn add(&self, bytes: usize) {
        self.inner.used.fetch_add(bytes, Ordering::Relaxed);
    }

    pub(crate) fn sub(&self, bytes: usize) {
        self.inner.used.fetch_sub(bytes, Ordering::Relaxed);
    }
}
