//! When and how far to clean one partition (ADR 0027 §3; Kafka's
//! `LogCleanerManager.cleanableOffsets`, `maxCompactionDelay` and
//! `LogToClean`), as a pure function of what the replica's WAL and state
//! say: segment sizes and timestamps, the cleaner's checkpoint, the LSO
//! and the high watermark.

/// What the policy needs of one segment, oldest first; the last one is
/// the active segment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SegmentSummary {
    pub base_offset: i64,
    pub bytes: u64,
    /// Largest timestamp in the segment (`min.compaction.lag.ms`).
    pub max_timestamp: i64,
    /// The first batch's max timestamp (`max.compaction.lag.ms`); ≤ 0 when
    /// unknown.
    pub first_batch_timestamp: i64,
}

/// A topic's compaction settings (defaults as Kafka 3.9).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CompactionConfig {
    /// `min.cleanable.dirty.ratio` (0.5).
    pub min_cleanable_ratio: f64,
    /// `min.compaction.lag.ms` (0).
    pub min_compaction_lag_ms: i64,
    /// `max.compaction.lag.ms` (Long.MAX).
    pub max_compaction_lag_ms: i64,
}

impl Default for CompactionConfig {
    fn default() -> Self {
        CompactionConfig {
            min_cleanable_ratio: 0.5,
            min_compaction_lag_ms: 0,
            max_compaction_lag_ms: i64::MAX,
        }
    }
}

/// Where a replica's log stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LogPositions {
    pub log_start_offset: i64,
    pub log_end_offset: i64,
    /// The cleaner checkpoint: first offset not cleaned yet, if any.
    pub checkpoint: Option<i64>,
    pub last_stable_offset: i64,
    pub high_watermark: i64,
}

/// One partition's cleanable range and how dirty it is (Kafka's
/// `LogToClean`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LogToClean {
    pub first_dirty_offset: i64,
    /// Base offset of the first segment that is not cleaned this time.
    pub first_uncleanable_offset: i64,
    pub clean_bytes: u64,
    pub cleanable_bytes: u64,
    /// `cleanable / (clean + cleanable)`.
    pub cleanable_ratio: f64,
    /// `max.compaction.lag.ms` has passed for the oldest dirty record.
    pub need_compaction_now: bool,
    /// The checkpoint was outside the log and was reset to its start.
    pub checkpoint_reset: bool,
}

impl LogToClean {
    /// Kafka's test: cleaned when the lag forces it or the ratio passes.
    pub fn should_clean(&self, config: &CompactionConfig) -> bool {
        self.cleanable_bytes > 0
            && (self.need_compaction_now || self.cleanable_ratio > config.min_cleanable_ratio)
    }
}

/// The cleanable range of a log, or None when it has no segments.
pub fn log_to_clean(
    segments: &[SegmentSummary],
    positions: &LogPositions,
    config: &CompactionConfig,
    now_ms: i64,
) -> Option<LogToClean> {
    let active = segments.last()?;
    let start = positions.log_start_offset;
    let (first_dirty, checkpoint_reset) = match positions.checkpoint {
        None => (start, false),
        Some(c) if c < start || c > positions.log_end_offset => (start, true),
        Some(c) => (c, false),
    };
    let sealed = &segments[..segments.len() - 1];
    let dirty_sealed = sealed.get(floor(segments, first_dirty)..).unwrap_or(&[]);
    let min_lag = config.min_compaction_lag_ms.max(0);
    let too_young = (min_lag > 0)
        .then(|| {
            dirty_sealed
                .iter()
                .find(|s| s.max_timestamp > now_ms.saturating_sub(min_lag))
                .map(|s| s.base_offset)
        })
        .flatten();
    let uncleanable = [
        positions.last_stable_offset,
        positions.high_watermark,
        active.base_offset,
    ]
    .into_iter()
    .chain(too_young)
    .min()
    .unwrap_or(active.base_offset)
    .max(first_dirty);
    // Whole segments only: the range ends at the base of the segment that
    // holds the uncleanable offset (Kafka's `calculateCleanableBytes`).
    let first_uncleanable = segments[floor(segments, uncleanable)].base_offset;
    let clean_bytes = segments
        .iter()
        .filter(|s| s.base_offset < first_dirty)
        .map(|s| s.bytes)
        .sum();
    let from = first_dirty.min(first_uncleanable);
    let cleanable_bytes = segments[floor(segments, from)..]
        .iter()
        .take_while(|s| s.base_offset < first_uncleanable)
        .map(|s| s.bytes)
        .sum();
    let total: u64 = clean_bytes + cleanable_bytes;
    let cleanable_ratio = if total == 0 {
        0.0
    } else {
        cleanable_bytes as f64 / total as f64
    };
    let clean_until = now_ms.saturating_sub(config.max_compaction_lag_ms.max(0));
    let need_compaction_now = dirty_sealed
        .iter()
        .map(|s| s.first_batch_timestamp)
        .filter(|t| *t > 0)
        .min()
        .is_some_and(|earliest| earliest < clean_until);
    Some(LogToClean {
        first_dirty_offset: first_dirty,
        first_uncleanable_offset: first_uncleanable.max(first_dirty),
        clean_bytes,
        cleanable_bytes,
        cleanable_ratio,
        need_compaction_now,
        checkpoint_reset,
    })
}

/// Index of the segment holding `offset` (the last one based at or
/// before it; 0 when it is before them all).
fn floor(segments: &[SegmentSummary], offset: i64) -> usize {
    segments
        .partition_point(|s| s.base_offset <= offset)
        .saturating_sub(1)
}

#[cfg(test)]
#[path = "policy_tests.rs"]
mod tests;
