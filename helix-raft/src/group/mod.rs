//! One replica of one Raft group: a deterministic state machine.
//!
//! Inputs: `tick`, `step`, `propose`, `campaign`, `transfer_leader`,
//! `durable_to`, `catch_up`. Output: `ready()`. The submodules split the
//! protocol along its seams: `step` (term rules and dispatch), `election`
//! (pre-vote, vote, check-quorum, leader transfer), `replication` (the
//! leader's side: progress, pipelining, commit and acknowledged indexes,
//! catch-up, memory release) and `follower` (AppendEntries and heartbeats).

mod election;
mod follower;
mod replication;
mod step;

use bytes::Bytes;

use crate::config::{RaftConfig, Restored};
use crate::error::{ProposeError, RaftError};
use crate::log::RaftLog;
use crate::message::{CatchUpRequest, Message, MessageBody};
use crate::progress::{Progress, ProgressState};
use crate::ready::{FollowerStatus, Ready, Status};
use crate::rng::SplitMix64;
use crate::types::{Entry, EntryKind, GroupId, HardState, LogIndex, NodeId, Role, Term};

/// Counters for observability.
#[derive(Clone, Copy, Debug, Default)]
struct Counters {
    elections_started: u64,
    elections_won: u64,
    wal_truncations: u64,
}

/// One replica of one group. `Send`: the host may move it to any worker.
#[derive(Debug)]
pub struct RaftGroup {
    group: GroupId,
    cfg: RaftConfig,
    term: Term,
    voted_for: Option<NodeId>,
    /// The hard state last handed to the host.
    persisted: HardState,
    role: Role,
    leader: Option<NodeId>,
    log: RaftLog,
    /// Leader only: one entry per other voter.
    progress: Vec<(NodeId, Progress)>,
    /// (Pre-)candidate only: answers received, this node included.
    votes: Vec<(NodeId, bool)>,
    election_elapsed: u32,
    heartbeat_elapsed: u32,
    randomized_timeout: u32,
    rng: SplitMix64,
    /// Follower: highest index known to match the current leader's log this
    /// term. Commit, acknowledged and durable reports are clamped by it.
    leader_match: LogIndex,
    /// Follower: the highest commit index the current term's leader has
    /// sent, not clamped to what this log matches (how far behind it is).
    leader_commit: LogIndex,
    /// Follower: the highest acknowledged index the current term's leader
    /// has sent, not clamped (what a learner must hold to vote again).
    leader_ack: LogIndex,
    /// Follower: the durable index last reported to the leader.
    durable_reported: LogIndex,
    acknowledged: LogIndex,
    ack_reported: LogIndex,
    transferee: Option<NodeId>,
    transfer_elapsed: u32,
    /// See [`HardState::learner`].
    learner: bool,
    /// The host found this replica's stored data damaged: it hands over
    /// leadership and never campaigns again (in this incarnation).
    stood_down: bool,
    msgs: Vec<Message>,
    /// Appends of WAL entries fed in by `catch_up` (their own channel).
    catch_up_msgs: Vec<Message>,
    truncate_wal_after: Option<LogIndex>,
    /// See [`Ready::restart_wal_at`].
    restart_wal_at: Option<LogIndex>,
    catch_up: Vec<CatchUpRequest>,
    /// Leader: new entries or a new commit index wait to be sent.
    flush_pending: bool,
    counters: Counters,
}

impl RaftGroup {
    /// A replica restored from its persisted vote and WAL (or fresh).
    pub fn new(group: GroupId, cfg: RaftConfig, restored: Restored) -> Result<Self, RaftError> {
        cfg.validate()?;
        let term_starts = restore_term_starts(&cfg, &restored)?;
        let wal_last = restored.wal_last.map_or(LogIndex(0), |(i, _)| i);
        let wal_term = restored.wal_last.map_or(Term(0), |(_, t)| t);
        let mut log = RaftLog::restored(wal_last, &term_starts);
        log.set_budget(cfg.node_budget.clone());
        // A replica's term is never below the term of its last WAL entry.
        let (term, voted_for) = if wal_term > restored.hard_state.term {
            (wal_term, None)
        } else {
            (restored.hard_state.term, restored.hard_state.voted_for)
        };
        // A learner starts a term of its own: its answers make the current
        // leader step down, so no leader counts a durable report this
        // replica sent before it lost its log (reports of older terms are
        // ignored), and the acknowledged index it waits for is computed
        // from what it reports now.
        let (term, voted_for) = if restored.hard_state.learner {
            (Term(term.0 + 1), None)
        } else {
            (term, voted_for)
        };
        let mut g = RaftGroup {
            group,
            term,
            voted_for,
            persisted: restored.hard_state,
            role: Role::Follower,
            leader: None,
            log,
            progress: Vec::new(),
            votes: Vec::new(),
            election_elapsed: 0,
            heartbeat_elapsed: 0,
            randomized_timeout: cfg.election_ticks,
            rng: SplitMix64::for_replica(restored.seed, group.0, cfg.node.0),
            leader_match: LogIndex(0),
            leader_commit: LogIndex(0),
            leader_ack: LogIndex(0),
            durable_reported: LogIndex(0),
            acknowledged: LogIndex(0),
            ack_reported: LogIndex(0),
            transferee: None,
            transfer_elapsed: 0,
            learner: restored.hard_state.learner,
            stood_down: false,
            msgs: Vec::new(),
            catch_up_msgs: Vec::new(),
            truncate_wal_after: None,
            restart_wal_at: None,
            catch_up: Vec::new(),
            flush_pending: false,
            counters: Counters::default(),
            cfg,
        };
        g.randomize_timeout();
        Ok(g)
    }

