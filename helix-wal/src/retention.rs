//! Retention: whole oldest segments are deleted by total size and by age, and
//! `delete_records_before` (Kafka DeleteRecords) advances the log start
//! offset, deleting the segments wholly below it.
//!
//! A segment leaves the readers' list before its files are unlinked; readers
//! already holding its mapping keep reading it until they drop their `Bytes`.
//! The active segment is never deleted here, nor the newest segment holding
//! an entry (it carries the log's last Raft position).

use std::sync::atomic::Ordering;

use crate::error::{Result, WalError};
use crate::log::PartitionLog;
use crate::meta;
use crate::recovery;

/// What a retention pass removed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RetentionOutcome {
    pub segments_deleted: usize,
    pub bytes_deleted: u64,
    pub log_start_offset: i64,
}

impl PartitionLog {
    /// Deletes whole sealed segments beyond `retention_bytes` (oldest first)
    /// and those whose newest timestamp is older than `now_ms - retention_ms`.
    pub fn apply_retention(&mut self, now_ms: i64) -> Result<RetentionOutcome> {
        let segments = self.shared.snapshot();
        let sealed = &segments[..segments.len().saturating_sub(1)];
        let mut total: u64 = segments.iter().map(|s| s.len()).sum();
        let mut delete = 0;
        for seg in sealed {
            let over_size = self
                .config
                .retention_bytes
                .is_some_and(|limit| total > limit && total - seg.len() >= limit);
            let too_old = self.config.retention_ms.is_some_and(|ms| {
                let ms = i64::try_from(ms).unwrap_or(i64::MAX);
                seg.max_timestamp() < now_ms.saturating_sub(ms)
            });
            if !(over_size || too_old) {
                break;
            }
            total -= seg.len();
            delete += 1;
        }
        self.delete_oldest(delete)
    }

    /// DeleteRecords: the log start offset becomes `offset` (never moves
    /// back); segments wholly below it are deleted.
    pub fn delete_records_before(&mut self, offset: i64) -> Result<RetentionOutcome> {
        let next = self.next_offset();
        let start = self.log_start_offset();
        if offset > next || offset < 0 {
            return Err(WalError::OffsetOutOfRange {
                offset,
                log_start: start,
                next_offset: next,
            });
        }
        if offset > start {
            meta::write_log_start(&self.dir, offset)?;
            self.shared
                .log_start_offset
                .store(offset, Ordering::Release);
        }
        let segments = self.shared.snapshot();
        let below = segments[..segments.len().saturating_sub(1)]
            .iter()
            .take_while(|s| s.next_offset() <= offset)
            .count();
        self.delete_oldest(below)
    }

    fn delete_oldest(&mut self, n: usize) -> Result<RetentionOutcome> {
        let mut segments = self.shared.snapshot();
        // Keep the newest segment holding an entry: the log's last Raft
        // position must survive retention (and a restart).
        let keep_from = segments
            .iter()
            .rposition(|s| s.entries().is_some())
            .unwrap_or(segments.len().saturating_sub(1));
        let n = n.min(keep_from);
        let removed: Vec<_> = segments.drain(..n).collect();
        let mut outcome = RetentionOutcome {
            segments_deleted: n,
            ..RetentionOutcome::default()
        };
        if n > 0 {
            let new_start = segments[0].base_offset;
            self.shared.set_segments(segments);
            self.shared
                .log_start_offset
                .fetch_max(new_start, Ordering::AcqRel);
            for seg in removed {
                outcome.bytes_deleted += seg.len();
                seg.unmap();
                recovery::delete_segment_files(&self.dir, seg.base_offset)?;
            }
        }
        outcome.log_start_offset = self.log_start_offset();
        Ok(outcome)
    }
}
