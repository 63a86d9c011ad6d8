//! Idempotent-producer state of one partition: per producer id, its epoch,
//! the sequence ranges of its last few batches with their offsets, and the
//! timestamp of its last batch (ADR 0022).
//!
//! Acceptance is decided once, by the leader, before it proposes
//! ([`Proposed::decide`]); an entry holds only what the leader accepted and
//! every replica appends all of it. So no replica judges a batch on its own
//! and replicas cannot diverge through this state, whatever each one
//! remembers. The [`ProducerTable`] is what a replica derived from the
//! entries it applied, in log order: a function of the log, never of wall
//! time or of the log start (retention and DeleteRecords leave it alone).
//! A producer expires after `producer.id.expiration.ms` of *log time* (the
//! largest batch timestamp applied), and the table holds at most
//! [`MAX_PRODUCERS`]; past that the producer idle longest is forgotten.
//! A producer the table never knew must start at sequence 0, or is
//! answered UNKNOWN_PRODUCER_ID (ADR 0025); one it may have forgotten
//! (expired, evicted, or lost with a snapshot) is accepted at any
//! sequence, as Kafka accepts a producer whose state retention removed.

use std::collections::{BTreeSet, HashMap, VecDeque};

use bytes::Bytes;
use serde::{Deserialize, Serialize};

use super::aborted_index::AbortedIndex;
use super::batch::{BatchHeader, NO_PRODUCER_ID, NO_SEQUENCE, parse_header};
use crate::config::DEFAULT_PRODUCER_ID_EXPIRATION_MS;
use crate::error::{HelixError, Result};

/// Batches remembered per producer: Kafka clients keep at most 5 in flight
/// per partition, so a retry is always one of the last 5.
const REMEMBERED_BATCHES: usize = 5;

/// Producers remembered per partition. Each costs about 200 bytes; past the
/// limit the producer whose last batch is oldest is forgotten (ADR 0022).
pub const MAX_PRODUCERS: usize = 10_000;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
struct BatchSeq {
    first_seq: i32,
    last_seq: i32,
    base_offset: i64,
}

/// One producer as far as the log shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProducerState {
    epoch: i16,
    recent: VecDeque<BatchSeq>,
    /// Max timestamp of its last batch (Kafka's `lastTimestamp`).
    #[serde(default)]
    last_timestamp: i64,
    /// The offset of its first batch in its open transaction (Kafka's
    /// `currentTxnFirstOffset`): set by a transactional batch, cleared by
    /// its marker (`producers/txn.rs`).
    #[serde(default)]
    txn_first_offset: Option<i64>,
    /// The coordinator epoch of its last marker (-1: none yet).
    #[serde(default = "no_coordinator_epoch")]
    coordinator_epoch: i32,
}

fn no_coordinator_epoch() -> i32 {
    -1
}

impl Default for ProducerState {
    fn default() -> Self {
        ProducerState {
            epoch: 0,
            recent: VecDeque::new(),
            last_timestamp: 0,
            txn_first_offset: None,
            coordinator_epoch: no_coordinator_epoch(),
        }
    }
}

impl ProducerState {
    fn record(&mut self, h: &BatchHeader, base_offset: i64) {
        if h.producer_epoch != self.epoch {
            self.epoch = h.producer_epoch;
            self.recent.clear();
        }
        if self.recent.len() == REMEMBERED_BATCHES {
            self.recent.pop_front();
        }
        self.recent.push_back(BatchSeq {
            first_seq: h.base_sequence,
            last_seq: h.last_sequence(),
            base_offset,
        });
        self.last_timestamp = self.last_timestamp.max(h.max_timestamp);
        if h.is_transactional() && self.txn_first_offset.is_none() {
            self.txn_first_offset = Some(base_offset);
        }
    }
}

/// What the check decided for one batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SequenceCheck {
    /// Append it.
    Accept,
    /// Already in the log at this base offset: answer without appending.
    Duplicate { base_offset: i64 },
}