    #[must_use]
    pub fn group(&self) -> GroupId {
        self.group
    }

    #[must_use]
    pub fn node(&self) -> NodeId {
        self.cfg.node
    }

    #[must_use]
    pub fn role(&self) -> Role {
        self.role
    }

    #[must_use]
    pub fn term(&self) -> Term {
        self.term
    }

    #[must_use]
    pub fn leader(&self) -> Option<NodeId> {
        self.leader
    }

    #[must_use]
    pub fn acknowledged(&self) -> LogIndex {
        self.acknowledged
    }

    #[must_use]
    pub fn config(&self) -> &RaftConfig {
        &self.cfg
    }

    /// Term of `index` in this replica's log (WAL or memory), if it has one.
    #[must_use]
    pub fn term_at(&self, index: LogIndex) -> Option<Term> {
        self.log.term_at(index)
    }

    /// The entry at `index` if it is still in memory.
    #[must_use]
    pub fn entry(&self, index: LogIndex) -> Option<&Entry> {
        self.log.entry(index)
    }

    /// One unit of time: election timeout, heartbeats, check-quorum.
    pub fn tick(&mut self) {
        if self.role == Role::Leader {
            self.tick_leader();
        } else {
            self.tick_election();
        }
    }

    /// Proposes `data` as a new entry; returns its index. It is acknowledged
    /// when a `Ready` reports `acknowledged >= index` from this same term.
    pub fn propose(&mut self, data: Bytes) -> Result<LogIndex, ProposeError> {
        if self.role != Role::Leader {
            return Err(ProposeError::NotLeader {
                leader: self.leader,
            });
        }
        if let Some(to) = self.transferee {
            return Err(ProposeError::TransferInProgress(to));
        }
        let cost = data.len() + crate::types::ENTRY_OVERHEAD_BYTES;
        if !self.memory_fits(cost) {
            // Lagging followers lose their in-memory suffix first: they can
            // catch up from the WAL. Unapplied entries cannot be released.
            self.log.release_to(self.log.applied());
            if !self.memory_fits(cost) {
                return Err(ProposeError::Backpressure);
            }
        }
        let index = self.append_entry(EntryKind::Normal, data);
        Ok(index)
    }

    /// Starts an election now (a one-voter group becomes leader at once).
    pub fn campaign(&mut self) {
        if self.role != Role::Leader && self.may_stand() {
            self.become_candidate(false);
        }
    }

    /// The host found this replica's stored data damaged: a leader hands
    /// leadership to its most caught-up follower (stepping down after an
    /// election timeout if the hand-over does not happen), and the replica
    /// never campaigns again. It still votes: its log's positions and terms
    /// are intact, only stored bytes are not.
    pub fn stand_down(&mut self) {
        self.stood_down = true;
        if self.role != Role::Leader {
            return;
        }
        let best = self
            .progress
            .iter()
            .max_by_key(|(n, pr)| (pr.matched, *n))
            .map(|(n, _)| *n);
        match best {
            Some(to) => self.transfer_leader(to),
            None => {
                let term = self.term;
                self.become_follower(term, None);
            }
        }
    }

    /// Whether this replica may stand for election: not a learner (it lost
    /// its log) and not stood down (its stored data is damaged).
    fn may_stand(&self) -> bool {
        !self.learner && !self.stood_down
    }

    /// Whether [`RaftGroup::stand_down`] was called.
    #[must_use]
    pub fn stood_down(&self) -> bool {
        self.stood_down
    }

    /// The host appended (or fsynced) its WAL up to `index`.
    pub fn durable_to(&mut self, index: LogIndex) -> Result<(), RaftError> {
        if index > self.log.applied() {
            return Err(RaftError::DurableBeyondApplied {
                durable: index,
                applied: self.log.applied(),
            });
        }
        if self.log.durable_to(index) {
            if self.role == Role::Leader {
                self.maybe_acknowledge();
            } else {
                self.maybe_restored();
                self.report_durable();
            }
        }
        Ok(())
    }

    /// Is there anything for the host to do?
    #[must_use]
    pub fn has_ready(&self) -> bool {
        self.hard_state() != self.persisted
            || self.truncate_wal_after.is_some()
            || self.restart_wal_at.is_some()
            || self.log.has_to_apply()
            || !self.msgs.is_empty()
            || !self.catch_up_msgs.is_empty()
            || !self.catch_up.is_empty()
            || self.acknowledged != self.ack_reported
            || (self.flush_pending && self.role == Role::Leader)
    }

