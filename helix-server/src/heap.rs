//! Gives the heap back to the operating system after a produce burst.
//!
//! A burst fills the node's produce budget (100 MiB by default) with request
//! frames and Raft entries; once they are answered glibc's allocator keeps
//! the freed memory in its arenas (its mmap threshold grows with the large
//! buffers it saw), so a node that took one burst stayed at its peak RSS
//! (issue 30 item 1: 144 MiB of anonymous memory resident after the burst,
//! 3 MiB before). Every [`TRIM_INTERVAL`], if produce data arrived since the
//! last look and nothing is pending now, `malloc_trim(0)` returns the free
//! pages. Under steady load nothing is trimmed: the budget bounds memory.

use std::sync::atomic::Ordering;
use std::time::Duration;

use crate::budget::Backpressure;
use crate::metrics::metrics;

/// How often the node looks for an ended burst.
pub const TRIM_INTERVAL: Duration = Duration::from_secs(2);

/// Allocations at least this large get pages of their own from the kernel
/// and give them back when freed (glibc's `M_MMAP_THRESHOLD`, fixed here:
/// left to itself glibc raises it to the largest buffer freed so far, and
/// the arenas then keep every request frame and Raft entry a burst made).
pub const MMAP_THRESHOLD: usize = 256 << 10;

/// Called once at start, before any thread allocates.
pub fn configure() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only sets glibc's own parameters.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, MMAP_THRESHOLD as libc::c_int);
    }
}

/// Runs until the runtime stops.
pub async fn trim_after_bursts(backpressure: Backpressure) {
    let mut tick = tokio::time::interval(TRIM_INTERVAL);
    let mut seen = 0u64;
    loop {
        tick.tick().await;
        let produced = metrics().counters.produce_bytes.load(Ordering::Relaxed);
        if produced == seen || backpressure.in_use() != (0, 0) {
            continue;
        }
        seen = produced;
        let _ = tokio::task::spawn_blocking(trim).await;
    }
}

#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn trim() {
    // SAFETY: malloc_trim only walks glibc's own arenas; it is thread-safe.
    unsafe {
        libc::malloc_trim(0);
    }
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn trim() {}
