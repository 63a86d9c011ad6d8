//! Scripted scenarios that drive the transaction coordinator as its host
//! would: requests with tokens, producer ids from a block, acknowledgement
//! of every proposal (or holding them), marker writes reported done, ticks
//! with simulated time, and replay of the acknowledged log.

mod fencing;
pub(crate) mod harness;
mod lifecycle;
mod replay;
mod simulation;
mod transitions;
