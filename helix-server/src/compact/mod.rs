//! Log compaction (ADR 0027): keep the latest record per key of a
//! compacted topic's sealed, stable range: the bounded key map, the
//! transactions seen by a walk, the cleaning of batches, the policy that
//! picks the range, a pass (on a live or a closed log) and the background
//! cleaner that runs passes on the node's compacted replicas.

pub mod clean;
pub mod cleaner;
pub mod key_map;
pub mod pass;
pub mod policy;
pub mod stats;
pub mod txn;