/// What the table knows of one producer.
#[derive(Debug, Clone, Copy)]
pub enum Known<'a> {
    /// Its state as the log shows it.
    Live(&'a ProducerState),
    /// Nothing, and the table never forgot it: never seen here.
    Never,
    /// Nothing, but it may have been forgotten (expired, evicted, or its
    /// records removed while this replica's snapshot of them was lost).
    Forgotten,
}

/// Decides whether a batch of a producer the table knows as `known` may
/// follow what the log holds, as Kafka's `ProducerAppendInfo` does, with
/// one exception: a producer never seen here must start at sequence 0, or
/// is answered UNKNOWN_PRODUCER_ID (Kafka accepts any sequence there, ADR
/// 0025). A new epoch starts at 0; within an epoch, a replay of a
/// remembered batch is a duplicate and anything but the next sequence is
/// out of order.
pub fn check(known: Known<'_>, h: &BatchHeader) -> Result<SequenceCheck> {
    if h.producer_id == NO_PRODUCER_ID {
        return Ok(SequenceCheck::Accept);
    }
    // The group coordinator's transactional batch (TxnOffsetCommit) has no
    // sequence, as Kafka's coordinator-origin appends: only its epoch is
    // checked. Clients cannot send one (`kafka::produce` refuses it).
    if h.base_sequence == NO_SEQUENCE && h.is_transactional() {
        return match known {
            Known::Live(entry) if h.producer_epoch < entry.epoch => {
                Err(HelixError::InvalidProducerEpoch)
            }
            _ => Ok(SequenceCheck::Accept),
        };
    }
    let entry = match known {
        Known::Live(entry) => entry,
        // Its earlier batches may have been removed with its state:
        // Kafka's rule, any sequence (librdkafka would otherwise fail the
        // producer whenever its own bookkeeping cannot rule out a batch
        // in flight).
        Known::Forgotten => return Ok(SequenceCheck::Accept),
        // Its earlier batches are not here: they may be waiting on a
        // deposed leader, and accepting this one would tell the client
        // (librdkafka acknowledges implicitly what precedes an accepted
        // batch) that they are stored.
        Known::Never => {
            return if h.base_sequence == 0 {
                Ok(SequenceCheck::Accept)
            } else {
                Err(HelixError::UnknownProducerId(h.producer_id))
            };
        }
    };
    if h.producer_epoch < entry.epoch {
        return Err(HelixError::InvalidProducerEpoch);
    }
    // Only once transactional batches are taken (ADR 0026) is a
    // transaction ever open.
    if entry.txn_first_offset.is_some() && !h.is_transactional() {
        return Err(HelixError::InvalidTxnState);
    }
    if h.producer_epoch > entry.epoch {
        return if h.base_sequence == 0 {
            Ok(SequenceCheck::Accept)
        } else {
            Err(HelixError::OutOfOrderSequence {
                expected: 0,
                got: h.base_sequence,
            })
        };
    }
    let (first, last) = (h.base_sequence, h.last_sequence());
    if let Some(seen) = entry
        .recent
        .iter()
        .find(|b| b.first_seq == first && b.last_seq == last)
    {
        return Ok(SequenceCheck::Duplicate {
            base_offset: seen.base_offset,
        });
    }
    let expected = entry.recent.back().map_or(0, |b| next_seq(b.last_seq));
    if first == expected {
        Ok(SequenceCheck::Accept)
    } else {
        Err(HelixError::OutOfOrderSequence {
            expected,
            got: first,
        })
    }
}

