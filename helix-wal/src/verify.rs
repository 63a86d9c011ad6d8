//! Verification of stored batches: whole, CRC-32C good, offsets contiguous
//! (or, in a cleaned segment, increasing with gaps: ADR 0027 §5).
//! Used for bytes recovery trusted without re-reading (checked lazily on first
//! read, see `segment/verified.rs`).

use crate::batch::{self, BatchError, Batches};

/// What checking a chunk of a segment found.
#[derive(Debug, PartialEq, Eq)]
pub enum Outcome {
    /// The first `bytes` bytes are whole, good batches ending at `next_offset`.
    Good { bytes: u64, next_offset: i64 },
    /// The batch at byte `at` of the chunk is bad.
    Bad { at: u64, reason: String },
}

/// Checks whole batches at the start of `chunk` (which begins at a batch
/// boundary whose base offset must be `next_offset`) until at least `want`
/// bytes are covered or the chunk ends. A batch cut by the end of the chunk
/// (in its header or its body) is left for the next call, unless it is the
/// first (then it is bad: the chunk was sized to hold it). With `gaps`, a
/// batch may start after `next_offset` (never before it).
pub fn chunk(chunk: &[u8], mut next_offset: i64, want: u64, gaps: bool) -> Outcome {
    let mut at = 0u64;
    for b in Batches::new(chunk) {
        let (h, range) = match b {
            Ok(x) => x,
            // Cut by the chunk's end, in its body or in its header.
            Err(BatchError::Truncated { .. } | BatchError::ShortHeader { .. }) if at > 0 => break,
            Err(e) => {
                return Outcome::Bad {
                    at,
                    reason: e.to_string(),
                };
            }
        };
        let in_order = if gaps {
            h.base_offset >= next_offset
        } else {
            h.base_offset == next_offset
        };
        if !in_order {
            return Outcome::Bad {
                at,
                reason: format!(
                    "batch base offset {} where {}{next_offset} was expected",
                    h.base_offset,
                    if gaps { "at least " } else { "" }
                ),
            };
        }
        if let Err(e) = batch::verify_crc(&chunk[range]) {
            return Outcome::Bad {
                at,
                reason: e.to_string(),
            };
        }
        next_offset = h.next_offset();
        at += h.total_len() as u64;
        if at >= want {
            break;
        }
    }
    if at == 0 {
        return Outcome::Bad {
            at,
            reason: "no whole batch where one was expected".into(),
        };
    }
    Outcome::Good {
        bytes: at,
        next_offset,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::batch::build_test_batch;

    #[test]
    fn a_chunk_that_ends_inside_the_next_header_is_good_up_to_it() {
        // A scan chunk is cut at a fixed size, so it may end a few bytes
        // into the next batch's header: those bytes are left for the next
        // chunk, not called damage (the long Jepsen run's two "damaged"
        // replicas of a healthy log, 39 and 8 bytes before 1 MiB).
        let mut buf = build_test_batch(5, 2, 0, 0, b"aaaa");
        let first = buf.len() as u64;
        buf.extend(build_test_batch(7, 1, 0, 0, b"bb"));
        for cut in [first as usize + 1, first as usize + 8, first as usize + 39] {
            assert_eq!(
                chunk(&buf[..cut], 5, u64::MAX, false),
                Outcome::Good {
                    bytes: first,
                    next_offset: 7
                },
                "cut at {cut}"
            );
        }
        // A chunk that holds no whole batch is still bad.
        assert!(matches!(
            chunk(&buf[..8], 5, u64::MAX, false),
            Outcome::Bad { at: 0, .. }
        ));
    }

    #[test]
    fn a_cleaned_segment_may_skip_offsets_but_never_go_back() {
        let mut buf = build_test_batch(5, 2, 0, 0, b"aaaa");
        buf.extend(build_test_batch(10, 1, 0, 0, b"bb"));
        assert!(matches!(
            chunk(&buf, 5, u64::MAX, false),
            Outcome::Bad { .. }
        ));
        assert_eq!(
            chunk(&buf, 5, u64::MAX, true),
            Outcome::Good {
                bytes: buf.len() as u64,
                next_offset: 11
            }
        );
        let mut back = build_test_batch(5, 2, 0, 0, b"aaaa");
        back.extend(build_test_batch(6, 1, 0, 0, b"bb"));
        assert!(matches!(
            chunk(&back, 5, u64::MAX, true),
            Outcome::Bad { .. }
        ));
    }

    #[test]
    fn good_batches_advance_and_a_flip_is_bad_at_its_batch() {
        let mut buf = build_test_batch(5, 2, 0, 0, b"aaaa");
        let first = buf.len() as u64;
        buf.extend(build_test_batch(7, 1, 0, 0, b"bb"));
        assert_eq!(
            chunk(&buf, 5, u64::MAX, false),
            Outcome::Good {
                bytes: buf.len() as u64,
                next_offset: 8
            }
        );
        assert_eq!(
            chunk(&buf, 5, 1, false),
            Outcome::Good {
                bytes: first,
                next_offset: 7
            }
        );
        let last = buf.len() - 1;
        buf[last] ^= 1;
        assert!(matches!(chunk(&buf, 5, u64::MAX, false), Outcome::Bad { at, .. } if at == first));
        assert!(matches!(
            chunk(&buf, 6, u64::MAX, false),
            Outcome::Bad { at: 0, .. }
        ));
    }
}
