//! The cluster as this node sees it: its members and their addresses,
//! which of them are alive, and who leads each group — what Metadata,
//! DescribeCluster and FindCoordinator answer from.
//!
//! Leadership of a group comes from this node's own replica when it holds
//! one (its Raft state), otherwise from the leaders' reports
//! ([`leaders::LeaderTable`], fed by [`gossip`]). A member is alive when it
//! is this node or the peer transport heard from it recently.

pub mod gossip;
pub mod leaders;
pub mod peers;

#[cfg(test)]
mod compaction_tests;
#[cfg(test)]
mod delete_records_tests;
#[cfg(test)]
mod harness;
#[cfg(test)]
mod lease_tests;
#[cfg(test)]
mod refusal_tests;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod txn_restart_tests;
#[cfg(test)]
mod txn_tests;
#[cfg(test)]
mod txn_tools_tests;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use helix_raft::{GroupId, NodeId, Role, Term};

use crate::config::Config;
use crate::error::{HelixError, Result};
use crate::replica::Partition;
use leaders::LeaderTable;

/// A member of the cluster and where clients reach it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Member {
    pub id: NodeId,
    pub host: String,
    pub port: i32,
}

/// Tells whether a peer was heard from lately (the peer transport).
pub trait Liveness: Send + Sync + 'static {
    fn heard_within(&self, node: NodeId, within: Duration) -> bool;
    /// A connection to or from `node` broke and nothing has arrived from
    /// it since: known at once, where silence takes [`DOWN_AFTER`].
    fn broke_off(&self, node: NodeId) -> bool;
}

/// A node alone hears nobody.
pub struct Alone;

impl Liveness for Alone {
    fn heard_within(&self, _node: NodeId, _within: Duration) -> bool {
        false
    }

    fn broke_off(&self, _node: NodeId) -> bool {
        false
    }
}

/// A peer silent for this long is taken to be down.
pub const DOWN_AFTER: Duration = leaders::STALE_AFTER;

/// What is known of a partition's leadership.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaderView {
    pub leader: NodeId,
    pub term: Term,
    pub isr: Vec<NodeId>,
}

/// The cluster view of this node.
pub struct ClusterState {
    pub me: NodeId,
    /// Every member, sorted by id.
    pub members: Vec<Member>,
    pub leaders: LeaderTable,
    liveness: std::sync::RwLock<Arc<dyn Liveness>>,
    /// It has heard a majority since it started: without one now, it is
    /// cut off rather than starting.
    had_majority: AtomicBool,
}

impl std::fmt::Debug for ClusterState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClusterState")
            .field("me", &self.me)
            .field("members", &self.members)
            .finish()
    }
}

impl ClusterState {
    /// The members from the configuration (a single node: just itself).
    pub fn new(config: &Config) -> Result<ClusterState> {
        let me = config.raft_node_id()?;
        let members = match &config.cluster {
            Some(cluster) => cluster
                .nodes
                .iter()
                .map(|n| member(n.id, &n.kafka))
                .collect::<Result<Vec<_>>>()?,
            None => vec![member(config.node_id, &config.advertised)?],
        };
        Ok(ClusterState {
            me,
            members,
            leaders: LeaderTable::default(),
            liveness: std::sync::RwLock::new(Arc::new(Alone)),
            had_majority: AtomicBool::new(false),
        })
    }

    /// Where liveness comes from once the peer transport runs.
    pub fn set_liveness(&self, liveness: Arc<dyn Liveness>) {
        if let Ok(mut l) = self.liveness.write() {
            *l = liveness;
        }
    }

    pub fn member_ids(&self) -> Vec<NodeId> {
        self.members.iter().map(|m| m.id).collect()
    }

    pub fn member(&self, id: NodeId) -> Option<&Member> {
        self.members.iter().find(|m| m.id == id)
    }

    pub fn is_alive(&self, id: NodeId) -> bool {
        id == self.me
            || self
                .liveness
                .read()
                .map(|l| l.heard_within(id, DOWN_AFTER))
                .unwrap_or(false)
    }

    /// Whether this node hears a majority of the members (itself
    /// included). A node that does not is cut off, or still starting: it
    /// leads nothing and its view of who leads what is stale, so it names
    /// no leader to clients (see [`crate::kafka::metadata`]).
    ///
    /// A peer counts when it was heard within [`DOWN_AFTER`] and its
    /// connections have not broken since. So a node whose connections to
    /// a majority break (a peer refusing it, a cable pulled) knows it is
    /// cut off at once, as its followers do when they campaign (ADR 0017);
    /// only a silent cut waits for [`DOWN_AFTER`]. Without this, a node
    /// cut off for less than that answered a fresh client as a member
    /// with no leader for any partition, and the client, asking only
    /// that node, waited for it until [`DOWN_AFTER`] (ADR 0023, fourth
    /// attempt).
    pub fn hears_majority(&self) -> bool {
        let Ok(liveness) = self.liveness.read() else {
            return false;
        };
        let heard = self
            .members
            .iter()
            .filter(|m| self.counts_as_up(&**liveness, m.id))
            .count();
        let majority = heard > self.members.len() / 2;
        if majority {
            self.had_majority.store(true, Ordering::Relaxed);
        }
        majority
    }