/// Producer id → state, as of the last entry a replica applied.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProducerTable {
    producers: HashMap<i64, ProducerState>,
    /// Log time: the largest batch timestamp recorded (every batch counts,
    /// idempotent or not). Expiry is measured on it.
    #[serde(default)]
    clock: i64,
    /// `producer.id.expiration.ms` (configuration, not state).
    #[serde(skip, default = "default_expiration")]
    expiration_ms: i64,
    /// The highest producer id dropped by expiry or eviction (-1: none):
    /// producer ids are handed out in increasing order, so an unknown id
    /// at or below it may be one of them.
    #[serde(default = "no_producer")]
    forgot_up_to: i64,
    /// The log time at which the table was rebuilt without the snapshot of
    /// records since removed: until a producer they held would have
    /// expired, the table may lack producers it cannot name.
    #[serde(default)]
    lost_unnamed_at: Option<i64>,
    /// (first offset, producer id) of every open transaction: the last
    /// stable offset is the smallest first offset (`producers/txn.rs`).
    #[serde(default)]
    open_txns: BTreeSet<(i64, i64)>,
    /// The aborted transactions of the log, in log order (by marker
    /// offset), from the log start on: Kafka's `.txnindex`. Older entries
    /// are sealed into chunk files (`txn_index.rs`); only the recent ones
    /// are held here.
    #[serde(default)]
    aborted: AbortedIndex,
}

fn default_expiration() -> i64 {
    DEFAULT_PRODUCER_ID_EXPIRATION_MS
}

fn no_producer() -> i64 {
    NO_PRODUCER_ID
}

impl Default for ProducerTable {
    fn default() -> Self {
        ProducerTable {
            producers: HashMap::new(),
            clock: 0,
            expiration_ms: DEFAULT_PRODUCER_ID_EXPIRATION_MS,
            forgot_up_to: NO_PRODUCER_ID,
            lost_unnamed_at: None,
            open_txns: BTreeSet::new(),
            aborted: AbortedIndex::default(),
        }
    }
}

impl ProducerTable {
    /// Rebuilds the table from stored batch headers, oldest first.
    #[cfg(test)]
    pub fn rebuild(headers: &[BatchHeader]) -> ProducerTable {
        let mut t = ProducerTable::default();
        for h in headers {
            t.record(h, h.base_offset);
        }
        t
    }

    /// Sets `producer.id.expiration.ms`.
    pub fn set_expiration(&mut self, expiration_ms: i64) {
        self.expiration_ms = expiration_ms;
    }

    pub fn expiration_ms(&self) -> i64 {
        self.expiration_ms
    }

    /// The producer's state unless it is unknown or expired (idle for
    /// `producer.id.expiration.ms` of log time).
    pub fn live(&self, producer_id: i64) -> Option<&ProducerState> {
        let horizon = self.clock.saturating_sub(self.expiration_ms);
        self.producers
            .get(&producer_id)
            .filter(|s| s.last_timestamp >= horizon || s.txn_first_offset.is_some())
    }

