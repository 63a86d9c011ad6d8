//! One cleaning pass over a closed partition log (ADR 0027): the whole
//! data flow of compaction, from the WAL's entries through the key map and
//! the cleaning step to cleaned segments swapped in. The online cleaner
//! does the same with the log open (the segment list swapped under the
//! readers, step 2's `replace_segments`); this offline form is what the
//! tests drive today and what a tool could run on a stopped broker.
//!
//! Order of the durable steps: the cleaned segments are written beside
//! the old ones; the cleaner checkpoint (which lets the segments below it
//! hold gaps) is written before any swap, so a crash at any point leaves
//! segments that verify: old ones have no gaps, new ones are below the
//! checkpoint; then each group is swapped under its intent.

use std::path::Path;

use helix_wal::{LogConfig, PartitionLog, SegmentInfo, SegmentRewrite, SwapIntent};

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
    /// `delete.retention.ms`.
    pub delete_retention_ms: i64,
    pub now_ms: i64,
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

/// Cleans the sealed segments of the closed log in `dir` below `upper`
/// (the least of the LSO and the high watermark; the active segment is
/// never touched). None when nothing is cleanable.
pub fn clean_closed_log(
    dir: &Path,
    config: &LogConfig,
    upper: i64,
    settings: &PassSettings,
    derived: &DerivedState<'_>,
) -> Result<Option<PassOutcome>> {
    let (log, _) = PartitionLog::open(dir, config.clone())?;
    let reader = log.reader();
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
    if cleaned_below <= first_dirty {
        return Ok(None);
    }
    let horizons = Horizons {
        clean_below: cleaned_below,
        now_ms: settings.now_ms,
        delete_retention_ms: settings.delete_retention_ms,
    };
    let mut cleaner = Cleaner::new(&map, &horizons, derived);
    let mut intents: Vec<SwapIntent> = Vec::new();
    for group in groups(&chosen, config.segment_bytes) {
        let base = group[0].base_offset;
        // By Raft index, not offset: an empty entry at a segment's end has
        // the next segment's base as its offsets.
        let after = group[group.len() - 1].base_offset;
        let end_index = segments
            .iter()
            .filter(|s| s.base_offset > after)
            .find_map(|s| s.first_index)
            .unwrap_or(u64::MAX);
        let mut rewrite = SegmentRewrite::create(dir, base, config.index_interval_bytes)?;
        let mut stream = reader.entries_from(first_index_at(&segments, base));
        while let Some(entry) = stream.next_stored() {
            let entry = entry?;
            if entry.pos.index >= end_index {
                break;
            }
            let cleaned = cleaner.clean(&entry.batches)?.concat();
            rewrite.push_entry(entry.pos, entry.first_offset, entry.next_offset, &cleaned)?;
        }
        intents.push(rewrite.finish(group.iter().map(|s| s.base_offset).collect())?);
    }
    let bytes_before = chosen.iter().map(|s| s.bytes).sum();
    let bytes_after = intents.iter().map(|i| i.log_len).sum();
    drop(reader);
    log.close()?;
    helix_wal::write_cleaner_checkpoint(dir, cleaned_below)?;
    for intent in &intents {
        helix_wal::commit_swap(dir, intent)?;
    }
    Ok(Some(PassOutcome {
        mapped,
        cleaned_below,
        segments_replaced: chosen.len(),
        bytes_before,
        bytes_after,
        stats: cleaner.stats,
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
