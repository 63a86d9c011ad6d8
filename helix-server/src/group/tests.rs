//! Scripted scenarios that drive the coordinator as its host would:
//! requests with tokens, ticks, and acknowledgement of every proposal.

mod durability;
mod harness;
mod membership;
mod offsets_admin;
mod simulation;
mod transactions;
mod versions;