    /// What the table knows of `producer_id`.
    pub fn known(&self, producer_id: i64) -> Known<'_> {
        if let Some(state) = self.live(producer_id) {
            Known::Live(state)
        } else if producer_id <= self.forgot_up_to
            || self.producers.contains_key(&producer_id)
            || self
                .lost_unnamed_at
                .is_some_and(|at| self.clock <= at.saturating_add(self.expiration_ms))
        {
            Known::Forgotten
        } else {
            Known::Never
        }
    }

    /// Records that producers were lost with the records below the log
    /// start (rebuilt without a snapshot that covered them): until they
    /// would have expired, an unknown producer may be one of them.
    pub fn lost_unnamed(&mut self) {
        self.lost_unnamed_at = Some(self.clock);
    }

    /// [`check`] against this table alone (a leader with nothing in flight).
    #[cfg(test)]
    pub fn check(&self, h: &BatchHeader) -> Result<SequenceCheck> {
        check(self.known(h.producer_id), h)
    }

    /// Records an appended batch at its assigned base offset (every
    /// replica, for every batch of every applied entry, in log order).
    pub fn record(&mut self, h: &BatchHeader, base_offset: i64) {
        self.clock = self.clock.max(h.max_timestamp);
        if h.producer_id == NO_PRODUCER_ID {
            return;
        }
        if !self.producers.contains_key(&h.producer_id) && self.producers.len() >= MAX_PRODUCERS {
            // Expired producers go first, so the choice below is made among
            // the same live producers on every replica.
            self.expire();
            if self.producers.len() >= MAX_PRODUCERS {
                self.forget_idlest();
            }
        }
        let state = self.producers.entry(h.producer_id).or_default();
        let was_open = state.txn_first_offset.is_some();
        state.record(h, base_offset);
        if !was_open && let Some(first) = state.txn_first_offset {
            self.open_txns.insert((first, h.producer_id));
        }
    }

    /// Forgets the producer whose last batch is oldest (ties: the lowest
    /// id), so the choice is the same on every replica.
    fn forget_idlest(&mut self) {
        let idlest = self
            .producers
            .iter()
            .filter(|(_, s)| s.txn_first_offset.is_none())
            .min_by_key(|(id, s)| (s.last_timestamp, **id))
            .map(|(id, _)| *id);
        if let Some(id) = idlest {
            self.producers.remove(&id);
            self.forgot_up_to = self.forgot_up_to.max(id);
        }
    }

    /// Drops producers expired by log time (they already decide as
    /// unknown; this only frees their memory).
    pub fn expire(&mut self) {
        let horizon = self.clock.saturating_sub(self.expiration_ms);
        let mut forgot = self.forgot_up_to;
        self.producers.retain(|id, s| {
            // A producer in a transaction stays until its marker, as in
            // Kafka: the last stable offset waits for it.
            let live = s.last_timestamp >= horizon || s.txn_first_offset.is_some();
            if !live {
                forgot = forgot.max(*id);
            }
            live
        });
        self.forgot_up_to = forgot;
    }

    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.producers.len()
    }
}

/// The outcome the leader decided for one produce request.
#[derive(Debug)]
pub enum Decision {
    /// Goes into the entry; lands at this base offset.
    Append { base_offset: i64 },
    /// Already in the log (or proposed) at this base offset: nothing is
    /// appended; answered once the entry carrying the decision is
    /// acknowledged (so the original is too).
    Duplicate { base_offset: i64 },
    /// Refused (out of order, fenced epoch, malformed): answered now.
    Reject(HelixError),
}

/// The leader's view past its applied table: the state of each producer
/// its in-flight proposals touched, and where its next batch lands. Empty
/// on followers; cleared whenever the term changes or the log is cut.
#[derive(Debug, Default)]
pub struct Proposed {
    /// The term these proposals were made in.
    term: u64,
    /// Producer → (state after the last proposal touching it, that
    /// proposal's index).
    producers: HashMap<i64, (ProducerState, u64)>,
    /// (index, log end offset after it) of each produce proposal in flight.
    in_flight: VecDeque<(u64, i64)>,
}

/// A proposal's decisions before it is in the log: merged into
/// [`Proposed`] once Raft took it, dropped otherwise.
#[derive(Debug)]
pub struct Staged {
    producers: HashMap<i64, ProducerState>,
    end_offset: i64,
}

