//! The pure cleaning step (ADR 0027 §5-§7): batches of the dirty range in,
//! cleaned batches out. No files, no clock, no producer table: the caller
//! passes the key map, the horizons and the producers whose last batch
//! must stay, so the same input always gives the same bytes.
//!
//! What stays true of the output, batch by batch:
//! - a batch keeps its base offset, lastOffsetDelta, maxTimestamp and
//!   producer fields; only its record count, length and CRC change (and,
//!   once, its delete horizon: KIP-534's attribute bit and firstTimestamp);
//! - kept records are the stored bytes (only the timestamp delta is
//!   rebased when a delete horizon is set, so every record's timestamp is
//!   unchanged), so their offsets are their original ones and offsets stay
//!   strictly increasing, with gaps where records went;
//! - a batch whose records all go is dropped, unless it holds the last
//!   sequence of a producer still tracked: then it is kept empty (Kafka's
//!   `RETAIN_EMPTY`) so the producer state rebuilt from the log is the same;
//! - a compressed batch is written again in its own codec, at that codec's
//!   default level (as Kafka's cleaner does);
//! - transactions as Kafka's cleaner (`txn.rs`): batches of aborted
//!   transactions go and are never mapped; a marker goes once no batch of
//!   its transaction is left and its delete horizon has passed (set, like
//!   a tombstone's, by the first pass that finds it may go).

use std::collections::HashMap;

use bytes::Bytes;
use helix_wal::batch::{BatchHeader, Batches, with_cleaned_records};

use super::key_map::KeyMap;
use super::txn::CleanedTxns;
use crate::error::{HelixError, Result};
use crate::replica::markers::AbortedTxn;
use crate::replica::recompress::{TopicCompression, recompress};
use crate::replica::records::{RecordView, records_section, split_records};

/// Largest decompressed records section of one batch the cleaner holds.
/// The produce path already bounds what a batch may decompress to; this
/// keeps a damaged batch from asking for more.
pub const MAX_RECORDS_SECTION: usize = 256 << 20;

/// What bounds one pass.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Horizons {
    /// First offset this pass does not clean: the end of the mapped range
    /// (never above the active segment, the LSO or the high watermark).
    /// Records at or above it are kept as they are.
    pub clean_below: i64,
    /// The cleaner's clock, for the delete horizon.
    pub now_ms: i64,
    /// `delete.retention.ms`: how long a tombstone outlives the pass that
    /// first kept it as the only record of its key.
    pub delete_retention_ms: i64,
}

/// The batch that holds what the producer table knows of one producer
/// (Kafka's `LastRecord`): it stays, emptied if need be, so the table
/// rebuilt from the log is the same.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LastBatch {
    /// Last offset of its last data batch (the last sequence is in it);
    /// None when its last entry is a marker.
    pub last_data_offset: Option<i64>,
    /// Its epoch: a marker of this epoch carries it when there is no data.
    pub epoch: i16,
}

/// What the replica derived from its log and the batches do not say.
#[derive(Debug, Clone, Copy, Default)]
pub struct DerivedState<'a> {
    /// The aborted transactions overlapping the range (`markers.rs`).
    pub aborted: &'a [AbortedTxn],
    /// Producer id → its last batch, for every producer still tracked.
    pub producers: Option<&'a HashMap<i64, LastBatch>>,
}

impl DerivedState<'_> {
    /// Kafka's `isBatchLastRecordOfProducer`.
    fn holds_producer_state(&self, h: &BatchHeader) -> bool {
        if h.producer_id < 0 {
            return false;
        }
        let Some(last) = self.producers.and_then(|p| p.get(&h.producer_id)) else {
            return false;
        };
        match last.last_data_offset {
            Some(offset) => h.last_offset() == offset,
            None => h.is_control() && h.producer_epoch == last.epoch,
        }
    }
}

/// How far a key map reaches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Mapped {
    /// First offset not mapped: the cleanable range of this pass ends here.
    pub end: i64,
    /// The map filled before `upper`: the rest waits for the next pass.
    pub full: bool,
}

/// Counts of one pass, for the cleaner's metrics and log line.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CleanStats {
    pub batches_read: u64,
    pub batches_dropped: u64,
    pub records_read: u64,
    pub records_removed: u64,
    /// Records without a key, removed (Kafka counts them as invalid).
    pub keyless_removed: u64,
    pub bytes_read: u64,
    pub bytes_written: u64,
    /// The latest delete horizon still ahead among the batches kept: when
    /// it passes, a pass over the cleaned segments removes their
    /// tombstones and markers (Kafka's `latestDeleteHorizon`).
    pub latest_delete_horizon_ms: Option<i64>,
}

/// Maps the latest offset of every key in `batches` (whole batches, offset
/// order) whose batch ends below `upper`, except in control batches and
/// aborted transactions. Stops at the batch where the map fills: the
/// range ends at that batch's base offset. Keys already inserted from
/// that batch are at or past the end, where nothing is cleaned, so they
/// only ever point at a record that stays.
// The whole-batch form of the pieces the pass uses; tests drive it.
#[cfg_attr(not(test), allow(dead_code))]
pub fn build_key_map(
    batches: &[u8],
    upper: i64,
    aborted: &[AbortedTxn],
    map: &mut KeyMap,
) -> Result<Mapped> {
    let mut builder = MapBuilder::new(map, upper, aborted);
    builder.feed(batches)?;
    Ok(builder.finish())
}

