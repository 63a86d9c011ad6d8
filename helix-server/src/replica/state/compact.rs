//! The replica's side of log compaction (ADR 0027 §4): the background
//! cleaner writes cleaned segments beside the log from a reader; the
//! swap itself runs here, on the log's single writer, in order with
//! appends, retention and truncation.
//!
//! Order: the producer-state snapshot first (a rebuild after a restart
//! then starts after the cleaned range, so it never needs the records
//! the swap removes), then the cleaner checkpoint (segments below it may
//! hold gaps), then each swap. A swap refused or failed leaves the
//! checkpoint where the segments swapped so far (or the old checkpoint)
//! put it: never above a segment that was not cleaned, never below one
//! that was.

use super::{PartitionState, live};
use crate::error::Result;

impl PartitionState {
    /// Swaps in a prepared pass; `cleaned_below` is the end of its last
    /// group. Returns the number of swaps done.
    pub(super) fn swap_cleaned(
        &mut self,
        cleaned_below: i64,
        intents: &[helix_wal::SwapIntent],
    ) -> Result<usize> {
        self.snapshot();
        let log = live(&mut self.log)?;
        let dir = log.dir().to_path_buf();
        let discard_from = |from: usize| {
            for intent in &intents[from..] {
                let _ = helix_wal::discard_cleaned(&dir, intent.new_base);
            }
        };
        let previous = match helix_wal::read_cleaner_checkpoint(&dir) {
            Ok(p) => p,
            Err(e) => {
                discard_from(0);
                return Err(e.into());
            }
        };
        // Never lowered: since the pass read it, this replica may have
        // applied `Stored` entries with gaps above it (a follower caught up
        // from a cleaned leader), which only the checkpoint lets be read.
        let cleaned_below = previous.map_or(cleaned_below, |p| p.max(cleaned_below));
        if let Err(e) = helix_wal::write_cleaner_checkpoint(&dir, cleaned_below) {
            discard_from(0);
            return Err(e.into());
        }
        let mut reached = previous;
        for (done, intent) in intents.iter().enumerate() {
            if let Err(e) = log.replace_segments(intent) {
                discard_from(done + 1);
                // The old segments of this and later groups stay: the
                // checkpoint goes back to what is really cleaned.
                let back = reached.unwrap_or(log.log_start_offset());
                if let Err(w) = helix_wal::write_cleaner_checkpoint(&dir, back) {
                    tracing::warn!(dir = %dir.display(), error = %w, "cannot move the cleaner checkpoint back after a failed swap");
                }
                return Err(e.into());
            }
            let end = log
                .reader()
                .segments()
                .iter()
                .find(|s| s.base_offset == intent.new_base)
                .map(|s| s.next_offset);
            reached = reached.max(end);
        }
        Ok(intents.len())
    }
}

#[cfg(test)]
#[path = "compact_tests.rs"]
mod tests;
