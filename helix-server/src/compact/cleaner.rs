//! The background log cleaner (ADR 0027 §3, §8; Kafka's `LogCleaner` and
//! `LogCleanerManager`): every `log.cleaner.backoff.ms` it looks at the
//! local replicas of topics whose `cleanup.policy` has `compact`, and
//! cleans the filthiest of those the policy says should be cleaned, up
//! to `log.cleaner.threads` at once, until none is left.
//!
//! Each replica cleans its own log (ADR 0027 §1): below the least of its
//! active segment, its last stable offset, its high watermark and
//! `min.compaction.lag.ms` (`policy.rs`). The pass reads and writes
//! beside the live log on a blocking thread (`pass::prepare`); the swap
//! runs on the replica's writer (`Partition::swap_cleaned`). A pass that
//! meets damaged data marks the replica damaged as the scrubber's reads
//! do (ADR 0001); any failure makes the partition "uncleanable" (one WARN
//! line) until its log end moves.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use helix_raft::GroupId;
use helix_wal::KeptHorizon;

use super::clean::{DerivedState, LastBatch};
use super::pass::{self, LogShape, PassOutcome, PassSettings};
use super::policy::{self, CompactionConfig, LogPositions, LogToClean, SegmentSummary};
use super::stats::CleanerStats;
use crate::config::CleanerConfig;
use crate::error::{HelixError, Result};
use crate::offset::Offset;
use crate::replica::Partition;
use crate::replica::batch;

/// One local replica of a compacted topic, with what its topic says.
#[derive(Debug, Clone)]
pub struct CleanTarget {
    pub topic: String,
    pub partition: Arc<Partition>,
    pub config: CompactionConfig,
    /// `delete.retention.ms`: how long a tombstone outlives its key.
    pub delete_retention_ms: i64,
    pub shape: LogShape,
}

/// `log.cleaner.io.max.bytes.per.second` over every cleaner thread
/// (Kafka's `Throttler`): a pass that runs ahead of the rate sleeps.
#[derive(Debug)]
pub struct IoThrottle {
    bytes_per_second: f64,
    /// Start of the current measuring window and bytes since.
    window: Mutex<(Instant, u64)>,
}

/// How often the throttle starts measuring again (Kafka checks every
/// 300 ms).
const THROTTLE_WINDOW: Duration = Duration::from_millis(300);
/// Shorter pauses wait for more bytes (sleeps that short are mostly
/// scheduling noise).
const MIN_PAUSE: Duration = Duration::from_millis(10);

impl IoThrottle {
    pub fn new(bytes_per_second: f64) -> IoThrottle {
        IoThrottle {
            bytes_per_second,
            window: Mutex::new((Instant::now(), 0)),
        }
    }

    /// Counts `bytes` read or written; blocks the calling (blocking)
    /// thread while the cleaners are ahead of the rate.
    pub fn spend(&self, bytes: u64) {
        if !self.bytes_per_second.is_finite() || self.bytes_per_second >= f64::MAX {
            return;
        }
        let pause = {
            let Ok(mut w) = self.window.lock() else {
                return;
            };
            w.1 += bytes;
            let elapsed = w.0.elapsed();
            let due = Duration::from_secs_f64(w.1 as f64 / self.bytes_per_second);
            let pause = due.saturating_sub(elapsed);
            if elapsed < THROTTLE_WINDOW && pause < MIN_PAUSE {
                return;
            }
            // The next window starts once this pause is over.
            *w = (Instant::now() + pause, 0);
            pause
        };
        if !pause.is_zero() {
            std::thread::sleep(pause);
        }
    }
}

