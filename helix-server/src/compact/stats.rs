//! What the log cleaner reports about each partition it looks at (ADR 0027
//! §10): how much is cleanable and how dirty it is when it last planned, when
//! it last cleaned and how long that took, how many bytes cleaning gave
//! back, and whether the partition is uncleanable (a pass failed; Kafka's
//! "uncleanable partitions"). Written by the cleaner task, read by
//! `/metrics`; bounded by the replicas this node holds.

use std::collections::HashMap;
use std::sync::Mutex;

use helix_raft::GroupId;

/// One partition's cleaning, as last reported.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PartitionCleaning {
    /// Bytes of the dirty sealed range the last plan found cleanable.
    pub cleanable_bytes: u64,
    /// dirty / (clean + dirty) at the last plan.
    pub dirty_ratio: f64,
    /// Wall time of the last pass that swapped segments in, in ms.
    pub last_clean_ms: Option<i64>,
    /// How long that pass took, in ms.
    pub last_duration_ms: u64,
    /// Bytes given back by every pass since the node started.
    pub reclaimed_bytes: u64,
    /// A pass failed; nothing is cleaned until the log changes.
    pub uncleanable: bool,
}

/// Every partition's cleaning report.
#[derive(Debug, Default)]
pub struct CleanerStats {
    partitions: Mutex<HashMap<GroupId, PartitionCleaning>>,
}

impl CleanerStats {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<GroupId, PartitionCleaning>> {
        self.partitions
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn with(&self, group: GroupId, f: impl FnOnce(&mut PartitionCleaning)) {
        let mut all = self.lock();
        f(all.entry(group).or_default());
    }

    /// The cleaner planned a pass (or found nothing to do).
    pub fn planned(&self, group: GroupId, cleanable_bytes: u64, dirty_ratio: f64) {
        self.with(group, |p| {
            p.cleanable_bytes = cleanable_bytes;
            p.dirty_ratio = dirty_ratio;
        });
    }

    /// A pass swapped its segments in at `at_ms` after `duration_ms`,
    /// giving back `reclaimed` bytes.
    pub fn cleaned(&self, group: GroupId, at_ms: i64, duration_ms: u64, reclaimed: u64) {
        self.with(group, |p| {
            p.last_clean_ms = Some(at_ms);
            p.last_duration_ms = duration_ms;
            p.reclaimed_bytes = p.reclaimed_bytes.saturating_add(reclaimed);
            p.uncleanable = false;
        });
    }

    /// Whether the partition is uncleanable now.
    pub fn set_uncleanable(&self, group: GroupId, uncleanable: bool) {
        self.with(group, |p| p.uncleanable = uncleanable);
    }

    /// Forgets partitions no longer held here.
    pub fn retain(&self, held: impl Fn(GroupId) -> bool) {
        let mut all = self.lock();
        all.retain(|g, _| held(*g));
    }

    /// Every report, for a scrape.
    pub fn reports(&self) -> Vec<(GroupId, PartitionCleaning)> {
        let all = self.lock();
        all.iter().map(|(g, p)| (*g, p.clone())).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reports_add_up_reclaimed_bytes_and_clear_uncleanable_on_a_clean() {
        let s = CleanerStats::default();
        s.planned(GroupId(7), 1000, 0.6);
        s.set_uncleanable(GroupId(7), true);
        s.cleaned(GroupId(7), 5, 12, 300);
        s.cleaned(GroupId(7), 9, 3, 200);
        let reports = s.reports();
        assert_eq!(
            reports,
            vec![(
                GroupId(7),
                PartitionCleaning {
                    cleanable_bytes: 1000,
                    dirty_ratio: 0.6,
                    last_clean_ms: Some(9),
                    last_duration_ms: 3,
                    reclaimed_bytes: 500,
                    uncleanable: false,
                }
            )]
        );
        s.retain(|g| g != GroupId(7));
        assert!(s.reports().is_empty());
    }
}
