//! The apply side of one partition replica, driven by the shard that hosts
//! its Raft group: proposes batches from the batcher, applies what Raft
//! commits to the WAL (assigning offsets), truncates the WAL when a new
//! leader's log disagrees, publishes the high watermark (the acknowledged
//! offset) and answers produce requests once their entry is acknowledged.
//!
//! Leader and follower run the same code: a follower simply has no waiters.
//! A proposal is matched to the entry applied at its index only if that
//! entry carries the term it was proposed in (docs/raft.md).

mod compact;
mod propose;
mod publish;
mod restart;
mod snapshot;
mod stored;
mod txn;

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use helix_raft::{Entry, EntryKind, LogIndex, RaftGroup, Term};
use helix_wal::{AppendCheck, LogConfig, PartitionLog, RaftPosition};

use super::answers::{Unacked, Waiter, fail_requests, fail_waiter};
use super::apply::apply_produce;
use super::entry::{self, PartitionEntry};
use super::producers::{Decision, ProducerTable, Proposed};
use super::raft::HardStateFile;
use super::scan::{self, Snapshot};
use super::{Leadership, Published};
use crate::batcher::{PartitionCommand, PendingProduce, ProduceAck, Work};
use crate::error::{HelixError, Result};
use crate::metrics::{Metrics, Stage, metrics};
use crate::offset::Offset;

/// One replica's state outside Raft. Owned by a shard thread.
pub struct PartitionState {
    /// The partition's directory (vote, snapshots of derived state).
    dir: std::path::PathBuf,
    /// Always Some, except for the instant of a reopen (see `reconfigure`).
    log: Option<PartitionLog>,
    pub(crate) hard_state: HardStateFile,
    /// Producer state as of the last applied entry (every replica).
    producers: ProducerTable,
    /// The leader's decisions not yet applied (empty on followers).
    proposed: Proposed,
    /// Batches the in-memory Raft log had no room for, in arrival order
    /// (see `state/propose.rs`).
    held: VecDeque<Vec<PendingProduce>>,
    published: Arc<Published>,
    /// Proposed entries (term at propose, index) in index order, with who
    /// waits for them.
    waiting: VecDeque<(Term, LogIndex, Waiter, Instant)>,
    /// Applied entries whose acknowledgement is not known yet.
    unacked: VecDeque<Unacked>,
    /// Highest acknowledged index learned (may be ahead of what is applied).
    acknowledged: LogIndex,
    /// Last index appended to the WAL.
    applied: LogIndex,
    /// The last leadership published to readers.
    leadership: Leadership,
    /// Transactions ended by a marker not yet acknowledged: (first offset,
    /// marker offset). They hold the last stable offset back as if open
    /// (Kafka's `unreplicatedTxns`): the marker may still be cut.
    unreplicated: VecDeque<(i64, i64)>,
    /// The leader's derived state as of an entry not applied yet, carried
    /// by a restart of this log (`state/restart.rs`): it replaces what
    /// was rebuilt from the log once that entry is applied.
    carried: Option<Snapshot>,
}

impl PartitionState {
    pub(super) fn new(
        dir: std::path::PathBuf,
        log: PartitionLog,
        hard_state: HardStateFile,
        producers: ProducerTable,
        published: Arc<Published>,
    ) -> PartitionState {
        let applied = LogIndex(log.last_position().map_or(0, |p| p.index));
        PartitionState {
            dir,
            log: Some(log),
            hard_state,
            producers,
            proposed: Proposed::default(),
            held: VecDeque::new(),
            published,
            waiting: VecDeque::new(),
            unacked: VecDeque::new(),
            acknowledged: LogIndex(0),
            applied,
            leadership: Leadership::default(),
            unreplicated: VecDeque::new(),
            carried: None,
        }
    }