/// [`build_key_map`] fed a piece at a time (entry by entry, as the WAL
/// streams them), keeping the transactions seen across pieces.
pub struct MapBuilder<'a> {
    map: &'a mut KeyMap,
    upper: i64,
    txns: CleanedTxns,
    end: Option<i64>,
    stopped: Option<Mapped>,
}

impl<'a> MapBuilder<'a> {
    pub fn new(map: &'a mut KeyMap, upper: i64, aborted: &[AbortedTxn]) -> MapBuilder<'a> {
        MapBuilder {
            map,
            upper,
            txns: CleanedTxns::new(aborted.to_vec()),
            end: None,
            stopped: None,
        }
    }

    /// Maps the next batches; false once the range has ended (the map is
    /// full or `upper` is reached): later pieces are not looked at.
    pub fn feed(&mut self, batches: &[u8]) -> Result<bool> {
        if self.stopped.is_some() {
            return Ok(false);
        }
        for item in Batches::new(batches) {
            let (h, range) = item.map_err(|e| HelixError::CorruptBatch(e.to_string()))?;
            if h.next_offset() > self.upper {
                self.stopped = Some(Mapped {
                    end: self.end.unwrap_or(h.base_offset).min(self.upper),
                    full: false,
                });
                return Ok(false);
            }
            let batch = &batches[range];
            let skip = if h.is_control() {
                self.txns.on_control_batch(&h, batch);
                true
            } else {
                self.txns.on_data_batch(&h)
            };
            if !skip {
                let section = records_section(batch, MAX_RECORDS_SECTION)?;
                for r in split_records(&section)? {
                    let Some(key) = r.key else { continue };
                    let offset = h.base_offset + i64::from(r.offset_delta);
                    if self.map.insert(key, offset).is_err() {
                        self.stopped = Some(Mapped {
                            end: h.base_offset,
                            full: true,
                        });
                        return Ok(false);
                    }
                }
            }
            self.end = Some(h.next_offset());
        }
        Ok(true)
    }

    /// Where the mapped range ends.
    pub fn finish(self) -> Mapped {
        self.stopped.unwrap_or(Mapped {
            end: self.end.unwrap_or(self.upper).min(self.upper),
            full: false,
        })
    }
}

/// Cleans `batches` (whole batches, offset order, starting where the walk
/// of `derived.aborted` starts) against `map`.
// The whole-batch form of the pieces the pass uses; tests drive it.
#[cfg_attr(not(test), allow(dead_code))]
pub fn clean(
    batches: &[u8],
    map: &KeyMap,
    horizons: &Horizons,
    derived: &DerivedState<'_>,
) -> Result<(Vec<Bytes>, CleanStats)> {
    let mut cleaner = Cleaner::new(map, horizons, derived);
    let out = cleaner.clean(batches)?;
    Ok((out, cleaner.stats))
}

/// [`clean`] fed a piece at a time (entry by entry), keeping the
/// transactions seen across pieces.
pub struct Cleaner<'a> {
    pass: Pass<'a>,
    txns: CleanedTxns,
    pub stats: CleanStats,
}

impl<'a> Cleaner<'a> {
    pub fn new(
        map: &'a KeyMap,
        horizons: &'a Horizons,
        derived: &'a DerivedState<'a>,
    ) -> Cleaner<'a> {
        Cleaner {
            pass: Pass {
                map,
                horizons,
                derived,
            },
            txns: CleanedTxns::new(derived.aborted.to_vec()),
            stats: CleanStats::default(),
        }
    }

    /// The cleaned form of the next batches.
    pub fn clean(&mut self, batches: &[u8]) -> Result<Vec<Bytes>> {
        let mut out = Vec::new();
        for item in Batches::new(batches) {
            let (h, range) = item.map_err(|e| HelixError::CorruptBatch(e.to_string()))?;
            let batch = &batches[range];
            self.stats.batches_read += 1;
            self.stats.bytes_read += batch.len() as u64;
            match self
                .pass
                .clean_batch(batch, &h, &mut self.txns, &mut self.stats)?
            {
                Some(b) => {
                    self.stats.bytes_written += b.len() as u64;
                    out.push(b);
                }
                None => self.stats.batches_dropped += 1,
            }
        }
        Ok(out)
    }
}

/// The inputs of one pass, shared by its batches.
struct Pass<'a> {
    map: &'a KeyMap,
    horizons: &'a Horizons,
    derived: &'a DerivedState<'a>,
}