    /// Cut off: it heard a majority since it started and hears none now.
    /// (A node still starting hears no majority either, but is not cut
    /// off.)
    pub fn cut_off(&self) -> bool {
        !self.hears_majority() && self.had_majority.load(Ordering::Relaxed)
    }

    /// The members a client should be told of (Metadata, DescribeCluster).
    /// - Hearing a majority: those up.
    /// - Cut off (it heard a majority since it started, and lost it): the
    ///   other members it has heard, not itself. It can serve nothing, and
    ///   a client told of the others only moves to them without a
    ///   disconnect (librdkafka drops a broker that Metadata no longer
    ///   lists; ADR 0023). Only a connection that was never told this node
    ///   is a member gets here (`kafka::dispatch` closes the others).
    /// - Starting (no majority heard yet): itself and whoever it has
    ///   heard, so clients wait on it instead of dialling nodes that may
    ///   not be up.
    pub fn members_to_offer(&self) -> Vec<&Member> {
        if self.hears_majority() {
            return self.live_members();
        }
        let liveness = self.liveness.read().ok();
        let heard = |m: &&Member| {
            m.id != self.me
                && liveness
                    .as_ref()
                    .is_some_and(|l| l.heard_within(m.id, Duration::MAX))
        };
        let others: Vec<&Member> = self.members.iter().filter(heard).collect();
        if self.had_majority.load(Ordering::Relaxed) && !others.is_empty() {
            return others;
        }
        self.members
            .iter()
            .filter(|m| m.id == self.me || heard(m))
            .collect()
    }

    /// The members that are up, as clients should see them: heard within
    /// [`DOWN_AFTER`], and (as [`Self::hears_majority`] counts them) not
    /// broken off since. A node that went down, or came back refused by
    /// the others (an untrusted certificate), is not offered at once: a
    /// client told of it in the [`DOWN_AFTER`] after its connections broke
    /// could pick it for InitProducerId and wait on it, answered
    /// COORDINATOR_LOAD_IN_PROGRESS for as long as it stays cut off
    /// (tests/test_peer_tls.py, librdkafka stuck 120 s).
    pub fn live_members(&self) -> Vec<&Member> {
        let Ok(liveness) = self.liveness.read() else {
            return self.members.iter().filter(|m| m.id == self.me).collect();
        };
        self.members
            .iter()
            .filter(|m| self.counts_as_up(&**liveness, m.id))
            .collect()
    }

    /// This node, or a peer heard within [`DOWN_AFTER`] whose connections
    /// have not broken since: the one rule for counting a majority and for
    /// offering a member to clients.
    fn counts_as_up(&self, liveness: &dyn Liveness, id: NodeId) -> bool {
        id == self.me || (liveness.heard_within(id, DOWN_AFTER) && !liveness.broke_off(id))
    }

    /// The leader of `group`: from the local replica if there is one (with
    /// the ISR it computes as leader, or the leader's report of it),
    /// otherwise from the leaders' reports; None while unknown or down.
    ///
    /// Leadership is by term: the highest term known wins, so once the
    /// majority elected a new leader, a report still fresh from the node
    /// it lost is outranked. This node names itself only while its replica
    /// holds the leader lease (a majority answered within it, ADR 0019): a
    /// leader cut off from its majority names no leader for its groups,
    /// while the majority elects another. (The reports it still holds of
    /// the other nodes' groups are kept: they send a client it serves to
    /// the majority.)
    pub fn leadership(&self, group: GroupId, local: Option<&Partition>) -> Option<LeaderView> {
        let reported = self.leaders.get(group);
        let from_local = local.and_then(|p| {
            let l = p.leadership();
            match (l.role, l.leader) {
                (Role::Leader, _) if !p.holds_lease() => None,
                (Role::Leader, _) => Some(LeaderView {
                    leader: self.me,
                    term: l.term,
                    isr: p.isr(),
                }),
                (_, Some(leader)) => Some(LeaderView {
                    leader,
                    term: l.term,
                    isr: reported
                        .as_ref()
                        .filter(|r| r.leader == leader && r.term == l.term)
                        .map(|r| r.isr.clone())
                        .unwrap_or_default(),
                }),
                (_, None) => None,
            }
        });
        let from_report = reported.map(|r| LeaderView {
            leader: r.leader,
            term: r.term,
            isr: r.isr,
        });
        let best = match (from_local, from_report) {
            (Some(a), Some(b)) => Some(if b.term > a.term { b } else { a }),
            (a, b) => a.or(b),
        };
        best.filter(|l| self.is_alive(l.leader))
    }

    /// The node leading the controller (group 0).
    pub fn controller(&self, local: &Partition) -> Option<NodeId> {
        self.leadership(GroupId(0), Some(local)).map(|l| l.leader)
    }
}

fn member(id: i32, kafka: &str) -> Result<Member> {
    let (host, port) = kafka
        .rsplit_once(':')
        .and_then(|(h, p)| Some((h.to_string(), p.parse::<u16>().ok()?)))
        .ok_or_else(|| HelixError::Config(format!("node {id}: {kafka:?} is not HOST:PORT")))?;
    Ok(Member {
        id: NodeId(u64::try_from(id).map_err(|_| HelixError::Config("node id".into()))?),
        host: host
            .trim_start_matches('[')
            .trim_end_matches(']')
            .to_string(),
        port: i32::from(port),
    })
}