    /// A read found damage in this replica's log: in a group with other
    /// replicas it hands leadership to a healthy replica, never campaigns
    /// again, and marks its directory so the next open sets the log aside
    /// and rebuilds it from the leader (ADR 0016). True when it stood down
    /// now.
    pub fn stand_down_if_damaged(&self, group: &mut RaftGroup) -> bool {
        let Some(why) = self.published.damaged.get() else {
            return false;
        };
        if group.stood_down() || group.config().voters.len() < 2 {
            return false;
        }
        group.stand_down();
        if let Err(e) = super::learner::mark(&self.dir, why) {
            tracing::error!(dir = %self.dir.display(), error = %e, "cannot record the damage for the next start");
        }
        tracing::warn!(
            group = group.group().0,
            dir = %self.dir.display(),
            "damaged replica stands down: leadership moves to a healthy replica; its log is set aside and rebuilt from the leader at the next start"
        );
        true
    }

    /// Whether appends are made durable by fsync (group-committed).
    pub fn fsync(&self) -> bool {
        self.log
            .as_ref()
            .is_some_and(|l| l.config().durability == helix_wal::Durability::Fsync)
    }

    /// The WAL's durable end, capped at what was applied.
    pub fn durable_index(&self) -> LogIndex {
        let durable = self
            .log
            .as_ref()
            .and_then(PartitionLog::durable_position)
            .map_or(LogIndex(0), |p| LogIndex(p.index));
        durable.min(self.applied)
    }

    /// Takes one piece of work from the batcher. Returns false when the
    /// partition must stop (closed, or its log could not be reopened).
    pub fn work(&mut self, group: &mut RaftGroup, work: Work) -> bool {
        match work {
            Work::Produce(batch) => self.propose_produce(group, batch),
            Work::Control(PartitionCommand::Produce(p)) => self.propose_produce(group, vec![p]),
            Work::Control(PartitionCommand::DeleteRecords { before, reply }) => {
                match group.propose(entry::encode_delete_records(before)) {
                    Ok(index) => self.waiting.push_back((
                        group.term(),
                        index,
                        Waiter::DeleteRecords(reply),
                        Instant::now(),
                    )),
                    Err(e) => {
                        let _ = reply.send(Err(e.into()));
                    }
                }
            }
            Work::Control(PartitionCommand::Close { reply }) => {
                self.close();
                let _ = reply.send(());
                return false;
            }
            Work::Control(PartitionCommand::Reconfigure { log }) => {
                if let Err(e) = self.reconfigure(log) {
                    tracing::error!(error = %e, "reopening the log with new settings failed; partition stopped");
                    self.fail_all(&e);
                    return false;
                }
            }
            Work::Control(PartitionCommand::Marker { marker, reply }) => {
                self.propose_marker(group, marker, reply)
            }
            Work::Control(PartitionCommand::DescribeProducers { reply }) => {
                let _ = reply.send(self.producers.active());
            }
            Work::Control(PartitionCommand::Retention { now_ms }) => self.retention(now_ms),
            Work::Control(PartitionCommand::ProducerLastBatches { reply }) => {
                let _ = reply.send(self.producers.last_batches());
            }
            Work::Control(PartitionCommand::SwapCleaned {
                cleaned_below,
                intents,
                reply,
            }) => {
                let _ = reply.send(self.swap_cleaned(cleaned_below, &intents));
            }
        }
        true
    }

    /// Cuts the WAL after `after` (a new leader's log differs beyond it;
    /// always above the acknowledged index) and rebuilds what was derived
    /// from the dropped entries.
    pub fn truncate(&mut self, after: LogIndex) -> Result<()> {
        let log = live(&mut self.log)?;
        log.truncate_after(after.0)?;
        self.applied = self.applied.min(after);
        self.proposed.clear();
        // A snapshot taken beyond the cut no longer describes the log; one
        // at or below it still does, plus the entries after it.
        // A carried state (saved at a restart) is of an entry every
        // replica commits: no cut reaches it.
        let snapshot = Snapshot::load(&self.dir).and_then(|s| s.describes(log));
        if snapshot.is_none() && self.carried.is_none() {
            Snapshot::remove(&self.dir);
        }
        self.rebuild_after_cut(after, snapshot)?;
        Metrics::count(&metrics().counters.wal_truncations, 1);
        tracing::info!(dir = %self.dir.display(), after = after.0, next_offset = self.log.as_ref().map_or(-1, PartitionLog::next_offset), "WAL truncated to the new leader's log");
        Ok(())
    }

