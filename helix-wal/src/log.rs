//! `PartitionLog`: the single writer of one partition's log. It validates and
//! appends Raft entries of v2 batches, rolls segments, writes recovery
//! checkpoints, and publishes what readers may see.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::Ordering;

use crate::active::ActiveSegment;
use crate::batch::{self, BatchHeader, Batches};
use crate::budget::FileBudget;
use crate::config::{Durability, LogConfig};
use crate::error::{Result, WalError};
use crate::meta::Checkpoint;
use crate::positions::{self, EntryStream};
use crate::reader::LogReader;
use crate::recovery;
use crate::shared::{PositionCell, Shared};
use crate::sync::{LogSync, Mark, SyncGroup};
use crate::types::{AppendCheck, AppendInfo, DeleteRecordsEntry, EpochEnd, RaftPosition, Recovery};

pub(crate) mod delete_records;
mod restart;
mod stored;

/// The on-disk log of one partition. One writer (`&mut self`); any number of
/// [`LogReader`]s.
pub struct PartitionLog {
    pub(crate) dir: PathBuf,
    pub(crate) config: LogConfig,
    pub(crate) shared: Arc<Shared>,
    pub(crate) active: ActiveSegment,
    pub(crate) sync: Option<(SyncGroup, Arc<LogSync>)>,
    /// Set when a failure could not be rolled back; appends refused until reopen.
    pub(crate) failed: bool,
    since_checkpoint: u64,
    closed: bool,
    /// Reused for each append's batch headers (no allocation per append).
    scratch: Vec<(BatchHeader, usize)>,
    /// The cleaner checkpoint as last read or written here (`None`: not
    /// known yet); see `stored.rs`.
    cleaned_below: Option<i64>,
    /// The DeleteRecords entries kept for catch-up, oldest first, as in
    /// `delete-records-entries`; see `log/delete_records.rs`.
    delete_records: Vec<DeleteRecordsEntry>,
}

impl std::fmt::Debug for PartitionLog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PartitionLog")
            .field("dir", &self.dir)
            .field("next_offset", &self.next_offset())
            .field("last_position", &self.last_position())
            .finish()
    }
}