impl Proposed {
    /// Decides every request of one proposal, in order, against what the
    /// log holds (`table`, applied up to `log_end` offsets) and what this
    /// leader already proposed in `term`. Nothing changes until
    /// [`Proposed::commit`]. `may_open(i, producer)`: whether request `i`
    /// may open a transaction of `producer` here (its verification still
    /// holds, `replica::verification`); a transactional batch that would
    /// open one otherwise is refused INVALID_TXN_STATE.
    pub fn decide<'a>(
        &mut self,
        term: u64,
        table: &ProducerTable,
        log_end: i64,
        requests: impl Iterator<Item = &'a [Bytes]>,
        may_open: impl Fn(usize, i64) -> bool,
    ) -> (Vec<Decision>, Staged) {
        if term != self.term {
            self.clear();
            self.term = term;
        }
        let mut staged = Staged {
            producers: HashMap::new(),
            end_offset: self.in_flight.back().map_or(log_end, |(_, end)| *end),
        };
        let decisions = requests
            .enumerate()
            .map(|(i, batches)| {
                self.decide_one(table, &mut staged, batches, |pid| may_open(i, pid))
            })
            .collect();
        (decisions, staged)
    }

    fn decide_one(
        &self,
        table: &ProducerTable,
        staged: &mut Staged,
        batches: &[Bytes],
        may_open: impl Fn(i64) -> bool,
    ) -> Decision {
        // Changes of this request alone: kept only if all of it is accepted.
        let mut mine: HashMap<i64, ProducerState> = HashMap::new();
        let mut next = staged.end_offset;
        for (i, bytes) in batches.iter().enumerate() {
            let h = match parse_header(bytes) {
                Ok(h) => h,
                Err(e) => return Decision::Reject(e),
            };
            if h.producer_id != NO_PRODUCER_ID {
                let pid = h.producer_id;
                let current = mine
                    .get(&pid)
                    .or_else(|| staged.producers.get(&pid))
                    .or_else(|| self.producers.get(&pid).map(|(s, _)| s))
                    .map_or_else(|| table.known(pid), Known::Live);
                match check(current, &h) {
                    Ok(SequenceCheck::Accept) => {
                        // A client's transactional batch that opens a
                        // transaction here (duplicates were answered
                        // above, as Kafka does; the group coordinator's
                        // own batches carry no sequence and no guard).
                        let opens = h.is_transactional()
                            && h.base_sequence != NO_SEQUENCE
                            && !matches!(current, Known::Live(s) if s.txn_first_offset.is_some());
                        if opens && !may_open(pid) {
                            return Decision::Reject(HelixError::InvalidTxnState);
                        }
                        let mut after = match current {
                            Known::Live(s) => s.clone(),
                            Known::Never | Known::Forgotten => ProducerState::default(),
                        };
                        after.record(&h, next);
                        mine.insert(pid, after);
                    }
                    Ok(SequenceCheck::Duplicate { base_offset }) if i == 0 => {
                        return Decision::Duplicate { base_offset };
                    }
                    Ok(SequenceCheck::Duplicate { .. }) => {
                        return Decision::Reject(HelixError::DuplicateSequence);
                    }
                    Err(e) => return Decision::Reject(e),
                }
            }
            next += i64::from(h.record_count);
        }
        let base_offset = staged.end_offset;
        staged.end_offset = next;
        staged.producers.extend(mine);
        Decision::Append { base_offset }
    }

    /// Raft took the proposal at `index`: its decisions are now what later
    /// proposals are checked against.
    pub fn commit(&mut self, index: u64, staged: Staged) {
        for (pid, state) in staged.producers {
            self.producers.insert(pid, (state, index));
        }
        self.in_flight.push_back((index, staged.end_offset));
    }

    /// The entry at `index` was applied: what it decided is in the table.
    pub fn applied(&mut self, index: u64) {
        while self.in_flight.front().is_some_and(|(i, _)| *i <= index) {
            self.in_flight.pop_front();
        }
        if self.in_flight.is_empty() {
            self.producers.clear();
        } else {
            self.producers.retain(|_, (_, at)| *at > index);
        }
    }

    /// Forgets every proposal (the term changed, or the log was cut).
    pub fn clear(&mut self) {
        self.producers.clear();
        self.in_flight.clear();
    }
}

fn next_seq(s: i32) -> i32 {
    if s == i32::MAX { 0 } else { s + 1 }
}

mod active;
#[cfg(test)]
mod tests;
mod txn;

pub use active::ActiveProducer;
pub use txn::derive_from_stored;
