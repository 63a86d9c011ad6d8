//! Log compaction (ADR 0027): keep the latest record per key of a
//! compacted topic's sealed, stable range. Built so far: the bounded key
//! map, the transactions seen by a walk, the cleaning of batches, the
//! policy that picks the range, and a whole pass over a closed log. The
//! background cleaner on live logs, its configs and metrics come next
//! (ADR 0027, steps 2-5); until then nothing in the broker calls it.
#![cfg_attr(not(test), allow(dead_code))]

pub mod clean;
pub mod key_map;
pub mod pass;
pub mod policy;
pub mod txn;