    /// What is derived from the log, rebuilt from what the log holds after
    /// entries above `after` were cut (producers, max timestamp,
    /// transactions), and every request waiting on a cut entry failed.
    fn rebuild_after_cut(&mut self, after: LogIndex, snapshot: Option<Snapshot>) -> Result<()> {
        let log = live(&mut self.log)?;
        let txn_dir = crate::replica::txn_index::dir_of(&self.dir);
        let (mut producers, max_ts) =
            scan::rebuild(&log.reader(), log.next_offset(), snapshot, Some(&txn_dir))?;
        producers.set_expiration(self.producers.expiration_ms());
        self.producers = producers;
        if let Ok(mut m) = self.published.max_timestamp.lock() {
            *m = max_ts;
        }
        let end = log.next_offset();
        self.unreplicated.retain(|(_, marker)| *marker < end);
        let err = HelixError::NotLeader;
        while self.unacked.back().is_some_and(|u| u.index > after) {
            if let Some(mut u) = self.unacked.pop_back() {
                u.fail(&err);
            }
        }
        while self.waiting.back().is_some_and(|(_, i, _, _)| *i > after) {
            if let Some((_, _, w, _)) = self.waiting.pop_back() {
                fail_waiter(w, &err, &self.published.refused);
            }
        }
        self.publish_txns();
        Ok(())
    }

    /// Appends committed entries to the WAL in order. Returns the last index
    /// applied, if any. `crc_checked` tells whether this node validated the
    /// batches' CRCs when it proposed them (the leader); entries that came
    /// from another node are verified in full on append.
    pub fn apply(&mut self, entries: Vec<Entry>) -> Result<Option<LogIndex>> {
        let m = metrics();
        let mut last = None;
        self.cover_stored_gaps(&entries)?;
        for e in entries {
            let pos = RaftPosition {
                term: e.term.0,
                index: e.index.0,
            };
            let waiter = self.take_waiter(e.term, e.index);
            let proposed_at = waiter.as_ref().map(|(_, at)| *at);
            if let Some(at) = proposed_at {
                m.record(Stage::RaftCommit, at.elapsed());
            }
            let started = Instant::now();
            let applying = match e.kind {
                EntryKind::Noop => {
                    live(&mut self.log)?.append(pos, &[])?;
                    None
                }
                EntryKind::Normal => {
                    let check = if waiter.is_some() {
                        AppendCheck::CrcVerifiedByCaller
                    } else {
                        AppendCheck::Full
                    };
                    Some(self.apply_normal(pos, e.data, check)?)
                }
            };
            m.record(Stage::Apply, started.elapsed());
            self.applied = e.index;
            self.adopt_carried(e.term, e.index);
            self.proposed.applied(e.index.0);
            let unacked = self.settle(e.index, waiter.map(|(w, _)| w), applying, proposed_at);
            self.push_unacked(unacked);
            last = Some(e.index);
        }
        self.publish_ongoing();
        Ok(last)
    }

    /// The waiter of the entry at `index` if it was proposed here in `term`.
    /// Waiters for earlier indexes (entries that another leader replaced)
    /// are failed on the way.
    fn take_waiter(&mut self, term: Term, index: LogIndex) -> Option<(Waiter, Instant)> {
        while let Some((t, i, _, _)) = self.waiting.front() {
            if *i > index {
                return None;
            }
            let matches = *i == index && *t == term;
            let (_, _, w, at) = self.waiting.pop_front()?;
            if matches {
                return Some((w, at));
            }
            fail_waiter(w, &HelixError::NotLeader, &self.published.refused);
        }
        None
    }

