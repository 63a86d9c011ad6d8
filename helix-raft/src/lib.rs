//! helix-raft: the replication core.
//!
//! A group is a pure state machine: the host feeds it ticks, messages,
//! proposals and reports (vote persisted, entries applied, WAL durable up to an
//! index) and collects what it must do next. No sockets, clocks, threads or
//! tokio live here, so every schedule can be replayed from a seed.
//!
//! Three positions per group (docs/design.md, "Durability"): the **commit index**
//! (majority in memory; entries up to it are applied, i.e. appended to the
//! WAL), each replica's **durable index** (end of its WAL, or fsynced WAL),
//! and the **acknowledged index** (highest current-term index durable on a
//! majority): producers are answered and consumers read only up to it.
//! The safety argument is docs/adr/0002-raft-acknowledged-index.md; the host
//! contract is docs/raft.md.
//!
//! The one-voter path (a single-node broker):
//!
//! ```
//! use bytes::Bytes;
//! use helix_raft::{GroupId, LogIndex, NodeId, RaftConfig, RaftGroup, Restored};
//!
//! let cfg = RaftConfig::new(NodeId(1), vec![NodeId(1)]);
//! let mut g = RaftGroup::new(GroupId(0), cfg, Restored::fresh(42)).unwrap();
//! g.campaign(); // leader at once; appends a no-op at index 1
//! let idx = g.propose(Bytes::from_static(b"batch")).unwrap();
//! let rd = g.ready();
//! assert!(rd.hard_state.is_some()); // persist before sending anything
//! assert_eq!(rd.to_apply.len(), 2); // append both to the WAL, then:
//! g.durable_to(idx).unwrap();
//! assert_eq!(g.ready().acknowledged, Some(idx)); // answer the producer
//! ```

pub mod budget;
pub mod codec;
pub mod config;
pub mod error;
pub mod group;
pub mod log;
pub mod message;
pub mod multi;
pub mod progress;
pub mod ready;
pub mod rng;
pub mod types;

pub use budget::MemoryBudget;
pub use codec::{MessageBatch, decode_batch, encode_batch};
pub use config::{RaftConfig, Restored};
pub use error::{ProposeError, RaftError};
pub use group::RaftGroup;
pub use message::{CatchUpRequest, Message, MessageBody};
pub use multi::{MultiRaft, MultiReady};
pub use ready::{FollowerStatus, Ready, Status};
pub use types::{Entry, EntryKind, GroupId, HardState, LogIndex, NodeId, Role, Term};
