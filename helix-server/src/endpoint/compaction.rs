//! The log cleaner's reports (`compact::stats`) as metric families: per
//! partition while the node holds at most `metrics_partition_series_max`
//! replicas, and always the node's totals (bytes reclaimed, uncleanable
//! partitions).

use prometheus_client::metrics::MetricType::{Counter, Gauge};

use super::families::{Families, Labels};
use super::replicas::replica_names;
use crate::broker::Broker;
use crate::compact::stats::PartitionCleaning;

/// Adds the cleaner's families; `per_partition` as for the replicas'.
pub fn compaction(f: &mut Families, b: &Broker, per_partition: bool) {
    let names = replica_names(b);
    let mut rows: Vec<(Labels, PartitionCleaning)> = b
        .cleaner_stats
        .reports()
        .into_iter()
        .filter_map(|(group, report)| {
            let (topic, index) = names.get(&group)?.clone();
            Some((
                vec![("topic", topic), ("partition", index.to_string())],
                report,
            ))
        })
        .collect();
    rows.sort_by(|a, b| a.0.cmp(&b.0));
    f.gauge(
        "uncleanable_partitions",
        "Compacted partitions whose last cleaning failed (nothing is cleaned until their log changes)",
        rows.iter().filter(|(_, r)| r.uncleanable).count() as f64,
    );
    f.counter(
        "compaction_bytes_reclaimed",
        "Bytes the log cleaner gave back on this node since it started",
        rows.iter().map(|(_, r)| r.reclaimed_bytes).sum::<u64>() as f64,
    );
    if !per_partition {
        return;
    }
    let series = |read: fn(&PartitionCleaning) -> Option<f64>| -> Vec<(Labels, f64)> {
        rows.iter()
            .filter_map(|(l, r)| Some((l.clone(), read(r)?)))
            .collect()
    };
    f.scalar(
        "compaction_cleanable_bytes",
        "Bytes of the dirty sealed range the cleaner's last plan found cleanable",
        None,
        Gauge,
        series(|r| Some(r.cleanable_bytes as f64)),
    );
    f.scalar(
        "compaction_dirty_ratio",
        "Dirty bytes over all bytes of the cleanable log at the cleaner's last plan",
        None,
        Gauge,
        series(|r| Some(r.dirty_ratio)),
    );
    f.scalar(
        "compaction_last_clean_timestamp_ms",
        "Wall time of the last cleaning that swapped segments in, in ms",
        None,
        Gauge,
        series(|r| r.last_clean_ms.map(|t| t as f64)),
    );
    f.scalar(
        "compaction_last_clean_duration_ms",
        "How long the last cleaning that swapped segments in took, in ms",
        None,
        Gauge,
        series(|r| r.last_clean_ms.map(|_| r.last_duration_ms as f64)),
    );
    f.scalar(
        "compaction_partition_bytes_reclaimed",
        "Bytes the log cleaner gave back in this partition since the node started",
        None,
        Counter,
        series(|r| Some(r.reclaimed_bytes as f64)),
    );
}
