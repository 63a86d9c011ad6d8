//! The wall clock, read in one place. Kafka timestamps, retention and the
//! group coordinator's deadlines are Unix milliseconds; a clock set before
//! 1970 reads as 0 rather than failing (nothing here may panic on it).
//! Durations and timeouts use `Instant`, never this.

use std::time::{SystemTime, UNIX_EPOCH};

/// Milliseconds since the Unix epoch (Kafka's timestamp unit), 0 before it.
pub fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

/// [`now_ms`] as the unsigned milliseconds the group coordinator counts in.
pub fn now_ms_unsigned() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}
