//! Pseudo-random schedules: requests from current and stale producers,
//! proposals acknowledged, held, failed or carried across failovers,
//! markers written late, time moving, snapshots taken every few records.
//! Whatever happens, every request is answered exactly once, nothing
//! panics, and replaying the log from its last snapshot rebuilds the live
//! view.

use super::harness::{Harness, views};
use crate::txn::request::{AddOffsets, TxnRequest};
use crate::txn::types::{ProducerIdAndEpoch, StatePartition};

const IDS: [&str; 5] = ["a", "b", "c", "d", "e"];

/// xorshift64: deterministic, so a failing seed replays exactly.
struct Schedule(u64);

impl Schedule {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }
}

/// The producer a client of `id` would use: mostly the current one,
/// sometimes a stale epoch or a wrong producer id.
fn producer_for(h: &Harness, id: &str, schedule: &mut Schedule) -> ProducerIdAndEpoch {
    let current = h
        .coordinator
        .transaction(id)
        .map(|m| ProducerIdAndEpoch {
            producer_id: m.producer_id,
            epoch: m.epoch,
        })
        .unwrap_or(ProducerIdAndEpoch {
            producer_id: 1,
            epoch: 0,
        });
    match schedule.below(10) {
        0 => ProducerIdAndEpoch {
            epoch: current.epoch.saturating_sub(1),
            ..current
        },
        1 => ProducerIdAndEpoch {
            producer_id: current.producer_id + 1,
            ..current
        },
        _ => current,
    }
}

fn step(h: &mut Harness, schedule: &mut Schedule, sent: &mut Vec<crate::txn::types::RequestToken>) {
    let id = IDS[schedule.below(IDS.len() as u64) as usize];
    let producer = producer_for(h, id, schedule);
    let topic = ["t", "u"][schedule.below(2) as usize];
    let partition = schedule.below(3) as i32;
    match schedule.below(12) {
        0 | 1 => {
            let expected = schedule.chance(40).then_some(producer);
            let request = h.init_request(id, expected);
            sent.push(h.send(request));
        }
        2..=4 => {
            let add = Harness::add_request(id, producer, &[(topic, partition)]);
            sent.push(h.send(TxnRequest::AddPartitions(add)));
        }
        5 => {
            let verify = Harness::add_request(id, producer, &[(topic, partition)]);
            sent.push(h.send(TxnRequest::VerifyPartitions(verify)));
        }
        6 => {
            let request = TxnRequest::AddOffsets(AddOffsets {
                transactional_id: id.to_owned(),
                producer_id: producer.producer_id,
                epoch: producer.epoch,
                group_id: format!("group-{partition}"),
                offsets_partitions: 50,
            });
            sent.push(h.send(request));
        }
        7 | 8 => {
            let commit = schedule.chance(50);
            sent.push(h.send(Harness::end_request(id, producer, commit)));
        }
        9 => {
            if schedule.chance(50) {
                h.write_markers();
            }
            h.tick(schedule.below(40_000));
        }
        10 => match schedule.below(3) {
            0 => h.hold = true,
            1 => h.release(),
            _ => h.fail_held(),
        },
        _ => {
            let partition =
                StatePartition(schedule.below(u64::from(h.config.state_partitions)) as u32);
            let mut keep = || schedule.chance(50);
            h.fail_over(partition, &mut keep);
        }
    }
}

#[test]
fn random_schedules_answer_every_request_once_and_replay_to_the_live_view() {
    for seed in 1..=40u64 {
        let mut schedule = Schedule(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
        // Seeds alternate between no snapshot and one every 1 to 8 records.
        let snapshot_after_records = match seed % 2 {
            0 => 1 + schedule.below(8),
            _ => 20_000,
        };
        let mut h = Harness::with_config(crate::config::TxnConfig {
            snapshot_after_records,
            ..super::harness::config()
        });
        let mut sent = Vec::new();
        for _ in 0..300 {
            step(&mut h, &mut schedule, &mut sent);
        }
        // Settle: everything acknowledged, every marker written.
        h.release();
        for _ in 0..4 {
            h.write_markers();
        }
        for token in &sent {
            assert!(
                h.is_answered(*token),
                "seed {seed}: {token:?} never answered"
            );
        }
        assert!(h.markers.is_empty(), "seed {seed}: markers still owed");
        let (fresh, owed) = h.replayed();
        assert!(owed.is_empty(), "seed {seed}: a Prepare state left behind");
        if snapshot_after_records < 20_000 {
            assert!(
                h.log
                    .iter()
                    .any(|(_, entry)| super::harness::is_snapshot(entry)),
                "seed {seed}: no snapshot taken"
            );
        }
        assert_eq!(
            views(&fresh, h.config.state_partitions),
            views(&h.coordinator, h.config.state_partitions),
            "seed {seed}"
        );
    }
}