/// Runs until `targets` says the broker is gone: the cleaner's loop.
pub async fn run(
    settings: CleanerConfig,
    stats: Arc<CleanerStats>,
    targets: impl Fn() -> Option<Vec<CleanTarget>> + Send + 'static,
) {
    if !settings.enable {
        return;
    }
    let throttle = Arc::new(IoThrottle::new(settings.io_max_bytes_per_second));
    let backoff = Duration::from_millis(settings.backoff_ms.max(1));
    // Partitions whose last pass failed, with their log end then.
    let mut uncleanable: HashMap<GroupId, i64> = HashMap::new();
    // The latest delete horizon each partition's last pass kept, read
    // from the file the pass wrote (`kept_horizon`) when not known yet.
    let mut horizons: HashMap<GroupId, KeptHorizon> = HashMap::new();
    // Those of `uncleanable` whose pass failed (metric
    // `uncleanable_partitions`), not merely found nothing to do.
    let mut failed: HashSet<GroupId> = HashSet::new();
    loop {
        let Some(all) = targets() else { return };
        let now_ms = crate::clock::now_ms();
        uncleanable.retain(|group, end| {
            all.iter()
                .find(|t| t.partition.group == *group)
                .is_some_and(|t| t.partition.reader().next_offset() == *end)
        });
        failed.retain(|group| uncleanable.contains_key(group));
        horizons.retain(|group, _| all.iter().any(|t| t.partition.group == *group));
        stats.retain(|group| all.iter().any(|t| t.partition.group == group));
        for t in &all {
            stats.set_uncleanable(t.partition.group, failed.contains(&t.partition.group));
        }
        let candidates: Vec<(CleanTarget, LogToClean)> = all
            .into_iter()
            .filter(|t| !uncleanable.contains_key(&t.partition.group))
            .filter(|t| t.partition.damaged().is_none())
            .filter_map(|t| {
                let plan = plan(&t.partition, &t.config, now_ms)?;
                stats.planned(
                    t.partition.group,
                    plan.cleanable_bytes,
                    plan.cleanable_ratio,
                );
                Some((t, plan))
            })
            .collect();
        let (mut chosen, idle): (Vec<_>, Vec<_>) = candidates
            .into_iter()
            .partition(|(t, plan)| plan.should_clean(&t.config));
        let mut horizon_passes = false;
        if chosen.is_empty() {
            // Nothing dirty enough: clean the logs whose kept tombstones'
            // delete horizon has passed (Kafka's `grabFilthiestCompactedLog`
            // does the same when no log is dirty enough).
            chosen = idle
                .into_iter()
                .filter(|(t, _)| {
                    let p = &t.partition;
                    let kept = *horizons.entry(p.group).or_insert_with(|| kept_horizon(p));
                    match kept {
                        KeptHorizon::At(at) => at <= now_ms,
                        // One pass finds out (and records what it kept).
                        KeptHorizon::Unknown => true,
                        KeptHorizon::Nothing => false,
                    }
                })
                .collect();
            horizon_passes = true;
        }
        if chosen.is_empty() {
            tokio::time::sleep(backoff).await;
            continue;
        }
        // The filthiest first (Kafka's `grabFilthiestCompactedLog`).
        chosen.sort_by(|a, b| b.1.cleanable_ratio.total_cmp(&a.1.cleanable_ratio));
        chosen.truncate(settings.threads.max(1));
        let share = settings.dedupe_buffer_size / settings.threads.max(1);
        let mut passes = tokio::task::JoinSet::new();
        for (target, plan) in chosen {
            let pass_settings = PassSettings {
                dedupe_buffer_bytes: share,
                load_factor: settings.io_buffer_load_factor,
                write_buffer_bytes: settings.io_buffer_size / settings.threads.max(1) / 2,
                delete_retention_ms: target.delete_retention_ms,
                now_ms,
                horizon_passed: horizon_passes,
            };
            let throttle = throttle.clone();
            if horizon_passes {
                tracing::debug!(topic = %target.topic, partition = target.partition.index, "cleaning for tombstones whose delete horizon passed");
            }
            passes.spawn(async move {
                let started = Instant::now();
                let result = clean(&target, &plan, pass_settings, throttle).await;
                (target, result, started.elapsed())
            });
        }
        let mut progressed = false;
        while let Some(joined) = passes.join_next().await {
            let Ok((target, result, took)) = joined else {
                continue;
            };
            let p = &target.partition;
            match result {
                Ok(Some(outcome)) => {
                    progressed = true;
                    horizons.insert(p.group, kept_of(&outcome));
                    stats.cleaned(
                        p.group,
                        crate::clock::now_ms(),
                        u64::try_from(took.as_millis()).unwrap_or(u64::MAX),
                        outcome.bytes_before.saturating_sub(outcome.bytes_after),
                    );
                    tracing::info!(
                        topic = %target.topic,
                        partition = p.index,
                        cleaned_below = outcome.cleaned_below,
                        segments = outcome.segments_replaced,
                        bytes_before = outcome.bytes_before,
                        bytes_after = outcome.bytes_after,
                        "log cleaned"
                    );
                }
                Ok(None) => {
                    // Nothing to rewrite: not looked at again until its log
                    // changes. A horizon pass that found nothing found no
                    // cleaned segment either: nothing kept.
                    if horizon_passes {
                        let dir = p.reader().dir().to_path_buf();
                        let _ = tokio::task::spawn_blocking(move || {
                            helix_wal::write_cleaner_horizon(&dir, KeptHorizon::Nothing)
                        })
                        .await;
                        horizons.insert(p.group, KeptHorizon::Nothing);
                    }
                    uncleanable.insert(p.group, p.reader().next_offset());
                }
                Err(e) => {
                    let e = p.cleaning_failed(e);
                    tracing::warn!(topic = %target.topic, partition = p.index, error = %e, "log cleaning failed: the partition is not cleaned again until its log changes");
                    uncleanable.insert(p.group, p.reader().next_offset());
                    failed.insert(p.group);
                    stats.set_uncleanable(p.group, true);
                }
            }
        }
        if !progressed {
            tokio::time::sleep(backoff).await;
        }
    }
}

