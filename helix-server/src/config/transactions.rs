//! The transaction coordinator's settings, with Kafka's defaults
//! (docs/configuration.md lists them with their flags).

/// Settings of the transaction coordinator.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TxnConfig {
    /// `transaction.state.log.num.partitions`: how many partitions
    /// `__transaction_state` has. Part of the durable layout.
    pub state_partitions: u32,
    /// `transaction.max.timeout.ms`: the longest `transaction.timeout.ms` a
    /// producer may ask for (INVALID_TRANSACTION_TIMEOUT beyond it).
    pub max_timeout_ms: i32,
    /// `transactional.id.expiration.ms`: an idle transactional id (no open
    /// transaction) untouched this long is forgotten.
    pub transactional_id_expiration_ms: u64,
    /// `transaction.abort.timed.out.transaction.cleanup.interval.ms`: how
    /// often `tick` looks for transactions past their timeout.
    pub abort_check_interval_ms: u64,
    /// `transaction.remove.expired.transaction.cleanup.interval.ms`: how
    /// often `tick` looks for expired transactional ids.
    pub expiry_check_interval_ms: u64,
    /// Acknowledged records after which a `__transaction_state` partition
    /// writes its whole view as one snapshot entry and deletes the log
    /// before it (as `GroupConfig::snapshot_after_records`): the log and
    /// the replay on failover then grow with the live transactional ids,
    /// not with the history of their transactions.
    pub snapshot_after_records: u64,
    /// `transaction.state.log.segment.bytes`: segment size of the
    /// `__transaction_state` logs (as `GroupConfig::segment_bytes`).
    /// Kafka: 100 MiB; Helix: 64 MiB.
    pub segment_bytes: u64,
}

impl Default for TxnConfig {
    fn default() -> Self {
        Self {
            state_partitions: 50,
            max_timeout_ms: 900_000,
            transactional_id_expiration_ms: 604_800_000,
            abort_check_interval_ms: 10_000,
            expiry_check_interval_ms: 3_600_000,
            snapshot_after_records: 20_000,
            segment_bytes: 64 << 20,
        }
    }
}

/// Most `__transaction_state` partitions a node hosts (each is a WAL
/// directory and a Raft group), as for `__consumer_offsets`.
pub const MAX_STATE_PARTITIONS: u32 = 1000;

impl TxnConfig {
    /// Refuses settings the coordinator cannot work with; the message names
    /// the setting as `docs/configuration.md` does.
    pub fn validate(&self) -> Result<(), String> {
        if self.state_partitions == 0 || self.state_partitions > MAX_STATE_PARTITIONS {
            return Err(format!(
                "transaction_state_partitions must be between 1 and {MAX_STATE_PARTITIONS}"
            ));
        }
        if self.max_timeout_ms <= 0 {
            return Err("transaction_max_timeout_ms must be positive".into());
        }
        if self.abort_check_interval_ms == 0 || self.expiry_check_interval_ms == 0 {
            return Err("transaction cleanup intervals must be positive".into());
        }
        if self.snapshot_after_records == 0 {
            return Err("transaction_snapshot_after_records must be at least 1".into());
        }
        let segments = super::groups::MIN_INTERNAL_SEGMENT_BYTES..=helix_wal::MAX_SEGMENT_BYTES;
        if !segments.contains(&self.segment_bytes) {
            return Err(format!(
                "transaction_state_log_segment_bytes must be between {} and {}",
                segments.start(),
                segments.end()
            ));
        }
        if self.transactional_id_expiration_ms == 0 {
            return Err("transactional_id_expiration_ms must be positive".into());
        }
        Ok(())
    }
}
