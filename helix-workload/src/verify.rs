//! The verifier: given what the brokers acknowledged and what a partition
//! holds after the run, count what went wrong. Pure, so that tests feed it
//! histories with injected faults.
//!
//! Rules, per partition:
//! - every acknowledged record is in the log (else *lost*), and at the
//!   offset its acknowledgement named (else *misplaced*);
//! - no record is there twice (else *duplicated*; a violation with the
//!   idempotent producer, Kafka's at-least-once otherwise);
//! - each producer's records appear in the order it sent them (else
//!   *reordered*; a violation with the idempotent producer: without it
//!   Kafka's own client may reorder on a retry, so it is only reported);
//! - every record in the range written by the run is one of the run's
//!   records with a good checksum (else *corrupted*).

use std::collections::{BTreeMap, HashMap};

use serde::{Deserialize, Serialize};

/// One record acknowledged by the broker: who sent it, where it went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Acked {
    pub producer: u32,
    pub seq: u64,
    pub offset: i64,
}

/// One record read back: its offset and, when its value decodes as one of
/// this run's records, who sent it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Found {
    pub offset: i64,
    pub id: Option<(u32, u64)>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Verdict {
    pub acknowledged: u64,
    pub read: u64,
    pub lost: u64,
    pub misplaced: u64,
    pub duplicated: u64,
    pub reordered: u64,
    pub corrupted: u64,
    /// Whether duplicates and reorders count as violations.
    pub idempotent: bool,
}

impl Verdict {
    pub fn violations(&self) -> u64 {
        let strict = if self.idempotent {
            self.duplicated + self.reordered
        } else {
            0
        };
        self.lost + self.misplaced + self.corrupted + strict
    }

    /// Adds one partition's findings.
    pub fn check_partition(&mut self, acked: &[Acked], log: &[Found]) {
        self.acknowledged += acked.len() as u64;
        self.read += log.len() as u64;
        let mut at: HashMap<(u32, u64), Vec<i64>> = HashMap::with_capacity(log.len());
        let mut last_seq: BTreeMap<u32, u64> = BTreeMap::new();
        for found in log {
            let Some(id) = found.id else {
                self.corrupted += 1;
                continue;
            };
            let offsets = at.entry(id).or_default();
            offsets.push(found.offset);
            if offsets.len() > 1 {
                self.duplicated += 1;
                continue;
            }
            let (producer, seq) = id;
            match last_seq.get(&producer) {
                Some(&last) if seq < last => self.reordered += 1,
                _ => {
                    last_seq.insert(producer, seq);
                }
            }
        }
        for ack in acked {
            match at.get(&(ack.producer, ack.seq)) {
                None => self.lost += 1,
                Some(offsets) if !offsets.contains(&ack.offset) => self.misplaced += 1,
                Some(_) => {}
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Producer 1 sent seq 0..n; every one acknowledged at offset 100 + seq.
    fn clean(n: u64) -> (Vec<Acked>, Vec<Found>) {
        let acked = (0..n)
            .map(|seq| Acked {
                producer: 1,
                seq,
                offset: 100 + seq as i64,
            })
            .collect();
        let log = (0..n)
            .map(|seq| Found {
                offset: 100 + seq as i64,
                id: Some((1, seq)),
            })
            .collect();
        (acked, log)
    }

    fn verdict(acked: &[Acked], log: &[Found]) -> Verdict {
        let mut v = Verdict {
            idempotent: true,
            ..Verdict::default()
        };
        v.check_partition(acked, log);
        v
    }

    #[test]
    fn a_clean_history_passes() {
        let (acked, log) = clean(50);
        let v = verdict(&acked, &log);
        assert_eq!((v.acknowledged, v.read, v.violations()), (50, 50, 0));
    }

    #[test]
    fn unacknowledged_records_in_the_log_are_fine() {
        let (mut acked, log) = clean(50);
        acked.truncate(40); // the last ten were sent, written, never acknowledged
        assert_eq!(verdict(&acked, &log).violations(), 0);
    }

    #[test]
    fn loss_is_caught() {
        let (acked, mut log) = clean(50);
        log.remove(17);
        let v = verdict(&acked, &log);
        assert_eq!((v.lost, v.violations()), (1, 1));
    }

    #[test]
    fn a_truncated_tail_is_loss() {
        let (acked, mut log) = clean(50);
        log.truncate(45);
        assert_eq!(verdict(&acked, &log).lost, 5);
    }

    #[test]
    fn duplication_is_caught_and_strict_only_when_idempotent() {
        let (acked, mut log) = clean(50);
        log.push(Found {
            offset: 150,
            id: Some((1, 20)),
        });
        let v = verdict(&acked, &log);
        assert_eq!((v.duplicated, v.reordered, v.violations()), (1, 0, 1));
        let mut loose = Verdict::default();
        loose.check_partition(&acked, &log);
        assert_eq!((loose.duplicated, loose.violations()), (1, 0));
    }

    #[test]
    fn reordering_is_caught() {
        let (mut acked, mut log) = clean(50);
        log.swap(10, 11);
        log[10].offset = 110;
        log[11].offset = 111;
        acked[10].offset = 111;
        acked[11].offset = 110;
        let v = verdict(&acked, &log);
        assert_eq!(
            (v.reordered, v.lost, v.misplaced, v.violations()),
            (1, 0, 0, 1)
        );
    }

    #[test]
    fn producers_are_ordered_each_on_its_own() {
        // Two producers interleaved in one partition, each in its own order.
        let acked = vec![
            Acked {
                producer: 1,
                seq: 5,
                offset: 0,
            },
            Acked {
                producer: 2,
                seq: 0,
                offset: 1,
            },
            Acked {
                producer: 1,
                seq: 6,
                offset: 2,
            },
        ];
        let log: Vec<Found> = acked
            .iter()
            .map(|a| Found {
                offset: a.offset,
                id: Some((a.producer, a.seq)),
            })
            .collect();
        assert_eq!(verdict(&acked, &log).violations(), 0);
    }

    #[test]
    fn corruption_is_caught() {
        let (acked, mut log) = clean(50);
        log[30].id = None; // the value no longer decodes
        let v = verdict(&acked, &log);
        assert_eq!((v.corrupted, v.lost), (1, 1));
        assert_eq!(v.violations(), 2);
    }

    #[test]
    fn a_record_at_another_offset_than_acknowledged_is_misplaced() {
        let (mut acked, log) = clean(50);
        acked[5].offset = 999;
        let v = verdict(&acked, &log);
        assert_eq!((v.misplaced, v.lost, v.violations()), (1, 0, 1));
    }
}
