//! The lazy check of a segment's bytes: recovered bytes the recovery
//! checkpoint vouched for are CRC-checked the first time a read reaches
//! them, a chunk at a time, outside the lock the writer publishes through;
//! a failure marks the segment damaged from that batch on. Segments that
//! may hold offset gaps are checked entry by entry instead (`cleaned.rs`).

use std::sync::atomic::Ordering;

use super::{Damage, SCAN_CHUNK, Segment, lock};
use crate::batch;
use crate::error::{Result, WalError};
use crate::source::Source;
use crate::verify;

impl Segment {
    /// Verifies bytes up to at least `upto` (a batch end). Returns how far the
    /// good prefix reaches (≥ `upto` unless damage was found before it).
    pub(super) fn ensure_verified(&self, src: &Source, upto: u64) -> Result<u64> {
        if self.may_have_gaps() {
            return self.ensure_cleaned_verified(src, upto);
        }
        loop {
            if self.verified_to.load(Ordering::Acquire) >= upto {
                return Ok(upto);
            }
            // Snapshot, then verify without the lock: the writer publishes
            // through the same lock on every append and must not wait for a
            // reader checking a large recovered range.
            let (position, next_offset, generation) = {
                let v = lock(&self.verified);
                if let Some(d) = &v.damage {
                    return Ok(d.position.min(upto));
                }
                if v.position >= upto {
                    return Ok(upto);
                }
                (v.position, v.next_offset, v.generation)
            };
            let len = self.len();
            let mut chunk_end = len.min(position + SCAN_CHUNK);
            if let Some(h) = src.header(position, len, &self.log_path)?
                && h.batch_length >= batch::MIN_BATCH_LENGTH
            {
                chunk_end = chunk_end.max(len.min(position + h.total_len() as u64));
            }
            let chunk = src.load(position, chunk_end, &self.log_path)?;
            let gaps = self.may_have_gaps();
            let outcome = verify::chunk(&chunk, next_offset, upto - position, gaps);
            let mut v = lock(&self.verified);
            if v.position != position || v.generation != generation || v.damage.is_some() {
                continue; // someone else moved it (or a truncation reset it)
            }
            match outcome {
                verify::Outcome::Good { bytes, next_offset } => {
                    v.position += bytes;
                    v.next_offset = next_offset;
                    self.verified_to.store(v.position, Ordering::Release);
                }
                verify::Outcome::Bad { at, reason } => {
                    let position = position + at;
                    tracing::error!(file = %self.log_path.display(), position, %reason,
                        "stored batch failed verification; refusing to serve from here");
                    v.position = position;
                    v.damage = Some(Damage { position, reason });
                    self.verified_to.store(position, Ordering::Release);
                    return Ok(position.min(upto));
                }
            }
        }
    }

    pub(super) fn corrupt(&self, position: u64, reason: &str) -> WalError {
        WalError::Corrupt {
            file: self.log_path.clone(),
            position,
            reason: reason.into(),
        }
    }
}
