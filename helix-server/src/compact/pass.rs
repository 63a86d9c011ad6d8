//! One cleaning pass over a partition log (ADR 0027): the whole data flow
//! of compaction, from the WAL's entries through the key map and the
//! cleaning step to cleaned segments. [`prepare`] reads through a
//! `LogReader` and writes the `.cleaned` files beside a live log (the
//! background cleaner, `cleaner.rs`, then has the replica's writer swap
//! them in with `PartitionLog::replace_segments`); [`clean_closed_log`]
//! does the whole pass on a closed log (tests, or a tool on a stopped
//! broker).
//!
//! Order of the durable steps: the cleaned segments are written beside
//! the old ones; the cleaner checkpoint (which lets the segments below it
//! hold gaps) is written before any swap, so a crash at any point leaves
//! segments that verify: old ones have no gaps, new ones are below the
//! checkpoint; then each group is swapped under its intent.

use std::path::Path;

use helix_wal::{LogConfig, LogReader, PartitionLog, SegmentInfo, SegmentRewrite, SwapIntent};

use super::clean::{CleanStats, Cleaner, DerivedState, Horizons, MapBuilder, Mapped};
use super::key_map::KeyMap;
use crate::error::Result;

/// What bounds one pass.
#[derive(Debug, Clone, Copy)]
pub struct PassSettings {
    /// `log.cleaner.dedupe.buffer.size` for this pass.
    pub dedupe_buffer_bytes: usize,
    /// `log.cleaner.io.buffer.load.factor`.
    pub load_factor: f64,
    /// Bytes of cleaned batches gathered before each write of a cleaned
    /// segment: `log.cleaner.io.buffer.size / threads / 2`, Kafka's write
    /// buffer (reads need no buffer: batches are read in place in the
    /// segments' mappings; ADR 0027 §8).
    pub write_buffer_bytes: usize,
    /// `delete.retention.ms`.
    pub delete_retention_ms: i64,
    pub now_ms: i64,
    /// Rewrite the cleaned segments even with nothing dirty: a delete
    /// horizon kept by an earlier pass has passed, and its tombstones and
    /// markers go now (Kafka cleans such a log when no log is dirty
    /// enough, KIP-534).
    pub horizon_passed: bool,
}

/// What a pass did.
#[derive(Debug, Clone, PartialEq)]
pub struct PassOutcome {
    pub mapped: Mapped,
    /// The new cleaner checkpoint: every segment below it is cleaned.
    pub cleaned_below: i64,
    pub segments_replaced: usize,
    pub bytes_before: u64,
    pub bytes_after: u64,
    pub stats: CleanStats,
}

/// A pass planned and written, not yet swapped in: its `.cleaned` files
/// sit beside the segments they replace.
#[derive(Debug)]
pub struct Prepared {
    pub outcome: PassOutcome,
    /// One swap per group of segments, in offset order.
    pub intents: Vec<SwapIntent>,
}

/// What a pass needs of the log's settings.
#[derive(Debug, Clone, Copy)]
pub struct LogShape {
    /// `segment.bytes`: a group's segments add up to at most this.
    pub segment_bytes: u64,
    pub index_interval_bytes: u64,
}

impl From<&LogConfig> for LogShape {
    fn from(c: &LogConfig) -> Self {
        LogShape {
            segment_bytes: c.segment_bytes,
            index_interval_bytes: c.index_interval_bytes,
        }
    }
}

/// Cleans the sealed segments of the closed log in `dir` below `upper`
/// (the least of the LSO and the high watermark; the active segment is
/// never touched). None when nothing is cleanable.
// A tool's entry (and the tests'): the broker cleans live logs.
#[cfg_attr(not(test), allow(dead_code))]
pub fn clean_closed_log(
    dir: &Path,
    config: &LogConfig,
    upper: i64,
    settings: &PassSettings,
    derived: &DerivedState<'_>,
) -> Result<Option<PassOutcome>> {
    let (log, _) = PartitionLog::open(dir, config.clone())?;
    let prepared = prepare(
        &log.reader(),
        config.into(),
        upper,
        settings,
        derived,
        &mut |_| {},
    )?;
    log.close()?;
    let Some(prepared) = prepared else {
        return Ok(None);
    };
    helix_wal::write_cleaner_checkpoint(dir, prepared.outcome.cleaned_below)?;
    for intent in &prepared.intents {
        helix_wal::commit_swap(dir, intent)?;
    }
    Ok(Some(prepared.outcome))
}

/// Plans a pass over the log `reader` reads (open or closed) and writes
/// its cleaned segments: everything but the swap, so it runs beside the
/// log's writer. `throttle` is told every byte read and written (the
/// cleaner's rate limit). On an error the `.cleaned` files written so far
/// are removed.
pub fn prepare(
    reader: &LogReader,
    shape: LogShape,
    upper: i64,
    settings: &PassSettings,
    derived: &DerivedState<'_>,
    throttle: &mut dyn FnMut(u64),
) -> Result<Option<Prepared>> {
    let mut written = Vec::new();
    let prepared = write_pass(
        reader,
        shape,
        upper,
        settings,
        derived,
        throttle,
        &mut written,
    );
    if prepared.is_err() {
        for base in written {
            let _ = helix_wal::discard_cleaned(reader.dir(), base);
        }
    }
    prepared
}

