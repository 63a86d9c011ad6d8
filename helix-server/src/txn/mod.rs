//! The transaction coordinator (Kafka's `TransactionCoordinator`, KIP-98
//! with KIP-360 and KIP-890 part 1's verify-only question): InitProducerId
//! with a transactional id, AddPartitionsToTxn, AddOffsetsToTxn, EndTxn,
//! transaction timeouts and the markers that end a transaction.
//!
//! It is a deterministic state machine ([`coordinator::Coordinator`]), the
//! shape of `group/`: requests, time, proposal outcomes and marker
//! completions go in; answers (named by the host's [`types::RequestToken`]),
//! proposals of `__transaction_state` records and marker writes come out of
//! `take_ready`. Transactional ids hash to `__transaction_state` partitions
//! as in Kafka; a partition's view changes only when its records are
//! acknowledged, and `replay` rebuilds it from the log after a failover.
//! docs/adr/0026-transactions-design.md ("Step 1 as built") records the
//! design. [`service`] hosts it in the broker, [`markers`] writes its
//! markers, [`peer`] carries markers and verifications between nodes and
//! [`wire`] translates Kafka's requests ("Step 3 as built", "The cluster
//! step as built"); [`tooling`] answers what `kafka-transactions.sh` asks
//! the coordinator ("Operator tooling as built"). Offsets in a transaction
//! ("Offsets in transactions as built"): the group's `__consumer_offsets`
//! partition joins it (AddOffsetsToTxn), the group coordinator holds the
//! TxnOffsetCommit's offsets pending, and the markers written there end
//! them.

mod add_partitions;
mod coordinator;
mod end;
mod error;
mod init;
mod markers;
mod metadata;
mod ongoing;
pub mod peer;
pub mod peer_calls;
mod record;
mod request;
mod response;
pub mod service;
mod state;
pub mod tooling;
mod types;
mod verification;
mod views;
pub mod wire;

#[cfg(test)]
mod add_partitions_tests;
#[cfg(test)]
mod tests;