    /// Takes the pending work. No `advance` is needed afterwards.
    pub fn ready(&mut self) -> Ready {
        self.flush();
        let hs = self.hard_state();
        let hard_state = (hs != self.persisted).then_some(hs);
        self.persisted = hs;
        let acknowledged = (self.acknowledged != self.ack_reported).then_some(self.acknowledged);
        self.ack_reported = self.acknowledged;
        let ready = Ready {
            hard_state,
            truncate_wal_after: self.truncate_wal_after.take(),
            restart_wal_at: self.restart_wal_at.take(),
            to_apply: self.log.take_to_apply(),
            messages: std::mem::take(&mut self.msgs),
            catch_up_messages: std::mem::take(&mut self.catch_up_msgs),
            catch_up: std::mem::take(&mut self.catch_up),
            acknowledged,
        };
        self.release_memory();
        ready
    }

    /// Observability snapshot.
    #[must_use]
    pub fn status(&self) -> Status {
        Status {
            role: self.role,
            term: self.term,
            leader: self.leader,
            commit: self.log.commit(),
            leader_commit: if self.role == Role::Leader {
                self.log.commit()
            } else {
                self.leader_commit
            },
            applied: self.log.applied(),
            durable: self.log.durable(),
            acknowledged: self.acknowledged,
            last_index: self.log.last_index(),
            mem_start: self.log.mem_start(),
            inmem_bytes: self.log.mem_bytes(),
            followers: self
                .progress
                .iter()
                .map(|(node, pr)| FollowerStatus {
                    node: *node,
                    matched: pr.matched,
                    next: pr.next,
                    durable: pr.durable,
                    inflight: pr.inflight(),
                    catching_up: pr.state == ProgressState::CatchUp,
                    ticks_since_heard: pr.ticks_since_heard,
                })
                .collect(),
            elections_started: self.counters.elections_started,
            elections_won: self.counters.elections_won,
            wal_truncations: self.counters.wal_truncations,
            transferring_to: self.transferee,
            learner: self.learner,
        }
    }

    fn memory_fits(&self, cost: usize) -> bool {
        self.log.mem_bytes() + cost <= self.cfg.max_inmem_bytes
            && self.cfg.node_budget.as_ref().is_none_or(|b| b.fits(cost))
    }

    fn hard_state(&self) -> HardState {
        HardState {
            term: self.term,
            voted_for: self.voted_for,
            learner: self.learner,
        }
    }

    fn send(&mut self, to: NodeId, term: Term, body: MessageBody) {
        self.msgs.push(Message {
            group: self.group,
            from: self.cfg.node,
            to,
            term,
            body,
        });
    }

    fn randomize_timeout(&mut self) {
        let base = u64::from(self.cfg.election_ticks);
        self.randomized_timeout = self.rng.in_range(base, 2 * base) as u32;
    }

    fn peers(&self) -> impl Iterator<Item = NodeId> + '_ {
        let me = self.cfg.node;
        self.cfg.voters.iter().copied().filter(move |n| *n != me)
    }

    fn is_voter(&self, node: NodeId) -> bool {
        self.cfg.voters.contains(&node)
    }

    /// Resets volatile state for `term` (clearing the vote if it changes).
    fn reset(&mut self, term: Term) {
        if term != self.term {
            self.term = term;
            self.voted_for = None;
        }
        self.leader = None;
        self.election_elapsed = 0;
        self.heartbeat_elapsed = 0;
        self.randomize_timeout();
        self.votes.clear();
        self.progress.clear();
        self.transferee = None;
        self.transfer_elapsed = 0;
        self.leader_match = LogIndex(0);
        self.leader_commit = LogIndex(0);
        self.leader_ack = LogIndex(0);
        self.durable_reported = LogIndex(0);
    }

    fn become_follower(&mut self, term: Term, leader: Option<NodeId>) {
        self.reset(term);
        self.role = Role::Follower;
        self.leader = leader;
    }
}

/// Checks and completes the WAL's term starts handed over by the host.
fn restore_term_starts(
    cfg: &RaftConfig,
    restored: &Restored,
) -> Result<Vec<(LogIndex, Term)>, RaftError> {
    let Some((wal_last, wal_term)) = restored.wal_last else {
        return Ok(Vec::new());
    };
    if wal_last.0 == 0 {
        return Err(RaftError::InvalidRestore("wal_last index 0"));
    }
    let starts = &restored.wal_term_starts;
    if starts.is_empty() {
        if cfg.voters.len() == 1 {
            return Ok(vec![(LogIndex(1), wal_term)]);
        }
        return Err(RaftError::InvalidRestore(
            "wal_term_starts needed for a multi-voter group",
        ));
    }
    for pair in starts.windows(2) {
        if pair[0].0 >= pair[1].0 || pair[0].1 >= pair[1].1 {
            return Err(RaftError::InvalidRestore(
                "wal_term_starts not strictly ascending",
            ));
        }
    }
    let (last_start, last_term) = starts[starts.len() - 1];
    if last_start > wal_last || last_term != wal_term || starts[0].0.0 == 0 {
        return Err(RaftError::InvalidRestore(
            "wal_term_starts disagree with wal_last",
        ));
    }
    Ok(starts.clone())
}