fn write_pass(
    reader: &LogReader,
    shape: LogShape,
    upper: i64,
    settings: &PassSettings,
    derived: &DerivedState<'_>,
    throttle: &mut dyn FnMut(u64),
    written: &mut Vec<i64>,
) -> Result<Option<Prepared>> {
    let dir = reader.dir();
    let segments = reader.segments();
    let Some(active) = segments.last() else {
        return Ok(None);
    };
    let upper = upper.min(active.base_offset);
    let start = reader.log_start_offset();
    let first_dirty = helix_wal::read_cleaner_checkpoint(dir)?
        .filter(|c| (start..=reader.next_offset()).contains(c))
        .unwrap_or(start);

    // The key map, over the dirty range in offset order.
    let mut map = KeyMap::with_capacity_bytes(settings.dedupe_buffer_bytes, settings.load_factor);
    let mut builder = MapBuilder::new(&mut map, upper, derived.aborted);
    let mut stream = reader.entries_from(first_index_at(&segments, first_dirty));
    while let Some(entry) = stream.next_stored() {
        let entry = entry?;
        if entry.next_offset <= first_dirty {
            continue;
        }
        if entry.first_offset >= upper {
            break;
        }
        throttle(entry.batches.len() as u64);
        if !builder.feed(&entry.batches)? {
            break;
        }
    }
    let mapped = builder.finish();
    // Whole sealed segments only, from the log start (cleaned ones are
    // cleaned again against the newer keys, as Kafka does).
    let chosen: Vec<SegmentInfo> = segments[..segments.len() - 1]
        .iter()
        .filter(|s| s.next_offset <= mapped.end && s.next_offset > start)
        .copied()
        .collect();
    let Some(last) = chosen.last() else {
        return Ok(None);
    };
    let cleaned_below = last.next_offset;
    if cleaned_below <= first_dirty && !settings.horizon_passed {
        return Ok(None);
    }
    let horizons = Horizons {
        clean_below: cleaned_below,
        now_ms: settings.now_ms,
        delete_retention_ms: settings.delete_retention_ms,
    };
    let mut cleaner = Cleaner::new(&map, &horizons, derived);
    let mut intents: Vec<SwapIntent> = Vec::new();
    for group in groups(&chosen, shape.segment_bytes) {
        let base = group[0].base_offset;
        // By Raft index, not offset: an empty entry at a segment's end has
        // the next segment's base as its offsets.
        let after = group[group.len() - 1].base_offset;
        let end_index = segments
            .iter()
            .filter(|s| s.base_offset > after)
            .find_map(|s| s.first_index)
            .unwrap_or(u64::MAX);
        written.push(base);
        let mut rewrite = SegmentRewrite::create(dir, base, shape.index_interval_bytes)?
            .with_write_buffer(settings.write_buffer_bytes);
        let mut stream = reader.entries_from(first_index_at(&segments, base));
        while let Some(entry) = stream.next_stored() {
            let entry = entry?;
            if entry.pos.index >= end_index {
                break;
            }
            let cleaned = cleaner.clean(&entry.batches)?.concat();
            throttle((entry.batches.len() + cleaned.len()) as u64);
            rewrite.push_entry(entry.pos, entry.first_offset, entry.next_offset, &cleaned)?;
        }
        intents.push(rewrite.finish(group.iter().map(|s| s.base_offset).collect())?);
    }
    let bytes_before = chosen.iter().map(|s| s.bytes).sum();
    let bytes_after = intents.iter().map(|i| i.log_len).sum();
    Ok(Some(Prepared {
        outcome: PassOutcome {
            mapped,
            cleaned_below,
            segments_replaced: chosen.len(),
            bytes_before,
            bytes_after,
            stats: cleaner.stats,
        },
        intents,
    }))
}

/// Raft index of the first entry of the segment holding `offset`.
fn first_index_at(segments: &[SegmentInfo], offset: i64) -> u64 {
    let at = segments
        .partition_point(|s| s.base_offset <= offset)
        .saturating_sub(1);
    segments[at..]
        .iter()
        .find_map(|s| s.first_index)
        .unwrap_or(0)
}

/// Consecutive segments whose sizes add up to at most `segment_bytes`
/// (at least one each): each group becomes one segment (Kafka's
/// `groupSegmentsBySize`, on the sizes before cleaning).
fn groups(segments: &[SegmentInfo], segment_bytes: u64) -> Vec<&[SegmentInfo]> {
    let mut out = Vec::new();
    let mut from = 0;
    while from < segments.len() {
        let mut to = from + 1;
        let mut bytes = segments[from].bytes;
        while to < segments.len() && bytes + segments[to].bytes <= segment_bytes {
            bytes += segments[to].bytes;
            to += 1;
        }
        out.push(&segments[from..to]);
        from = to;
    }
    out
}

#[cfg(test)]
#[path = "pass_tests.rs"]
mod tests;