    fn apply_normal(
        &mut self,
        pos: RaftPosition,
        data: Bytes,
        check: AppendCheck,
    ) -> Result<Applying> {
        Ok(match entry::decode(data)? {
            PartitionEntry::Produce { lengths, data } => {
                let mut max_ts = self
                    .published
                    .max_timestamp
                    .lock()
                    .map(|m| *m)
                    .unwrap_or(None);
                let outcomes = apply_produce(
                    live(&mut self.log)?,
                    &mut self.producers,
                    pos,
                    &lengths,
                    data,
                    &mut max_ts,
                    check,
                )?;
                if let Ok(mut m) = self.published.max_timestamp.lock() {
                    *m = max_ts;
                }
                Applying::Produce(outcomes)
            }
            PartitionEntry::DeleteRecords { before } => {
                // The producer state survives the records it came from.
                self.snapshot();
                let log = live(&mut self.log)?;
                // Deterministic on every replica: the entry's own position
                // bounds it, not a replica's view of the high watermark.
                // The WAL keeps the entry's offset, so catch-up from it
                // sends this entry as itself (helix-wal `log/delete_records.rs`).
                let result = match log.append_delete_records(pos, before) {
                    Ok(o) => Ok(o.log_start_offset),
                    // Appended, the move refused or failed: the client
                    // hears why (out of range, or the I/O error).
                    Err(e) if log.last_position() == Some(pos) => Err(HelixError::from(e)),
                    Err(e) => return Err(e.into()),
                };
                self.trim_aborted();
                Applying::DeleteRecords(result)
            }
            PartitionEntry::Marker(marker) => Applying::Marker(self.apply_marker(pos, &marker)?),
            PartitionEntry::Stored {
                first_offset,
                next_offset,
                batches,
            } => {
                self.apply_stored(pos, (first_offset, next_offset), &batches)?;
                Applying::Stored
            }
        })
    }

    /// Pairs an applied entry's results with its waiter: acks=1 and errors
    /// are answered now, acks=all held until acknowledged, acks=0 dropped.
    fn settle(
        &mut self,
        index: LogIndex,
        waiter: Option<Waiter>,
        applying: Option<Applying>,
        proposed_at: Option<Instant>,
    ) -> Unacked {
        let (log_start, end_offset) = self
            .log
            .as_ref()
            .map_or((-1, -1), |l| (l.log_start_offset(), l.next_offset()));
        let mut unacked = Unacked::new(index, end_offset, proposed_at);
        match (waiter, applying) {
            (None, _) => {}
            (Some(Waiter::Produce(requests)), Some(Applying::Produce(offsets))) => {
                let mut offsets = offsets.into_iter();
                for (p, decision) in requests {
                    let answer = match decision {
                        Decision::Append { base_offset } => {
                            let stored = offsets.next().unwrap_or(-1);
                            if stored == base_offset {
                                Ok(ProduceAck {
                                    base_offset: Offset(base_offset),
                                    log_start_offset: Offset(log_start),
                                })
                            } else {
                                tracing::error!(
                                    ?index,
                                    base_offset,
                                    stored,
                                    "an appended request landed where its leader did not decide"
                                );
                                Err(HelixError::CorruptState(
                                    "a request landed at another offset than decided".into(),
                                ))
                            }
                        }
                        Decision::Duplicate { base_offset } => Ok(ProduceAck {
                            base_offset: Offset(base_offset),
                            log_start_offset: Offset(log_start),
                        }),
                        Decision::Reject(err) => Err(err),
                    };
                    let Some(reply) = p.reply else { continue };
                    if p.acks == 1 || answer.is_err() {
                        let _ = reply.send(answer);
                    } else {
                        unacked.answers.push((reply, answer, p.room));
                    }
                }
            }
            (Some(Waiter::DeleteRecords(reply)), Some(Applying::DeleteRecords(result))) => {
                unacked.offset_reply = Some((reply, result));
            }
            (Some(Waiter::Marker(reply)), Some(Applying::Marker(offset))) => {
                unacked.offset_reply = Some((reply, Ok(offset)));
            }
            (Some(waiter), _) => {
                tracing::error!(?index, "entry kind does not match its waiter");
                fail_waiter(
                    waiter,
                    &HelixError::CorruptState("entry kind does not match its waiter".into()),
                    &self.published.refused,
                );
            }
        }
        unacked
    }

    fn push_unacked(&mut self, unacked: Unacked) {
        if unacked.index <= self.acknowledged {
            // Known acknowledged before it was applied here (a follower, or a
            // new leader catching up with what it learned).
            self.release(unacked);
        } else {
            self.unacked.push_back(unacked);
        }
    }

