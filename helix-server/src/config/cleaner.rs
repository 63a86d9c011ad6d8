//! The log cleaner's settings (ADR 0027 §8-§9), Kafka's `log.cleaner.*`
//! and the broker defaults of the topic compaction settings, with Kafka
//! 3.9's defaults (docs/configuration.md lists them with their flags).

/// Settings of the background log cleaner and the defaults of the topic
/// settings it reads.
#[derive(Debug, Clone, PartialEq)]
pub struct CleanerConfig {
    /// `log.cleaner.enable`: whether compacted topics are cleaned at all.
    pub enable: bool,
    /// `log.cleaner.threads`: partitions cleaned at once; the dedupe
    /// buffer is split between them.
    pub threads: usize,
    /// `log.cleaner.dedupe.buffer.size`: bytes of key map, all threads
    /// together (24 bytes per key; ADR 0027 §8).
    pub dedupe_buffer_size: usize,
    /// `log.cleaner.io.buffer.load.factor`: how full the key map may get.
    pub io_buffer_load_factor: f64,
    /// `log.cleaner.io.buffer.size`: split between the threads, half of
    /// each share is a pass's write buffer (Kafka's read half has no
    /// counterpart: batches are read in place in the mappings).
    pub io_buffer_size: usize,
    /// `log.cleaner.io.max.bytes.per.second`: bytes read and written by
    /// all cleaner threads; Kafka's default is unlimited (`f64::MAX`).
    pub io_max_bytes_per_second: f64,
    /// `log.cleaner.backoff.ms`: the pause when no partition needs
    /// cleaning.
    pub backoff_ms: u64,
    /// `log.cleanup.policy`: the default of the topic's `cleanup.policy`.
    pub cleanup_policy: String,
    /// `log.cleaner.min.cleanable.ratio`: default `min.cleanable.dirty.ratio`.
    pub min_cleanable_ratio: f64,
    /// `log.cleaner.delete.retention.ms`: default `delete.retention.ms`.
    pub delete_retention_ms: i64,
    /// `log.cleaner.min.compaction.lag.ms`: default `min.compaction.lag.ms`.
    pub min_compaction_lag_ms: i64,
    /// `log.cleaner.max.compaction.lag.ms`: default `max.compaction.lag.ms`.
    pub max_compaction_lag_ms: i64,
}

impl Default for CleanerConfig {
    fn default() -> Self {
        CleanerConfig {
            enable: true,
            threads: 1,
            dedupe_buffer_size: 128 << 20,
            io_buffer_load_factor: 0.9,
            io_buffer_size: 512 << 10,
            io_max_bytes_per_second: f64::MAX,
            backoff_ms: 15_000,
            cleanup_policy: "delete".into(),
            min_cleanable_ratio: 0.5,
            delete_retention_ms: 86_400_000,
            min_compaction_lag_ms: 0,
            max_compaction_lag_ms: i64::MAX,
        }
    }
}

/// Most cleaner threads (Kafka has no bound; each holds a key map).
pub const MAX_CLEANER_THREADS: usize = 64;

impl CleanerConfig {
    /// Refuses settings the cleaner cannot work with; the message names the
    /// setting as `docs/configuration.md` does.
    pub fn validate(&self) -> Result<(), String> {
        if self.threads == 0 || self.threads > MAX_CLEANER_THREADS {
            return Err(format!(
                "log_cleaner_threads must be between 1 and {MAX_CLEANER_THREADS}"
            ));
        }
        // A map that holds hardly any key cleans hardly anything.
        if self.dedupe_buffer_size / self.threads < 1 << 20 {
            return Err(
                "log_cleaner_dedupe_buffer_size must give each thread at least 1 MiB".into(),
            );
        }
        if !(self.io_buffer_load_factor > 0.0 && self.io_buffer_load_factor <= 1.0) {
            return Err("log_cleaner_io_buffer_load_factor must be in (0, 1]".into());
        }
        if self.io_buffer_size == 0 {
            return Err("log_cleaner_io_buffer_size must be positive".into());
        }
        if self.io_max_bytes_per_second.is_nan() || self.io_max_bytes_per_second <= 0.0 {
            return Err("log_cleaner_io_max_bytes_per_second must be positive".into());
        }
        if CleanupPolicy::parse(&self.cleanup_policy).is_none() {
            return Err("log_cleanup_policy must be a list of compact and delete".into());
        }
        if !(0.0..=1.0).contains(&self.min_cleanable_ratio) {
            return Err("log_cleaner_min_cleanable_ratio must be between 0 and 1".into());
        }
        if self.delete_retention_ms < 0 || self.min_compaction_lag_ms < 0 {
            return Err(
                "log_cleaner_delete_retention_ms and log_cleaner_min_compaction_lag_ms must not be negative"
                    .into(),
            );
        }
        if self.max_compaction_lag_ms < 1 || self.min_compaction_lag_ms > self.max_compaction_lag_ms
        {
            return Err(
                "log_cleaner_max_compaction_lag_ms must be at least 1 and at least log_cleaner_min_compaction_lag_ms"
                    .into(),
            );
        }
        Ok(())
    }
}

/// What a `cleanup.policy` (a list of `compact` and `delete`) asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CleanupPolicy {
    /// The cleaner keeps the latest record per key.
    pub compact: bool,
    /// Retention deletes old segments.
    pub delete: bool,
}

impl CleanupPolicy {
    /// Kafka's `ValidList.in("compact", "delete")`: comma-separated, any
    /// case-sensitive subset, items trimmed; None for anything else.
    pub fn parse(text: &str) -> Option<CleanupPolicy> {
        let mut policy = CleanupPolicy::default();
        for item in text.split(',').map(str::trim).filter(|i| !i.is_empty()) {
            match item {
                "compact" => policy.compact = true,
                "delete" => policy.delete = true,
                _ => return None,
            }
        }
        Some(policy)
    }
}