impl Pass<'_> {
    /// One batch: the same bytes, rebuilt bytes, or None when dropped.
    fn clean_batch(
        &self,
        batch: &[u8],
        h: &BatchHeader,
        txns: &mut CleanedTxns,
        stats: &mut CleanStats,
    ) -> Result<Option<Bytes>> {
        let horizons = self.horizons;
        if h.base_offset >= horizons.clean_below {
            return Ok(Some(Bytes::copy_from_slice(batch)));
        }
        let section = records_section(batch, MAX_RECORDS_SECTION)?;
        let records = split_records(&section)?;
        stats.records_read += records.len() as u64;
        let horizon_passed = h
            .delete_horizon_ms()
            .is_some_and(|horizon| horizons.now_ms >= horizon);
        // What stays, and whether what stays needs a delete horizon.
        let (kept, wants_horizon) = if h.is_control() {
            let may_go = txns.on_control_batch(h, batch);
            if may_go && horizon_passed {
                (Vec::new(), false)
            } else {
                (records.clone(), may_go)
            }
        } else if txns.on_data_batch(h) {
            (Vec::new(), false)
        } else {
            let kept: Vec<RecordView<'_>> = records
                .iter()
                .filter(|r| self.keep_record(r, h, horizon_passed, stats))
                .copied()
                .collect();
            let tombstone = kept.iter().any(|r| r.value.is_none());
            (kept, tombstone)
        };
        stats.records_removed += (records.len() - kept.len()) as u64;
        // KIP-534: the first pass that keeps a tombstone (or a marker that
        // may go) of a batch wholly inside the cleaned range starts its
        // delete horizon.
        let horizon = (wants_horizon
            && h.delete_horizon_ms().is_none()
            && h.last_offset() < horizons.clean_below)
            .then(|| horizons.now_ms.saturating_add(horizons.delete_retention_ms));
        let ahead = horizon
            .or(h.delete_horizon_ms())
            .filter(|at| *at > horizons.now_ms && !kept.is_empty());
        if let Some(at) = ahead {
            stats.latest_delete_horizon_ms = stats.latest_delete_horizon_ms.max(Some(at));
        }
        if kept.len() == records.len() && horizon.is_none() {
            return Ok(Some(Bytes::copy_from_slice(batch)));
        }
        if kept.is_empty() {
            if !self.derived.holds_producer_state(h) {
                return Ok(None);
            }
            let empty = with_cleaned_records(batch, &[], 0, None)
                .map_err(|e| HelixError::CorruptBatch(e.to_string()))?;
            return Ok(Some(Bytes::from(empty)));
        }
        let mut section = Vec::with_capacity(section.len());
        for r in &kept {
            write_record(&mut section, r, h.first_timestamp, horizon);
        }
        let count = i32::try_from(kept.len()).unwrap_or(i32::MAX);
        let plain = with_cleaned_records(batch, &section, count, horizon)
            .map_err(|e| HelixError::CorruptBatch(e.to_string()))?;
        let plain = Bytes::from(plain);
        let codec = match h.compression() {
            0 => return Ok(Some(plain)),
            1 => TopicCompression::Gzip(-1),
            2 => TopicCompression::Snappy,
            3 => TopicCompression::Lz4(9),
            4 => TopicCompression::Zstd(3),
            other => {
                return Err(HelixError::CorruptBatch(format!(
                    "unknown compression codec {other}"
                )));
            }
        };
        recompress(&plain, codec, usize::MAX).map(Some)
    }

    /// Kafka's `shouldRetainRecord` for a record of a data batch that is
    /// not aborted.
    fn keep_record(
        &self,
        r: &RecordView<'_>,
        h: &BatchHeader,
        horizon_passed: bool,
        stats: &mut CleanStats,
    ) -> bool {
        let offset = h.base_offset + i64::from(r.offset_delta);
        if offset >= self.horizons.clean_below {
            return true;
        }
        let Some(key) = r.key else {
            stats.keyless_removed += 1;
            return false;
        };
        let latest = self.map.get(key).is_none_or(|latest| latest <= offset);
        latest && (r.value.is_some() || !horizon_passed)
    }
}

/// Appends `r` (length prefix and body) to `out`; with a new base
/// timestamp, its timestamp delta is rebased on it.
fn write_record(out: &mut Vec<u8>, r: &RecordView<'_>, old_base: i64, new_base: Option<i64>) {
    let Some(new_base) = new_base else {
        put_varlong(out, r.body.len() as i64);
        out.extend_from_slice(r.body);
        return;
    };
    let timestamp = old_base.wrapping_add(r.timestamp_delta);
    let mut body = Vec::with_capacity(r.body.len() + 10);
    body.push(r.body[0]);
    put_varlong(&mut body, timestamp.wrapping_sub(new_base));
    body.extend_from_slice(&r.body[r.after_timestamp..]);
    put_varlong(out, body.len() as i64);
    out.extend_from_slice(&body);
}

/// A zigzag varlong, as Kafka's records encode lengths and deltas.
fn put_varlong(out: &mut Vec<u8>, v: i64) {
    let mut z = ((v << 1) ^ (v >> 63)) as u64;
    while z >= 0x80 {
        out.push((z as u8) | 0x80);
        z >>= 7;
    }
    out.push(z as u8);
}

#[cfg(test)]
#[path = "clean_tests.rs"]
pub(crate) mod tests;
