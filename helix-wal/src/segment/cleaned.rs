//! The lazy check of a segment that may hold offset gaps (ADR 0027 §5:
//! cleaned, or holding entries a follower stored as its compacted leader
//! had them): entry by entry, each entry's header checksum standing in for
//! the contiguity that the ordinary check relies on.

use std::fs::File;
use std::sync::atomic::Ordering;

use super::{Damage, Segment, lock};
use crate::batch;
use crate::error::{Result, WalError};
use crate::source::Source;
use crate::verify;

/// Rounds a lazy check of an active segment with gaps waits for an entry
/// whose bytes are published and whose record is not yet (two stores by
/// its writer, one after the other).
const PUBLISH_WAIT_ROUNDS: usize = 1000;

impl Segment {
    /// [`Segment::ensure_verified`] for a cleaned segment (ADR 0027 §5):
    /// the whole segment at once, entry by entry, so that what contiguity
    /// checked elsewhere is checked here by each entry's header checksum
    /// (which covers base offsets): every batch whole, CRC good, inside its
    /// entry's offset range and after the previous one.
    ///
    /// The segment may be active (a follower's entries stored by catch-up
    /// from a compacted leader, verified lazily after a restart) and
    /// appended to meanwhile: entry records are published after the bytes
    /// they describe, so the count is read before the length and every
    /// counted entry lies within it; bytes of an entry whose record is not
    /// out yet are waited for (its writer is between two stores).
    pub(super) fn ensure_cleaned_verified(&self, src: &Source, upto: u64) -> Result<u64> {
        for _ in 0..PUBLISH_WAIT_ROUNDS {
            if self.verified_to.load(Ordering::Acquire) >= upto {
                return Ok(upto);
            }
            let generation = {
                let v = lock(&self.verified);
                if let Some(d) = &v.damage {
                    return Ok(d.position.min(upto));
                }
                v.generation
            };
            let entries = self.entries();
            let len = self.len();
            let active = matches!(src, Source::Active(_));
            let checked = self.check_cleaned_entries(src, entries, len, active)?;
            let mut v = lock(&self.verified);
            if v.generation != generation || v.damage.is_some() {
                continue; // a truncation reset it, or someone found damage
            }
            match checked {
                Ok((end, next_offset)) => {
                    if end > v.position {
                        v.position = end;
                        v.next_offset = next_offset;
                        self.verified_to.store(end, Ordering::Release);
                    }
                    if v.position >= upto {
                        return Ok(upto);
                    }
                }
                Err((position, reason)) => {
                    tracing::error!(file = %self.log_path.display(), position, %reason,
                        "stored batch failed verification; refusing to serve from here");
                    v.position = position;
                    v.damage = Some(Damage { position, reason });
                    self.verified_to.store(position, Ordering::Release);
                    return Ok(position.min(upto));
                }
            }
            drop(v);
            std::thread::yield_now();
        }
        Ok(self.verified_to.load(Ordering::Acquire).min(upto))
    }

    /// Checks the first `entries` of a cleaned segment whose bytes are
    /// `len` long: `Ok((end, next offset))` of the good entries, or the
    /// first fault `(position, reason)`. Bytes after the last entry are a
    /// fault in a sealed segment; in an active one they are an entry being
    /// published.
    fn check_cleaned_entries(
        &self,
        src: &Source,
        entries: Option<(u64, u64)>,
        len: u64,
        active: bool,
    ) -> Result<std::result::Result<(u64, i64), (u64, String)>> {
        let Some((_, count)) = entries else {
            if len > 0 && !active {
                return Ok(Err((0, "a cleaned segment without entries".to_string())));
            }
            return Ok(Ok((0, self.base_offset)));
        };
        let path = crate::entry_index::path_for(&self.dir, self.base_offset);
        let file = File::open(&path).map_err(|e| WalError::io("open entry index", &path, e))?;
        // Opened by name after a swap renamed it: maybe the new file.
        if self.is_retired() {
            return Err(self.replaced());
        }
        let mut next = self.base_offset;
        let mut end = 0u64;
        for slot in 0..count {
            let r = crate::entry_index::read_required(&file, &path, slot)?;
            let at = u64::from(r.position);
            if at != end || r.end() > len || r.first_offset < next {
                return Ok(Err((at, format!("entry {} out of place", r.pos.index))));
            }
            end = r.end();
            next = r.next_offset;
            if r.length == 0 {
                continue;
            }
            let bytes = src.load(at, r.end(), &self.log_path)?;
            match verify::chunk(&bytes, r.first_offset, u64::MAX, true) {
                verify::Outcome::Good {
                    bytes: n,
                    next_offset,
                } if n == bytes.len() as u64 && next_offset <= r.next_offset => {}
                verify::Outcome::Bad { at: b, reason } => return Ok(Err((at + b, reason))),
                verify::Outcome::Good { .. } => {
                    return Ok(Err((
                        at,
                        format!("entry {} batches overrun it", r.pos.index),
                    )));
                }
            }
            let starts = batch::Batches::new(&bytes)
                .flatten()
                .map(|(_, range)| range.start);
            if crate::entry_index::header_sum(&bytes, starts) != r.header_sum {
                return Ok(Err((
                    at,
                    format!("entry {} header checksum mismatch", r.pos.index),
                )));
            }
        }
        if end != len && !active {
            return Ok(Err((end, "bytes after the last entry".to_string())));
        }
        Ok(Ok((end, next)))
    }
}