    /// The group's acknowledged index moved: answer and publish up to it.
    pub fn acknowledged(&mut self, acknowledged: LogIndex) {
        self.acknowledged = self.acknowledged.max(acknowledged);
        while self
            .unacked
            .front()
            .is_some_and(|u| u.index <= self.acknowledged)
        {
            if let Some(u) = self.unacked.pop_front() {
                self.release(u);
            }
        }
    }

    fn release(&mut self, u: Unacked) {
        if let Some(at) = u.proposed_at {
            metrics().record(Stage::Ack, at.elapsed());
        }
        // Transactions first: a reader that sees the new high watermark
        // sees what holds the last stable offset back at it.
        let hw = self.published.high_watermark.borrow().0.max(u.end_offset);
        self.publish_unstable(hw);
        self.published.high_watermark.send_if_modified(|hw| {
            let moved = u.end_offset > hw.0;
            if moved {
                *hw = Offset(u.end_offset);
            }
            moved
        });
        u.answer();
    }

    /// Retention as Kafka does it: whole sealed segments beyond
    /// `retention.bytes` or older than `retention.ms`; never the active one.
    fn retention(&mut self, now_ms: i64) {
        self.snapshot();
        let Ok(log) = live(&mut self.log) else { return };
        if let Err(e) = log.apply_retention(now_ms) {
            tracing::warn!(error = %e, "retention failed");
        }
        self.trim_aborted();
    }

    /// Applies changed topic settings that the WAL takes only at open:
    /// closes the log and opens it again with `config`.
    fn reconfigure(&mut self, config: LogConfig) -> Result<()> {
        let Some(old) = self.log.take() else {
            return Err(HelixError::CorruptState("partition log is closed".into()));
        };
        let dir = old.dir().to_path_buf();
        old.close()?;
        let (log, recovery) = PartitionLog::open(&dir, config)?;
        if recovery.truncated_tail.is_some() {
            return Err(HelixError::CorruptState(
                "a cleanly closed log reopened with a torn tail".into(),
            ));
        }
        if let Ok(mut r) = self.published.reader.write() {
            *r = log.reader();
        }
        self.log = Some(log);
        Ok(())
    }

    /// Stops: fails what waits, saves the snapshot, closes the log.
    pub fn close(&mut self) {
        self.fail_all(&HelixError::ShuttingDown);
        self.snapshot();
        if let Some(log) = self.log.take()
            && let Err(e) = log.close()
        {
            tracing::warn!(error = %e, "closing the log failed");
        }
    }

    /// Everyone still waiting gets `err`.
    pub fn fail_all(&mut self, err: &HelixError) {
        for batch in self.held.drain(..) {
            fail_requests(batch, err, &self.published.refused);
        }
        for (_, _, waiter, _) in self.waiting.drain(..) {
            fail_waiter(waiter, err, &self.published.refused);
        }
        for u in self.unacked.iter_mut() {
            u.fail(err);
        }
    }

    /// Streams WAL entries from `from` for a follower's catch-up.
    pub fn entries_from(&self, from: LogIndex) -> Option<helix_wal::EntryStream> {
        self.log.as_ref().map(|l| l.entries_from(from.0))
    }

    /// Index of the first entry the WAL holds (see helix-wal `first_index`).
    pub fn first_held_index(&self) -> Option<LogIndex> {
        self.log.as_ref()?.first_index().map(LogIndex)
    }

    /// The DeleteRecords entries the WAL keeps for catch-up, oldest first.
    pub fn delete_records_entries(&self) -> Vec<helix_wal::DeleteRecordsEntry> {
        self.log
            .as_ref()
            .map_or_else(Vec::new, |l| l.delete_records_entries().to_vec())
    }
}

/// What applying a normal entry produced.
#[derive(Debug)]
enum Applying {
    /// Base offset of each request of the entry.
    Produce(Vec<i64>),
    DeleteRecords(Result<i64>),
    /// The marker's offset.
    Marker(i64),
    /// Nobody waits for a stored entry: only catch-up sends one.
    Stored,
}

/// The open log; an error only if a reopen failed earlier.
fn live(log: &mut Option<PartitionLog>) -> Result<&mut PartitionLog> {
    log.as_mut()
        .ok_or_else(|| HelixError::CorruptState("partition log is closed".into()))
}
