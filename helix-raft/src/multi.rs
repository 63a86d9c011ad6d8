//! MultiRaft: many groups of one node driven together.
//!
//! One `tick` drives every group; `ready` collects each group's work and
//! batches all outgoing messages per destination node (so all heartbeats
//! between two nodes in one tick travel as one `MessageBatch`, a few bytes
//! per group once encoded). Groups are independent `Send` values: a host
//! that shards groups across worker threads runs one `MultiRaft` per worker,
//! with no lock shared between them.

use std::collections::BTreeMap;

use bytes::Bytes;

use crate::codec::MessageBatch;
use crate::config::{RaftConfig, Restored};
use crate::error::{ProposeError, RaftError};
use crate::group::RaftGroup;
use crate::message::Message;
use crate::ready::Ready;
use crate::types::{GroupId, LogIndex, NodeId};

/// The groups of one node (or of one worker of a node).
#[derive(Debug)]
pub struct MultiRaft {
    node: NodeId,
    groups: BTreeMap<GroupId, RaftGroup>,
}

/// What `MultiRaft::ready` hands the host: each group's `Ready` (with its
/// `messages` moved into `batches`) and one batch per destination node.
#[derive(Debug, Default)]
pub struct MultiReady {
    pub groups: Vec<(GroupId, Ready)>,
    pub batches: Vec<MessageBatch>,
    /// Catch-up appends (WAL entries), one batch per destination node, for
    /// the catch-up channel.
    pub catch_up_batches: Vec<MessageBatch>,
}

/// Outcome of delivering a batch: messages taken, and messages for groups
/// this node does not host (dropped; the group may be gone or not yet made).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Delivery {
    pub delivered: usize,
    pub unknown_group: usize,
    pub rejected: usize,
}

impl MultiRaft {
    #[must_use]
    pub fn new(node: NodeId) -> Self {
        MultiRaft {
            node,
            groups: BTreeMap::new(),
        }
    }

    #[must_use]
    pub fn node(&self) -> NodeId {
        self.node
    }

    pub fn add_group(
        &mut self,
        group: GroupId,
        cfg: RaftConfig,
        restored: Restored,
    ) -> Result<(), RaftError> {
        if cfg.node != self.node {
            return Err(RaftError::WrongNode {
                expected: self.node,
                got: cfg.node,
            });
        }
        if self.groups.contains_key(&group) {
            return Err(RaftError::DuplicateGroup(group));
        }
        self.groups
            .insert(group, RaftGroup::new(group, cfg, restored)?);
        Ok(())
    }

    /// Takes a group out (to move it to another worker, or to delete it).
    pub fn remove_group(&mut self, group: GroupId) -> Option<RaftGroup> {
        self.groups.remove(&group)
    }

    /// Puts a group (e.g. moved from another worker) under this driver.
    pub fn insert_group(&mut self, g: RaftGroup) -> Result<(), RaftError> {
        if g.node() != self.node {
            return Err(RaftError::WrongNode {
                expected: self.node,
                got: g.node(),
            });
        }
        if self.groups.contains_key(&g.group()) {
            return Err(RaftError::DuplicateGroup(g.group()));
        }
        self.groups.insert(g.group(), g);
        Ok(())
    }

    #[must_use]
    pub fn group(&self, group: GroupId) -> Option<&RaftGroup> {
        self.groups.get(&group)
    }

    pub fn group_mut(&mut self, group: GroupId) -> Option<&mut RaftGroup> {
        self.groups.get_mut(&group)
    }

    pub fn groups(&self) -> impl Iterator<Item = &RaftGroup> {
        self.groups.values()
    }

    #[must_use]
    pub fn len(&self) -> usize {
        self.groups.len()
    }

    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.groups.is_empty()
    }

    /// One tick for every group.
    pub fn tick(&mut self) {
        for g in self.groups.values_mut() {
            g.tick();
        }
    }

    /// The host's connection to `node` broke: every group following it
    /// campaigns soon, and a group led here whose lease rested on `node`'s
    /// answers loses it ([`RaftGroup::peer_lost`]). Returns the groups
    /// that acted.
    pub fn peer_lost(&mut self, node: NodeId) -> Vec<GroupId> {
        self.groups
            .iter_mut()
            .filter_map(|(id, g)| g.peer_lost(node).then_some(*id))
            .collect()
    }

    pub fn propose(&mut self, group: GroupId, data: Bytes) -> Result<LogIndex, ProposeError> {
        match self.groups.get_mut(&group) {
            Some(g) => g.propose(data),
            None => Err(ProposeError::NotLeader { leader: None }),
        }
    }

    pub fn durable_to(&mut self, group: GroupId, index: LogIndex) -> Result<(), RaftError> {
        self.groups
            .get_mut(&group)
            .ok_or(RaftError::UnknownGroup(group))?
            .durable_to(index)
    }

    /// Delivers every message of a batch addressed to this node.
    pub fn step_batch(&mut self, batch: MessageBatch) -> Result<Delivery, RaftError> {
        if batch.to != self.node {
            return Err(RaftError::WrongNode {
                expected: self.node,
                got: batch.to,
            });
        }
        let mut d = Delivery::default();
        for m in batch.messages {
            match self.groups.get_mut(&m.group) {
                Some(g) => match g.step(m) {
                    Ok(()) => d.delivered += 1,
                    Err(_) => d.rejected += 1,
                },
                None => d.unknown_group += 1,
            }
        }
        Ok(d)
    }

    #[must_use]
    pub fn has_ready(&self) -> bool {
        self.groups.values().any(RaftGroup::has_ready)
    }

    /// Collects the work of every group that has some.
    pub fn ready(&mut self) -> MultiReady {
        let mut out = MultiReady::default();
        let mut per_node: BTreeMap<NodeId, Vec<Message>> = BTreeMap::new();
        let mut catch_up: BTreeMap<NodeId, Vec<Message>> = BTreeMap::new();
        for (id, g) in &mut self.groups {
            if !g.has_ready() {
                continue;
            }
            let mut rd = g.ready();
            for m in rd.messages.drain(..) {
                per_node.entry(m.to).or_default().push(m);
            }
            for m in rd.catch_up_messages.drain(..) {
                catch_up.entry(m.to).or_default().push(m);
            }
            if !rd.is_empty() {
                out.groups.push((*id, rd));
            }
        }
        out.batches = self.batches_by_node(per_node);
        out.catch_up_batches = self.batches_by_node(catch_up);
        out
    }

    fn batches_by_node(&self, per_node: BTreeMap<NodeId, Vec<Message>>) -> Vec<MessageBatch> {
        per_node
            .into_iter()
            .map(|(to, messages)| MessageBatch {
                from: self.node,
                to,
                messages,
            })
            .collect()
    }
}
