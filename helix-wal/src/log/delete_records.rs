//! The DeleteRecords entry that last raised the deleted-before mark, kept
//! in `delete-records-entry` (index, offset; `meta.rs`) beside the log
//! start.
//!
//! A DeleteRecords entry is stored as an entry with no batches, so its
//! offset is not in the segments. Catch-up from this WAL rebuilds Raft
//! entries from what the segments hold; without this record it would send
//! that entry as a no-op and the follower's log start would not move.
//! With it, the entry at `index` goes out as DeleteRecords to `offset`
//! again. Only the last one that raised the mark is kept: an earlier one
//! in the same catch-up range goes out as a no-op, and the follower's log
//! start lags until the later one is applied, never ends elsewhere (a log
//! start only moves forward, to the largest offset asked so far).
//!
//! The record names a Raft index, so it holds only while the log holds
//! that entry: `truncate_after` below it removes it, and so does opening a
//! log whose last entry is before it (a cut tail). The entry is applied
//! again when it comes back, and records itself again.

use super::PartitionLog;
use crate::error::{Result, WalError};
use crate::meta;
use crate::retention::RetentionOutcome;
use crate::types::{DeleteRecordsEntry, RaftPosition};

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
        // Compared with the last recorded offset, not the log start:
        // retention may have moved this replica's log start past `offset`
        // while a follower's retention did not.
        if self.last_delete_records.is_none_or(|e| offset > e.offset) {
            let e = DeleteRecordsEntry {
                index: pos.index,
                offset,
            };
            meta::write_delete_records_entry(&self.dir, e)?;
            self.last_delete_records = Some(e);
        }
        self.delete_records_before(offset)
    }

    /// The DeleteRecords entry that last raised the offset asked, if the
    /// log still holds it (see the module comment).
    pub fn last_delete_records(&self) -> Option<DeleteRecordsEntry> {
        self.last_delete_records
    }

    /// Forgets the record when the log no longer holds its entry: after
    /// `truncate_after`, and at open (a cut tail).
    pub(crate) fn forget_delete_records_after(&mut self, last: Option<u64>) -> Result<()> {
        let Some(e) = self.last_delete_records else {
            return Ok(());
        };
        if last.is_some_and(|l| e.index <= l) {
            return Ok(());
        }
        meta::remove(&self.dir, meta::DELETE_RECORDS_ENTRY)?;
        self.last_delete_records = None;
        Ok(())
    }
}