/// What a pass kept: the horizon its tombstones and markers wait for.
fn kept_of(outcome: &PassOutcome) -> KeptHorizon {
    outcome
        .stats
        .latest_delete_horizon_ms
        .map_or(KeptHorizon::Nothing, KeptHorizon::At)
}

/// The delete horizon kept in `p`'s cleaned segments, as the last pass
/// recorded it (ADR 0027 §6). Without a readable record, a log with a
/// cleaner checkpoint (cleaned, or caught up from a cleaned leader) may
/// hold tombstones with a horizon: `Unknown`, one pass finds out; one
/// without holds none.
fn kept_horizon(p: &Partition) -> KeptHorizon {
    let reader = p.reader();
    match helix_wal::read_cleaner_horizon(reader.dir()) {
        Ok(KeptHorizon::Unknown) | Err(_) => match helix_wal::read_cleaner_checkpoint(reader.dir())
        {
            Ok(None) => KeptHorizon::Nothing,
            Ok(Some(_)) | Err(_) => KeptHorizon::Unknown,
        },
        Ok(kept) => kept,
    }
}

/// The cleanable range of `p`'s log now (`policy.rs`).
fn plan(p: &Partition, config: &CompactionConfig, now_ms: i64) -> Option<LogToClean> {
    let reader = p.reader();
    let checkpoint = helix_wal::read_cleaner_checkpoint(reader.dir()).ok()?;
    let positions = LogPositions {
        log_start_offset: reader.log_start_offset(),
        log_end_offset: reader.next_offset(),
        checkpoint,
        last_stable_offset: p.last_stable_offset().0,
        high_watermark: p.high_watermark().0,
    };
    let first_dirty = checkpoint.unwrap_or(positions.log_start_offset);
    let infos = reader.segments();
    let sealed = infos.len().saturating_sub(1);
    // `max.compaction.lag.ms` looks at the oldest dirty record: the first
    // batch of the first dirty sealed segment (later ones are newer, as
    // Kafka assumes too), one header read per round.
    let first_dirty_segment = infos[..sealed]
        .iter()
        .position(|s| s.next_offset > first_dirty);
    let segments: Vec<SegmentSummary> = infos
        .iter()
        .enumerate()
        .map(|(i, s)| SegmentSummary {
            base_offset: s.base_offset,
            bytes: s.bytes,
            max_timestamp: s.max_timestamp,
            first_batch_timestamp: if Some(i) == first_dirty_segment {
                first_batch_timestamp(&reader, s.base_offset.max(first_dirty))
            } else {
                0
            },
        })
        .collect();
    policy::log_to_clean(&segments, &positions, config, now_ms)
}

