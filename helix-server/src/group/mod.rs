//! The consumer-group coordinator (Kafka's classic group protocol):
//! JoinGroup, SyncGroup, Heartbeat, LeaveGroup, OffsetCommit, OffsetFetch,
//! ListGroups, DescribeGroups, DeleteGroups and OffsetDelete.
//!
//! It is a deterministic state machine ([`Coordinator`]): requests, time and
//! proposal outcomes go in; replies (immediate or deferred, named by the
//! host's [`RequestToken`]) and [`Proposal`]s of durable records come out of
//! [`Coordinator::take_ready`]. Groups hash to a fixed number of internal
//! coordinator partitions, each a Raft group; a partition's view (committed
//! offsets, each group's stored generation and assignment) changes only when
//! its records are acknowledged, and [`Coordinator::replay`] rebuilds it
//! from the log after a restart or truncation. docs/groups.md describes the
//! semantics and how the broker drives it.

mod admin;
mod classic;
mod coordinator;
mod error;
mod join;
mod offsets;
mod rebalance;
mod record;
mod response;
pub mod service;
mod sync;
mod txn_offsets;
mod types;
mod versions;
pub mod wire;

#[cfg(test)]
mod tests;

/// The coordinator's settings, part of the broker's `Config`.
pub use crate::config::GroupConfig;

// What the scenario tests drive, by the names they use.
#[cfg(test)]
use {
    coordinator::{Coordinator, GroupRequest},
    error::GroupError,
    record::{GroupRecord, Record, encode_entry},
    response::{GroupResponse, Proposal},
    types::{ClientInfo, CoordinatorPartition, LoggedEntry, RequestToken},
    versions::SUPPORTED_VERSIONS,
};
