//! One producer of a partition as DescribeProducers shows it: a plain
//! value, so the partition's work queue (`batcher`) can carry it without
//! knowing the producer table.

/// One producer of the partition, as of the last entry the replica applied.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ActiveProducer {
    pub producer_id: i64,
    pub epoch: i16,
    /// The last sequence of its last batch.
    pub last_sequence: i32,
    /// Max timestamp of its last batch or marker (ms).
    pub last_timestamp: i64,
    /// The coordinator epoch of its last marker (-1: none yet).
    pub coordinator_epoch: i32,
    /// The first offset of its open transaction (None: none open).
    pub txn_start_offset: Option<i64>,
}

/// Where a producer's last batch is, for the compacting cleaner (ADR 0027
/// §6): that batch keeps the producer's state in the log, so it is kept,
/// emptied if all its records go (Kafka's `isBatchLastRecordOfProducer`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProducerLastBatch {
    pub producer_id: i64,
    /// Last offset of its last data batch; None when it wrote only markers.
    pub last_data_offset: Option<i64>,
    pub epoch: i16,
}