/// The max timestamp of the first batch at or after `offset`; 0 when it
/// cannot be read (the policy then ignores it).
fn first_batch_timestamp(reader: &helix_wal::LogReader, offset: i64) -> i64 {
    reader
        .read(offset, 1)
        .ok()
        .and_then(|r| batch::parse_header(&r.bytes).ok())
        .map_or(0, |h| h.max_timestamp)
}

/// One pass over `target`: None when nothing turned out cleanable.
async fn clean(
    target: &CleanTarget,
    plan: &LogToClean,
    settings: PassSettings,
    throttle: Arc<IoThrottle>,
) -> Result<Option<PassOutcome>> {
    let p = &target.partition;
    let last_batches: HashMap<i64, LastBatch> = p
        .producer_last_batches()
        .await?
        .into_iter()
        .map(|b| {
            (
                b.producer_id,
                LastBatch {
                    last_data_offset: b.last_data_offset,
                    epoch: b.epoch,
                },
            )
        })
        .collect();
    let reader = p.reader();
    let upper = plan.first_uncleanable_offset;
    let aborted = p.try_aborted_transactions(Offset(reader.log_start_offset()), Offset(upper))?;
    let shape = target.shape;
    let prepared = tokio::task::spawn_blocking(move || {
        let derived = DerivedState {
            aborted: &aborted,
            producers: Some(&last_batches),
        };
        pass::prepare(&reader, shape, upper, &settings, &derived, &mut |bytes| {
            throttle.spend(bytes)
        })
    })
    .await
    .map_err(|e| HelixError::CorruptState(format!("cleaner pass panicked: {e}")))??;
    let Some(prepared) = prepared else {
        return Ok(None);
    };
    // The kept horizon is unknown while the swap runs: a crash then
    // leaves no record, so a pass after the restart looks again, where a
    // stale record could have said nothing was kept.
    let dir = p.reader().dir().to_path_buf();
    let kept = kept_of(&prepared.outcome);
    let record = move |kept| {
        let dir = dir.clone();
        async move {
            tokio::task::spawn_blocking(move || helix_wal::write_cleaner_horizon(&dir, kept))
                .await
                .map_err(|e| {
                    HelixError::CorruptState(format!("cleaner horizon write panicked: {e}"))
                })?
                .map_err(HelixError::from)
        }
    };
    if let Err(e) = record(KeptHorizon::Unknown).await {
        for intent in &prepared.intents {
            let _ = helix_wal::discard_cleaned(p.reader().dir(), intent.new_base);
        }
        return Err(e);
    }
    // One swap per group, each its own command on the replica's shard:
    // a swap holds the shard for its fsyncs (intent, renames, directory),
    // and a pass of many groups in one command held every partition of
    // that shard for all of them (seconds under a busy disk: produce p99
    // of 7-8 s while cleaning, docs/BENCHMARKS.md). Each command raises
    // the cleaner checkpoint to its own group's end first, so it is never
    // above a group not swapped nor below one that was.
    let ends: Vec<i64> = prepared
        .intents
        .iter()
        .skip(1)
        .map(|i| i.new_base)
        .chain([prepared.outcome.cleaned_below])
        .collect();
    let mut intents = prepared.intents.into_iter();
    for end in ends {
        let Some(intent) = intents.next() else { break };
        if let Err(e) = p.swap_cleaned(end, vec![intent]).await {
            for rest in intents {
                let _ = helix_wal::discard_cleaned(p.reader().dir(), rest.new_base);
            }
            return Err(e);
        }
    }
    if let Err(e) = record(kept).await {
        // Swapped: the record stays unknown, and a later pass finds out.
        tracing::warn!(partition = p.index, error = %e, "cannot record the cleaner's kept delete horizon");
    }
    Ok(Some(prepared.outcome))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_throttle_holds_the_rate() {
        let throttle = IoThrottle::new(1_000_000.0);
        let started = Instant::now();
        for _ in 0..100 {
            throttle.spend(10_000);
        }
        // 1 MB at 1 MB/s: about a second, less one pause's worth.
        assert!(started.elapsed() >= Duration::from_millis(950));
        let unlimited = IoThrottle::new(f64::MAX);
        let started = Instant::now();
        unlimited.spend(u64::MAX / 2);
        assert!(started.elapsed() < Duration::from_millis(100));
    }
}