impl PartitionLog {
    /// Opens (creating if needed) the log in `dir`, repairing a torn tail.
    pub fn open(dir: &Path, config: LogConfig) -> Result<(PartitionLog, Recovery)> {
        config.validate()?;
        let recovered = recovery::recover(dir, &config)?;
        let budget = config.file_budget.clone().unwrap_or_default();
        let mut segments = recovered.sealed;
        segments.push(recovered.active.seg.clone());
        let shared = Arc::new(Shared {
            dir: dir.to_path_buf(),
            segments: std::sync::RwLock::new(segments),
            next_offset: recovered.active.next_offset.into(),
            log_start_offset: recovered.log_start_offset.into(),
            last_position: PositionCell::new(recovered.last),
            durable: PositionCell::new(None),
            budget,
        });
        let sync = match config.durability {
            Durability::ReplicationOnly => None,
            Durability::Fsync => {
                let group = config.sync_group.clone().unwrap_or_default();
                let ls = Arc::new(LogSync::new(
                    shared.clone(),
                    recovered.active.file.clone(),
                    recovered.active.seg.log_path().to_path_buf(),
                    recovered.active.entries.file().clone(),
                ));
                group.register(&ls);
                Some((group, ls))
            }
        };
        let mut log = PartitionLog {
            dir: dir.to_path_buf(),
            config,
            shared,
            active: recovered.active,
            sync,
            failed: false,
            since_checkpoint: 0,
            closed: false,
            scratch: Vec::new(),
            cleaned_below: None,
            delete_records: crate::meta::read_delete_records_entries(dir)?,
        };
        log.forget_delete_records_after(recovered.last.map(|p| p.index))?;
        // Fsync: what recovery kept is durable from here on, synced once at open.
        if log.sync.is_some() {
            log.active.sync()?;
            crate::meta::sync_dir(dir)?;
            if let Some(parent) = dir.parent() {
                crate::meta::sync_dir(parent)?;
            }
        }
        if let Some((_, ls)) = &log.sync
            && let Some(mark) = log.mark()
        {
            ls.retarget(
                log.active.file.clone(),
                log.active.seg.log_path().to_path_buf(),
                log.active.entries.file().clone(),
                Some(mark),
            );
        }
        log.shared.set_durable(recovered.last);
        log.checkpoint(false)?;
        let report = recovered.report;
        if let Some(t) = &report.truncated_tail {
            tracing::warn!(dir = %dir.display(), from_offset = t.from_offset, bytes = t.bytes, entries = t.entries, reason = %t.reason, "recovery cut a torn tail");
        }
        Ok((log, report))
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    pub fn config(&self) -> &LogConfig {
        &self.config
    }

    /// Offset the next appended record gets.
    pub fn next_offset(&self) -> i64 {
        self.active.next_offset
    }

    pub fn log_start_offset(&self) -> i64 {
        self.shared.log_start_offset()
    }

    /// The last entry held, `None` for an empty log.
    pub fn last_position(&self) -> Option<RaftPosition> {
        self.shared.last_position()
    }

    /// The last durable entry (see [`LogReader::durable_position`]).
    pub fn durable_position(&self) -> Option<RaftPosition> {
        self.shared.durable()
    }

    pub fn reader(&self) -> LogReader {
        LogReader {
            shared: self.shared.clone(),
        }
    }

    pub fn budget(&self) -> &FileBudget {
        &self.shared.budget
    }

    /// Appends one Raft entry holding zero or more whole v2 batches whose base
    /// offsets continue from `next_offset()`. Validates everything first;
    /// on any error nothing is written. Verifies every batch's CRC-32C; see
    /// [`append_checked`](Self::append_checked) to skip that when the caller
    /// already did.
    pub fn append(&mut self, pos: RaftPosition, batches: &[u8]) -> Result<AppendInfo> {
        self.append_checked(pos, batches, AppendCheck::Full)
    }

    /// [`append`](Self::append) with an explicit [`AppendCheck`]: with
    /// [`AppendCheck::CrcVerifiedByCaller`] the structural checks still run
    /// and refuse a malformed entry, but batch CRCs are not recomputed.
    pub fn append_checked(
        &mut self,
        pos: RaftPosition,
        batches: &[u8],
        check: AppendCheck,
    ) -> Result<AppendInfo> {
        self.check_appendable(pos, batches.len())?;
        let first_offset = self.active.next_offset;
        let mut headers = std::mem::take(&mut self.scratch);
        let written = self.validate_and_write(pos, batches, first_offset, check, &mut headers);
        headers.clear();
        self.scratch = headers;
        if self.active.poisoned {
            self.failed = true;
        }
        let (next_offset, max_ts) = written?;
        self.publish_append(pos, next_offset, batches.len())?;
        Ok(AppendInfo {
            first_offset,
            next_offset,
            bytes: batches.len(),
            max_timestamp: max_ts,
        })
    }

    /// After an entry was written whole: readers, the group committer and
    /// the recovery checkpoint learn of it.
    fn publish_append(&mut self, pos: RaftPosition, next_offset: i64, bytes: usize) -> Result<()> {
        self.shared
            .next_offset
            .store(next_offset, Ordering::Release);
        self.shared.set_last_position(Some(pos));
        match &self.sync {
            None => self.shared.set_durable(Some(pos)),
            Some((_, ls)) => {
                if let Some(mark) = self.mark() {
                    ls.appended(mark);
                }
            }
        }
        self.since_checkpoint += bytes as u64;
        if self.since_checkpoint >= self.config.checkpoint_interval_bytes {
            self.checkpoint(false)?;
        }
        Ok(())
    }

    fn validate_and_write(
        &mut self,
        pos: RaftPosition,
        batches: &[u8],
        first_offset: i64,
        check: AppendCheck,
        headers: &mut Vec<(BatchHeader, usize)>,
    ) -> Result<(i64, Option<i64>)> {
        let (next_offset, max_ts) = validate(batches, first_offset, check, headers)?;
        if self.should_roll(batches.len() as u64) {
            self.roll()?;
        }
        self.active.write_entry(
            pos,
            batches,
            headers,
            next_offset,
            max_ts.unwrap_or(i64::MIN),
        )?;
        Ok((next_offset, max_ts))
    }

    /// What every append checks first: the log takes writes, `pos`
    /// follows the last entry, and the entry fits a segment.
    fn check_appendable(&self, pos: RaftPosition, bytes: usize) -> Result<()> {
        self.check_writable()?;
        if let Some(last) = self.last_position()
            && (pos.index != last.index + 1 || pos.term < last.term)
        {
            return Err(WalError::NonContiguousPosition {
                term: pos.term,
                index: pos.index,
                last_term: last.term,
                last_index: last.index,
            });
        }
        let max_entry = u32::MAX as usize - self.config.segment_bytes as usize;
        if bytes > max_entry {
            return Err(WalError::EntryTooLarge {
                bytes,
                max: max_entry,
            });
        }
        Ok(())
    }

    pub(crate) fn check_writable(&self) -> Result<()> {
        let sync_failed = self.sync.as_ref().is_some_and(|(_, ls)| ls.failed());
        if self.failed || sync_failed {
            return Err(WalError::Failed {
                dir: self.dir.clone(),
            });
        }
        Ok(())
    }

    fn should_roll(&self, incoming: u64) -> bool {
        if self.active.size == 0 {
            return false;
        }
        if self.active.size + incoming > self.config.segment_bytes {
            return true;
        }
        self.config
            .segment_ms
            .is_some_and(|ms| self.active.opened_at.elapsed().as_millis() >= u128::from(ms))
    }

    /// Seals the active segment and starts a new one at `next_offset()`.
    pub fn roll(&mut self) -> Result<()> {
        self.check_writable()?;
        if self.active.size == 0 {
            return Ok(());
        }
        // Make the sealed segment durable before anything points past it.
        if self.sync.is_some() {
            self.active.sync()?;
        }
        let end_mark = self.mark();
        let new = ActiveSegment::create(
            &self.dir,
            self.active.next_offset,
            self.config.index_interval_bytes,
        )?;
        if self.sync.is_some() {
            // The new files' names must survive a power loss before any
            // append in them is reported durable (fdatasync does not cover
            // the directory).
            crate::meta::sync_dir(&self.dir)?;
        }
        let old = std::mem::replace(&mut self.active, new);
        let sealed = match old.seal(self.sync.is_some()) {
            Ok(s) => s,
            Err(e) => {
                self.failed = true;
                return Err(e);
            }
        };
        {
            let mut segments = self
                .shared
                .segments
                .write()
                .unwrap_or_else(|p| p.into_inner());
            if let Some(last) = segments.last_mut() {
                *last = sealed;
            }
            segments.push(self.active.seg.clone());
        }
        if let Some((_, ls)) = &self.sync {
            ls.retarget(
                self.active.file.clone(),
                self.active.seg.log_path().to_path_buf(),
                self.active.entries.file().clone(),
                end_mark,
            );
        }
        // The sealed segment was flushed; the new one covers nothing yet.
        self.checkpoint(true)
    }

    /// The current end as a mark (`None` for a log without entries).
    pub(crate) fn mark(&self) -> Option<Mark> {
        self.last_position().map(|pos| Mark {
            pos,
            segment_base: self.active.base(),
            position: self.active.size,
            entry_count: self.active.entries.count(),
            next_offset: self.active.next_offset,
            max_timestamp: self.active.max_timestamp,
        })
    }

    /// Records how far recovery may trust the active segment: its end in
    /// `ReplicationOnly`, the last group-committed entry in `Fsync`.
    /// `flushed`: every byte it covers was just flushed (close, roll,
    /// truncation), so damage inside it is refused on open, not cut; in
    /// `Fsync` it covers only flushed bytes anyway.
    pub(crate) fn checkpoint(&mut self, flushed: bool) -> Result<()> {
        self.since_checkpoint = 0;
        let (position, entry_count, next_offset, max_timestamp) = match &self.sync {
            None => (
                self.active.size,
                self.active.entries.count(),
                self.active.next_offset,
                self.active.max_timestamp,
            ),
            Some((_, ls)) => match ls.durable_mark() {
                Some(m)
                    if m.segment_base == self.active.base()
                        && m.entry_count <= self.active.entries.count() =>
                {
                    (m.position, m.entry_count, m.next_offset, m.max_timestamp)
                }
                // Nothing durable in this segment yet: trust none of it.
                _ => (0, 0, self.active.base(), i64::MIN),
            },
        };
        let (offset_records, time_records) = self.active.persist_index(Some(position))?;
        Checkpoint {
            segment_base: self.active.base(),
            position,
            entry_count,
            next_offset,
            max_timestamp,
            offset_records: offset_records as u64,
            time_records: time_records as u64,
            durable: flushed || self.sync.is_some(),
        }
        .write(&self.dir)
    }

    /// Makes every append so far durable. `Fsync`: runs or joins a group
    /// commit round. `ReplicationOnly`: nothing to do (the page cache is the
    /// durability). Returns the durable position.
    pub fn sync(&self) -> Result<Option<RaftPosition>> {
        if let Some((group, _)) = &self.sync {
            group.sync_all()?;
        }
        Ok(self.durable_position())
    }

    /// The group committer this log syncs through (`Fsync` only).
    pub fn sync_group(&self) -> Option<&SyncGroup> {
        self.sync.as_ref().map(|(g, _)| g)
    }

    /// The term of entry `index`, `None` when the log does not hold it.
    pub fn term_of(&self, index: u64) -> Result<Option<u64>> {
        if let Some(first) = self.active.first_index
            && index >= first
        {
            let slot = index - first;
            if slot >= self.active.entries.count() {
                return Ok(None);
            }
            return match self.active.entries.get(slot) {
                Some(r) => Ok(Some(r.pos.term)),
                None => Err(WalError::Corrupt {
                    file: self.active.entries.path().to_path_buf(),
                    position: slot * crate::entry_index::RECORD_LEN as u64,
                    reason: "entry index record fails its checksum".into(),
                }),
            };
        }
        positions::term_of(&self.shared.snapshot(), index)
    }

    /// OffsetForLeaderEpoch (leader epoch = Raft term).
    pub fn end_offset_for_term(&self, term: u64) -> Result<Option<EpochEnd>> {
        self.reader().end_offset_for_term(term)
    }

    /// The first position of every term the log holds, ascending: what a
    /// restarted replica of a multi-voter Raft group is restored with.
    pub fn term_starts(&self) -> Result<Vec<RaftPosition>> {
        self.reader().term_starts()
    }

    /// Index of the first entry held, `None` for a log without entries:
    /// retention and DeleteRecords delete the segments below the log
    /// start, and the entries in them.
    pub fn first_index(&self) -> Option<u64> {
        self.shared
            .snapshot()
            .iter()
            .find_map(|s| s.entries())
            .map(|(first, _)| first)
    }

    /// Streams entries from `index` on for Raft catch-up.
    pub fn entries_from(&self, index: u64) -> EntryStream {
        self.reader().entries_from(index)
    }

    /// Flushes (fsync in both modes), writes the final checkpoint and closes.
    pub fn close(mut self) -> Result<()> {
        self.flush_for_close()
    }

    fn flush_for_close(&mut self) -> Result<()> {
        if self.closed {
            return Ok(());
        }
        self.closed = true;
        if self.failed {
            return Ok(());
        }
        self.active.sync()?;
        if let Some((_, ls)) = &self.sync
            && let Some(m) = self.mark()
        {
            ls.retarget(
                self.active.file.clone(),
                self.active.seg.log_path().to_path_buf(),
                self.active.entries.file().clone(),
                Some(m),
            );
        }
        self.checkpoint(true)
    }

    /// Test helper: drops the log as a killed process would (no flush, no
    /// final checkpoint).
    #[cfg(test)]
    pub(crate) fn crash(mut self) {
        self.closed = true;
    }
}

impl Drop for PartitionLog {
    fn drop(&mut self) {
        if let Err(e) = self.flush_for_close() {
            tracing::warn!(dir = %self.dir.display(), error = %e, "flush on drop failed");
        }
    }
}

/// Checks an entry's batches: whole, magic 2, offsets contiguous from
/// `first_offset`, and (with [`AppendCheck::Full`]) CRC-32C good. Fills `headers` with each batch's header and
/// position; returns the next offset and the largest max timestamp.
pub(crate) fn validate(
    batches: &[u8],
    first_offset: i64,
    check: AppendCheck,
    headers: &mut Vec<(BatchHeader, usize)>,
) -> Result<(i64, Option<i64>)> {
    let mut expected = first_offset;
    let mut max_ts: Option<i64> = None;
    let mut it = Batches::new(batches);
    while let Some(item) = {
        let at = it.position();
        it.next().map(|r| (at, r))
    } {
        let (at, r) = item;
        let (h, range) = r.map_err(|source| WalError::InvalidBatch { at, source })?;
        if h.base_offset != expected {
            return Err(WalError::NonContiguousOffset {
                at,
                expected,
                found: h.base_offset,
            });
        }
        if check == AppendCheck::Full {
            batch::verify_crc(&batches[range.clone()])
                .map_err(|source| WalError::InvalidBatch { at, source })?;
        }
        expected = h.next_offset();
        max_ts = Some(max_ts.map_or(h.max_timestamp, |m| m.max(h.max_timestamp)));
        headers.push((h, range.start));
    }
    Ok((expected, max_ts))
}
