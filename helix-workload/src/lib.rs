//! helix-workload: verified load against any Kafka broker, through
//! librdkafka, so that Helix and Apache Kafka are measured by the same
//! client. A profile (profiles/*.toml) says what to offer; the run prints a
//! line a second, a summary table, optional JSON and charts, and reads
//! everything back to check that no acknowledged record was lost,
//! duplicated, reordered or corrupted.

pub mod admin;
pub mod cluster;
pub mod consume;
pub mod payload;
pub mod produce;
pub mod profile;
pub mod report;
pub mod run;
pub mod stats;
pub mod verify;
