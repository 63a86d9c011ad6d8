//! helix-raft: the replication core.
//!
//! A group is a pure state machine: the host feeds it ticks, messages,
//! proposals and reports (vote persisted, entries applied, WAL durable up to an
//! index) and collects what it must do next. No sockets, clocks, threads or
//! tokio live here, so every schedule can be replayed from a seed.
