//! Starting a log over at another replica's first held entry (helix-raft's
//! `RaftLog::restart_at`): a follower that needs entries its leader deleted
//! below its log start empties its log, which then starts, and has its log
//! start, at the offset of the leader's first held entry. Only committed
//! entries are dropped (the leader holds them, or deleted them as below
//! its log start), so no step needs to be undone after a crash: each one
//! leaves a valid log, which the leader restarts again if it must.

use std::sync::atomic::Ordering;

use super::PartitionLog;
use crate::active::ActiveSegment;
use crate::error::{Result, WalError};
use crate::meta;
use crate::recovery;

impl PartitionLog {
    /// Empties the log; it starts again at `offset` (its next offset and
    /// its log start), never below its current next offset (a log only
    /// moves forward). The next append may have any index.
    pub fn restart_at(&mut self, offset: i64) -> Result<()> {
        self.check_writable()?;
        if offset < self.next_offset() {
            return Err(WalError::OffsetOutOfRange {
                offset,
                log_start: self.log_start_offset(),
                next_offset: self.next_offset(),
            });
        }
        // 1. No entry left (truncate_after's own crash safety); the
        // emptied segments stay, at offsets below `offset`.
        let segments = self.shared.snapshot();
        if let Some((first, _)) = segments.iter().find_map(|s| s.entries()) {
            self.truncate_after(first.saturating_sub(1))?;
        }
        // 2. The log start first: while any old segment is left, recovery
        // clamps it to their end; once none is, it starts the log there.
        meta::write_log_start(&self.dir, offset)?;
        // The recovery checkpoint names a segment about to go.
        meta::remove(&self.dir, meta::CHECKPOINT)?;
        let old = self.shared.snapshot();
        for seg in &old {
            recovery::delete_segment_files(&self.dir, seg.base_offset)?;
        }
        if self.sync.is_some() {
            meta::sync_dir(&self.dir)?;
        }
        // 3. A new active segment at `offset`, published to readers.
        let fresh = ActiveSegment::create(&self.dir, offset, self.config.index_interval_bytes)?;
        if self.sync.is_some() {
            meta::sync_dir(&self.dir)?;
        }
        let emptied = std::mem::replace(&mut self.active, fresh);
        drop(emptied);
        self.shared.set_segments(vec![self.active.seg.clone()]);
        for seg in old {
            seg.unmap();
        }
        self.shared.next_offset.store(offset, Ordering::Release);
        self.shared
            .log_start_offset
            .store(offset, Ordering::Release);
        self.shared.set_last_position(None);
        if let Some((_, ls)) = &self.sync {
            ls.retarget(
                self.active.file.clone(),
                self.active.seg.log_path().to_path_buf(),
                self.active.entries.file().clone(),
                None,
            );
            ls.truncated(None);
        } else {
            self.shared.set_durable(None);
        }
        self.forget_delete_records_after(None)?;
        self.checkpoint(true)
    }
}
