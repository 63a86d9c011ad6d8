//! The coordinator's settings, each with Kafka's name and default unless
//! noted (docs/groups.md lists them). Every limit here bounds memory or a
//! record's size; none is unbounded.

/// Settings of the group coordinator.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupConfig {
    /// Number of internal coordinator partitions group ids hash to
    /// (`offsets.topic.num.partitions`, Kafka: 50). Fixed for the life of a
    /// cluster: it decides where each group's records live.
    pub coordinator_partitions: u32,
    /// `group.min.session.timeout.ms` (Kafka: 6000).
    pub min_session_timeout_ms: i32,
    /// `group.max.session.timeout.ms` (Kafka: 1800000).
    pub max_session_timeout_ms: i32,
    /// `group.initial.rebalance.delay.ms`. Kafka's default is 3000; Helix
    /// defaults to 0 so a single consumer starts at once (ADR 0020).
    pub initial_rebalance_delay_ms: u64,
    /// `group.max.size`. Kafka's default is unbounded; Helix bounds it so a
    /// group's record stays a sensible Raft entry.
    pub max_group_size: usize,
    /// `offsets.retention.minutes` in ms (Kafka: 7 days).
    pub offsets_retention_ms: u64,
    /// `offsets.retention.check.interval.ms` (Kafka: 600000).
    pub offsets_retention_check_interval_ms: u64,
    /// `offset.metadata.max.bytes` (Kafka: 4096).
    pub max_offset_metadata_bytes: usize,
    /// Helix: longest group id accepted, in bytes (INVALID_GROUP_ID above).
    pub max_group_id_bytes: usize,
    /// Helix: largest protocol metadata (all protocols of one JoinGroup) or
    /// assignment (one member's, in SyncGroup) accepted, in bytes.
    pub max_member_metadata_bytes: usize,
    /// How long a new member may wait in a join phase before it is dropped
    /// (Kafka's `NewMemberJoinTimeoutMs`, 5 minutes).
    pub new_member_join_timeout_ms: u64,
    /// Helix: after this many acknowledged records a coordinator partition
    /// writes a snapshot entry (its whole view) and the log before it is
    /// deleted, bounding log size and replay time (Kafka compacts instead).
    pub snapshot_after_records: u64,
    /// `offsets.topic.segment.bytes`: segment size of the coordinator
    /// partitions' logs. The log before a snapshot goes a whole sealed
    /// segment at a time, so this bounds what a partition keeps on disk
    /// beside its live state. Kafka: 100 MiB; Helix: 64 MiB.
    pub segment_bytes: u64,
}

impl Default for GroupConfig {
    fn default() -> Self {
        Self {
            coordinator_partitions: 50,
            min_session_timeout_ms: 6_000,
            max_session_timeout_ms: 1_800_000,
            initial_rebalance_delay_ms: 0,
            max_group_size: 1_000,
            offsets_retention_ms: 7 * 24 * 60 * 60 * 1000,
            offsets_retention_check_interval_ms: 600_000,
            max_offset_metadata_bytes: 4096,
            max_group_id_bytes: 255,
            max_member_metadata_bytes: 1024 * 1024,
            new_member_join_timeout_ms: 300_000,
            snapshot_after_records: 20_000,
            segment_bytes: 64 << 20,
        }
    }
}

/// Most coordinator partitions a node hosts (each is a WAL directory and a
/// Raft group); Kafka's default is 50.
pub const MAX_COORDINATOR_PARTITIONS: u32 = 1000;

/// Smallest segment of an internal partition's log: one entry (a snapshot
/// or a group's record) may be as large as a Raft entry, and a segment
/// holds at least one.
pub const MIN_INTERNAL_SEGMENT_BYTES: u64 = 1 << 20;

impl GroupConfig {
    /// Refuses settings the coordinator cannot work with; the message names
    /// the setting as `docs/configuration.md` does.
    pub fn validate(&self) -> Result<(), String> {
        if self.coordinator_partitions == 0
            || self.coordinator_partitions > MAX_COORDINATOR_PARTITIONS
        {
            return Err(format!(
                "group_coordinator_partitions must be between 1 and {MAX_COORDINATOR_PARTITIONS}"
            ));
        }
        if self.min_session_timeout_ms <= 0
            || self.min_session_timeout_ms > self.max_session_timeout_ms
        {
            return Err("group_min_session_timeout_ms must be positive and at most \
                        group_max_session_timeout_ms"
                .into());
        }
        if self.max_group_size == 0 {
            return Err("group_max_size must be at least 1".into());
        }
        if self.offsets_retention_ms == 0 {
            return Err("offsets_retention_minutes must be at least 1".into());
        }
        if self.snapshot_after_records == 0 {
            return Err("group_snapshot_after_records must be at least 1".into());
        }
        if !(MIN_INTERNAL_SEGMENT_BYTES..=helix_wal::MAX_SEGMENT_BYTES)
            .contains(&self.segment_bytes)
        {
            return Err(format!(
                "offsets_topic_segment_bytes must be between {MIN_INTERNAL_SEGMENT_BYTES} and {}",
                helix_wal::MAX_SEGMENT_BYTES
            ));
        }
        Ok(())
    }
}
