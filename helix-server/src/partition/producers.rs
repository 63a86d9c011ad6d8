//! Idempotent-producer state of one partition: per producer id, its epoch
//! and the sequence ranges of its last few batches with their offsets.
//!
//! Checked and updated at apply time, so every replica derives the same
//! state from the same log; rebuilt from the log's batch headers on restart.

use std::collections::{HashMap, VecDeque};

use serde::{Deserialize, Serialize};

use super::batch::{BatchHeader, NO_PRODUCER_ID};
use crate::error::{HelixError, Result};

/// Batches remembered per producer: Kafka clients keep at most 5 in flight
/// per partition, so a retry is always one of the last 5.
const REMEMBERED_BATCHES: usize = 5;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
struct BatchSeq {
    first_seq: i32,
    last_seq: i32,
    base_offset: i64,
}

#[derive(Debug, Default, Serialize, Deserialize)]
struct ProducerEntry {
    epoch: i16,
    recent: VecDeque<BatchSeq>,
}

/// What the check decided for one batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SequenceCheck {
    /// Append it.
    Accept,
    /// Already in the log at this base offset: answer without appending.
    Duplicate { base_offset: i64 },
}

/// Producer id → sequence state for one partition.
#[derive(Debug, Default, Serialize, Deserialize)]
pub struct ProducerTable {
    producers: HashMap<i64, ProducerEntry>,
}

impl ProducerTable {
    /// Rebuilds the table from stored batch headers, oldest first.
    #[cfg(test)]
    pub fn rebuild(headers: &[BatchHeader]) -> ProducerTable {
        let mut t = ProducerTable::default();
        for h in headers {
            t.record(h, h.base_offset);
        }
        t
    }

    /// Decides whether a batch may be appended. Does not change the state:
    /// call [`ProducerTable::record`] once it is appended.
    pub fn check(&self, h: &BatchHeader) -> Result<SequenceCheck> {
        if h.producer_id == NO_PRODUCER_ID {
            return Ok(SequenceCheck::Accept);
        }
        let Some(entry) = self.producers.get(&h.producer_id) else {
            return if h.base_sequence == 0 {
                Ok(SequenceCheck::Accept)
            } else {
                Err(HelixError::OutOfOrderSequence {
                    expected: 0,
                    got: h.base_sequence,
                })
            };
        };
        if h.producer_epoch < entry.epoch {
            return Err(HelixError::InvalidProducerEpoch);
        }
        if h.producer_epoch > entry.epoch {
            return if h.base_sequence == 0 {
                Ok(SequenceCheck::Accept)
            } else {
                Err(HelixError::OutOfOrderSequence {
                    expected: 0,
                    got: h.base_sequence,
                })
            };
        }
        let (first, last) = (h.base_sequence, h.last_sequence());
        if let Some(seen) = entry
            .recent
            .iter()
            .find(|b| b.first_seq == first && b.last_seq == last)
        {
            return Ok(SequenceCheck::Duplicate {
                base_offset: seen.base_offset,
            });
        }
        let expected = entry.recent.back().map_or(0, |b| next_seq(b.last_seq));
        if first == expected {
            Ok(SequenceCheck::Accept)
        } else {
            Err(HelixError::OutOfOrderSequence {
                expected,
                got: first,
            })
        }
    }

    /// Records an appended batch at its assigned base offset.
    pub fn record(&mut self, h: &BatchHeader, base_offset: i64) {
        if h.producer_id == NO_PRODUCER_ID {
            return;
        }
        let entry = self.producers.entry(h.producer_id).or_default();
        if h.producer_epoch != entry.epoch {
            entry.epoch = h.producer_epoch;
            entry.recent.clear();
        }
        if entry.recent.len() == REMEMBERED_BATCHES {
            entry.recent.pop_front();
        }
        entry.recent.push_back(BatchSeq {
            first_seq: h.base_sequence,
            last_seq: h.last_sequence(),
            base_offset,
        });
    }
}

fn next_seq(s: i32) -> i32 {
    if s == i32::MAX { 0 } else { s + 1 }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header(pid: i64, epoch: i16, seq: i32, count: i32) -> BatchHeader {
        BatchHeader {
            base_offset: 0,
            batch_length: 88,
            partition_leader_epoch: 1,
            magic: 2,
            crc: 0,
            attributes: 0,
            last_offset_delta: count - 1,
            first_timestamp: 0,
            max_timestamp: 0,
            producer_id: pid,
            producer_epoch: epoch,
            base_sequence: seq,
            record_count: count,
        }
    }

    #[test]
    fn in_order_batches_are_accepted_and_a_replay_is_a_duplicate() {
        let mut t = ProducerTable::default();
        let a = header(9, 0, 0, 3);
        assert_eq!(t.check(&a).expect("first"), SequenceCheck::Accept);
        t.record(&a, 100);
        let b = header(9, 0, 3, 2);
        assert_eq!(t.check(&b).expect("next"), SequenceCheck::Accept);
        t.record(&b, 103);
        assert_eq!(
            t.check(&a).expect("replay"),
            SequenceCheck::Duplicate { base_offset: 100 }
        );
        assert_eq!(
            t.check(&b).expect("replay"),
            SequenceCheck::Duplicate { base_offset: 103 }
        );
    }

    #[test]
    fn a_gap_is_out_of_order_and_an_old_epoch_is_fenced() {
        let mut t = ProducerTable::default();
        let a = header(9, 1, 0, 1);
        t.record(&a, 0);
        let gap = header(9, 1, 5, 1);
        assert!(matches!(
            t.check(&gap),
            Err(HelixError::OutOfOrderSequence {
                expected: 1,
                got: 5
            })
        ));
        assert!(matches!(
            t.check(&header(9, 0, 1, 1)),
            Err(HelixError::InvalidProducerEpoch)
        ));
        assert_eq!(
            t.check(&header(9, 2, 0, 1)).expect("new epoch"),
            SequenceCheck::Accept
        );
        assert!(
            t.check(&header(10, 0, 4, 1)).is_err(),
            "unknown producer must start at 0"
        );
    }

    #[test]
    fn rebuild_from_headers_restores_duplicate_detection() {
        let mut a = header(5, 0, 0, 2);
        a.base_offset = 40;
        let mut b = header(5, 0, 2, 2);
        b.base_offset = 42;
        let t = ProducerTable::rebuild(&[a, b]);
        assert_eq!(
            t.check(&b).expect("dup"),
            SequenceCheck::Duplicate { base_offset: 42 }
        );
        assert_eq!(
            t.check(&header(5, 0, 4, 1)).expect("next"),
            SequenceCheck::Accept
        );
    }

    #[test]
    fn non_idempotent_batches_are_never_checked() {
        let t = ProducerTable::default();
        assert_eq!(
            t.check(&header(-1, -1, -1, 3)).expect("plain"),
            SequenceCheck::Accept
        );
    }
}
