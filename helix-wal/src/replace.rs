//! The compaction swap under an open log (ADR 0027 §4, step 5): cleaned
//! segments replace old sealed ones while the writer keeps appending to
//! the active segment and readers keep reading.
//!
//! The files move as `compaction::commit_swap` moves them; the readers'
//! segment list is then replaced in one store, as retention does. What
//! must stay true while it happens:
//! - only sealed segments are replaced, never the active one (the writer's
//!   `&mut self` also keeps roll, retention and truncation out);
//! - a reader that took the list before the swap keeps the mappings it
//!   holds; a file it has yet to open by name may already be the new
//!   segment's (the first old segment's live name is reused), so the old
//!   segments are marked retired before any rename, and a read that would
//!   open one of their files by name starts again on the new list
//!   (`WalError::SegmentReplaced`);
//! - a swap that fails half way is settled at once by `recover_swap`
//!   (the same roll forward or back as at open); when even that fails the
//!   log refuses appends until reopened.

use std::sync::Arc;

use crate::compaction::{self, SwapIntent, SwapRecovery};
use crate::error::{Result, WalError};
use crate::log::PartitionLog;
use crate::recovery;
use crate::segment::Segment;

impl PartitionLog {
    /// Swaps in the cleaned segment that `intent` describes (its four
    /// `.cleaned` files written by `SegmentRewrite`) for the sealed
    /// segments `intent.old_bases`. Refused (`SwapRefused`, the
    /// `.cleaned` files removed, nothing changed) when those are no
    /// longer consecutive sealed segments of the log.
    ///
    /// The caller writes the cleaner checkpoint first (the new segment may
    /// hold gaps; ADR 0027 §5) and whatever state must survive the records
    /// the swap removes (the producer snapshot).
    pub fn replace_segments(&mut self, intent: &SwapIntent) -> Result<()> {
        self.check_writable()?;
        let segments = self.shared.snapshot();
        let count = intent.old_bases.len();
        let at = segments
            .iter()
            .position(|s| s.base_offset == intent.new_base)
            // The active segment (the last) is never replaced.
            .filter(|at| count > 0 && at + count < segments.len())
            .filter(|at| {
                segments[*at..*at + count]
                    .iter()
                    .map(|s| s.base_offset)
                    .eq(intent.old_bases.iter().copied())
            });
        let Some(at) = at else {
            compaction::discard_cleaned(&self.dir, intent.new_base)?;
            return Err(WalError::SwapRefused(format!(
                "segments {:?} are no longer sealed segments of {}",
                intent.old_bases,
                self.dir.display()
            )));
        };
        let old = &segments[at..at + count];
        for seg in old {
            seg.set_retired(true);
        }
        if let Err(e) = compaction::commit_swap(&self.dir, intent) {
            match compaction::recover_swap(&self.dir) {
                Ok(SwapRecovery::RolledForward) => {}
                Ok(SwapRecovery::None | SwapRecovery::RolledBack) => {
                    for seg in old {
                        seg.set_retired(false);
                    }
                    return Err(e);
                }
                Err(settle) => {
                    tracing::error!(dir = %self.dir.display(), error = %e, settle = %settle, "a compaction swap failed and could not be settled; the log takes no more writes until reopened");
                    self.failed = true;
                    return Err(e);
                }
            }
        }
        let new =
            recovery::load_swapped(&self.dir, intent.new_base, self.config.index_interval_bytes)?;
        new.allow_gaps();
        let damage = new.damage();
        let consistent = new.next_offset() == old[count - 1].next_offset()
            && new.entries().map(|e| e.0) == old.iter().find_map(|s| s.entries()).map(|e| e.0)
            && new.entries().map_or(0, |e| e.1)
                == old
                    .iter()
                    .filter_map(|s| s.entries())
                    .map(|e| e.1)
                    .sum::<u64>();
        if !consistent && damage.is_none() {
            new.mark_damaged(
                0,
                "a swapped-in segment does not cover the entries it replaced",
            );
        }
        let new = Arc::new(new);
        let mut list: Vec<Arc<Segment>> = segments.clone();
        list.splice(at..at + count, [new.clone()]);
        self.shared.set_segments(list);
        for seg in old {
            seg.unmap();
        }
        match new.damage() {
            // The files on disk are what a restart finds: the range is
            // refused as damage from now on (ADR 0001), like any other.
            Some(d) => Err(WalError::Corrupt {
                file: new.log_path().to_path_buf(),
                position: d.position,
                reason: d.reason,
            }),
            None => Ok(()),
        }
    }
}
