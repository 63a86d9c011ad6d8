//! Log compaction (ADR 0027): keep the latest record per key of a
//! compacted topic's sealed, stable range. This step holds the pure parts:
//! the bounded key map, the transactions seen by a walk, the cleaning
//! of a run of batches, and the policy that picks the range. The
//! background cleaner, its configs and the segment rewrite in helix-wal come
//! next (ADR 0027, steps 2-5); until then nothing in the broker calls it.
#![cfg_attr(not(test), allow(dead_code))]

pub mod clean;
pub mod key_map;
pub mod policy;
pub mod txn;
