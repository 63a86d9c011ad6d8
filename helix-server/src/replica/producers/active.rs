//! The producers a replica knows, as DescribeProducers shows them (what
//! `kafka-transactions.sh describe-producers` and `find-hanging` read, and
//! where `abort` finds a hanging transaction's producer and epochs): Kafka's
//! `UnifiedLog.activeProducers`. A read of the table, changing nothing.

use super::ProducerTable;
pub use crate::replica::active_producer::{ActiveProducer, ProducerLastBatch};

/// Kafka's "no sequence" (`RecordBatch.NO_SEQUENCE`): a producer known
/// only from a marker has none.
const NO_SEQUENCE: i32 = -1;

impl ProducerTable {
    /// Every producer not expired, by producer id: at most
    /// [`super::MAX_PRODUCERS`] (the table's own bound), so one answer
    /// stays a few hundred KB.
    pub fn active(&self) -> Vec<ActiveProducer> {
        let mut out: Vec<ActiveProducer> = self
            .producers
            .keys()
            .filter_map(|&id| Some((id, self.live(id)?)))
            .map(|(producer_id, s)| ActiveProducer {
                producer_id,
                epoch: s.epoch,
                last_sequence: s.recent.back().map_or(NO_SEQUENCE, |b| b.last_seq),
                last_timestamp: s.last_timestamp,
                coordinator_epoch: s.coordinator_epoch,
                txn_start_offset: s.txn_first_offset,
            })
            .collect();
        out.sort_by_key(|p| p.producer_id);
        out
    }

    /// Every producer the table holds, with where its last data batch
    /// ends (what a compaction pass must keep, ADR 0027 §6).
    pub fn last_batches(&self) -> Vec<ProducerLastBatch> {
        self.producers
            .iter()
            .map(|(&producer_id, s)| ProducerLastBatch {
                producer_id,
                last_data_offset: s
                    .recent
                    .back()
                    .map(|b| b.base_offset + i64::from(b.last_seq.wrapping_sub(b.first_seq))),
                epoch: s.epoch,
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::replica::batch::BatchHeader;
    use crate::replica::markers::Marker;

    fn batch(pid: i64, epoch: i16, seq: i32, count: i32, ts: i64, txn: bool) -> BatchHeader {
        BatchHeader {
            base_offset: 0,
            batch_length: 88,
            partition_leader_epoch: 1,
            magic: 2,
            crc: 0,
            attributes: if txn { 0x10 } else { 0 },
            last_offset_delta: count - 1,
            first_timestamp: ts,
            max_timestamp: ts,
            producer_id: pid,
            producer_epoch: epoch,
            base_sequence: seq,
            record_count: count,
        }
    }

    #[test]
    fn active_producers_show_open_transactions_and_their_last_marker() {
        let mut t = ProducerTable::default();
        t.record(&batch(9, 2, 0, 3, 1_000, true), 10);
        t.record(&batch(9, 2, 3, 2, 1_500, true), 13);
        t.record(&batch(4, 0, 0, 1, 1_200, false), 15);
        let open = ActiveProducer {
            producer_id: 9,
            epoch: 2,
            last_sequence: 4,
            last_timestamp: 1_500,
            coordinator_epoch: -1,
            txn_start_offset: Some(10),
        };
        let idempotent = ActiveProducer {
            producer_id: 4,
            epoch: 0,
            last_sequence: 0,
            last_timestamp: 1_200,
            coordinator_epoch: -1,
            txn_start_offset: None,
        };
        assert_eq!(t.active(), vec![idempotent, open]);

        let abort = Marker {
            producer_id: 9,
            producer_epoch: 2,
            commit: false,
            coordinator_epoch: 7,
            timestamp: 2_000,
        };
        t.end_txn(&abort, 16);
        let ended = ActiveProducer {
            last_timestamp: 2_000,
            coordinator_epoch: 7,
            txn_start_offset: None,
            ..open
        };
        assert_eq!(t.active(), vec![idempotent, ended]);
    }

    #[test]
    fn a_producer_known_only_from_a_marker_has_no_sequence() {
        let mut t = ProducerTable::default();
        let marker = Marker {
            producer_id: 3,
            producer_epoch: 1,
            commit: true,
            coordinator_epoch: 0,
            timestamp: 50,
        };
        t.end_txn(&marker, 0);
        assert_eq!(t.active()[0].last_sequence, NO_SEQUENCE);
    }
}
