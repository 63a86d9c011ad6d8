//! The DeleteRecords entries a log keeps for catch-up, in
//! `delete-records-entries` (index and offset of each; `meta.rs`) beside
//! the log start.
//!
//! A DeleteRecords entry is stored as an entry with no batches, so its
//! offset is not in the segments. Catch-up from this WAL rebuilds Raft
//! entries from what the segments hold; without this record it would send
//! that entry as a no-op and the follower's log start would not move.
//! With it, each kept entry goes out as DeleteRecords to its offset again.
//!
//! Kept: each entry that asked for a larger offset than every earlier one
//! (the others moved nothing: a log start only moves forward), the last
//! [`KEPT_ENTRIES`]. An older one in a catch-up range goes out as a no-op;
//! the follower's log start then lags until a later one is applied, and
//! ends where the leader's is.
//!
//! Each names a Raft index, so it is kept only while the log holds that
//! entry: `truncate_after` below it removes it, and so does opening a log
//! whose last entry is before it (a cut tail). The entry is applied again
//! when it comes back, and is kept again.

use super::PartitionLog;
use crate::error::{Result, WalError};
use crate::meta;
use crate::retention::RetentionOutcome;
use crate::types::{DeleteRecordsEntry, RaftPosition};

/// DeleteRecords entries kept (16 bytes each in the file).
pub const KEPT_ENTRIES: usize = 256;

impl PartitionLog {
    /// Applies a DeleteRecords Raft entry at `pos`: an entry with no
    /// batches, then the log start moves to `offset` (see
    /// [`delete_records_before`](Self::delete_records_before)). Out of
    /// range (`offset` past the log end, or negative) the entry is still
    /// appended, and only the move is refused.
    pub fn append_delete_records(
        &mut self,
        pos: RaftPosition,
        offset: i64,
    ) -> Result<RetentionOutcome> {
        self.append(pos, &[])?;
        let next = self.next_offset();
        if offset > next || offset < 0 {
            return Err(WalError::OffsetOutOfRange {
                offset,
                log_start: self.log_start_offset(),
                next_offset: next,
            });
        }
        // Compared with the kept offsets, not the log start: retention may
        // have moved this replica's log start past `offset` while a
        // follower's retention did not.
        if self.delete_records.last().is_none_or(|e| offset > e.offset) {
            let mut kept = self.delete_records.clone();
            kept.push(DeleteRecordsEntry {
                index: pos.index,
                offset,
            });
            let over = kept.len().saturating_sub(KEPT_ENTRIES);
            kept.drain(..over);
            meta::write_delete_records_entries(&self.dir, &kept)?;
            self.delete_records = kept;
        }
        self.delete_records_before(offset)
    }

    /// The DeleteRecords entries kept for catch-up, oldest first (see the
    /// module comment).
    pub fn delete_records_entries(&self) -> &[DeleteRecordsEntry] {
        &self.delete_records
    }

    /// Forgets the entries the log no longer holds (after `last`): after
    /// `truncate_after`, and at open (a cut tail).
    pub(crate) fn forget_delete_records_after(&mut self, last: Option<u64>) -> Result<()> {
        let held = |e: &DeleteRecordsEntry| last.is_some_and(|l| e.index <= l);
        if self.delete_records.iter().all(held) {
            return Ok(());
        }
        let kept: Vec<_> = self.delete_records.iter().copied().filter(held).collect();
        if kept.is_empty() {
            meta::remove(&self.dir, meta::DELETE_RECORDS_ENTRIES)?;
        } else {
            meta::write_delete_records_entries(&self.dir, &kept)?;
        }
        self.delete_records = kept;
        Ok(())
    }
}
