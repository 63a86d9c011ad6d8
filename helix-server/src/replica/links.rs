//! Which peers' connections broke and have not been heard from since: the
//! transport keeps this table (it marks a peer lost the moment a
//! connection breaks, and heard when anything arrives from it), and a
//! leader's lease counts from then, not from when its shard gets to the
//! news (ADR 0019 item 2).
//! Without it, a leader whose shard was busy went on naming itself for
//! tens of milliseconds after a cut the followers had already acted on:
//! they campaign as soon as the connection breaks (ADR 0017).

use std::collections::HashSet;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

use helix_raft::NodeId;

/// The node's view of its peer connections (one per node, shared by every
/// replica it hosts).
#[derive(Debug)]
pub struct PeerLinks {
    me: NodeId,
    /// `lost.len()`, read without the lock: 0 is the common case.
    lost_count: AtomicUsize,
    lost: Mutex<HashSet<NodeId>>,
}

impl PeerLinks {
    pub fn new(me: NodeId) -> PeerLinks {
        PeerLinks {
            me,
            lost_count: AtomicUsize::new(0),
            lost: Mutex::new(HashSet::new()),
        }
    }

    /// A connection to or from `node` broke; true when it was not already
    /// lost (so the loss is reported once, until `node` is heard again).
    pub fn lost(&self, node: NodeId) -> bool {
        let mut lost = self.lost.lock().unwrap_or_else(|p| p.into_inner());
        let new = lost.insert(node);
        if new {
            self.lost_count.store(lost.len(), Ordering::Release);
        }
        new
    }

    /// Something arrived from `node`.
    pub fn heard(&self, node: NodeId) {
        if self.lost_count.load(Ordering::Acquire) == 0 {
            return;
        }
        let mut lost = self.lost.lock().unwrap_or_else(|p| p.into_inner());
        if lost.remove(&node) {
            self.lost_count.store(lost.len(), Ordering::Release);
        }
    }

    /// Whether `node` is lost: a connection broke and nothing has arrived
    /// from it since.
    pub fn is_lost(&self, node: NodeId) -> bool {
        self.lost_count.load(Ordering::Acquire) != 0
            && self
                .lost
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .contains(&node)
    }

    /// Whether enough of `voters` (this node's group, this node among
    /// them) are still connected for a majority to answer it.
    pub fn reach_majority(&self, voters: &[NodeId]) -> bool {
        if self.lost_count.load(Ordering::Acquire) == 0 {
            return true;
        }
        let lost = self.lost.lock().unwrap_or_else(|p| p.into_inner());
        let reachable = voters
            .iter()
            .filter(|v| **v == self.me || !lost.contains(v))
            .count();
        reachable > voters.len() / 2
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_majority_is_reachable_until_too_many_peers_are_lost() {
        let links = PeerLinks::new(NodeId(1));
        let three = [NodeId(1), NodeId(2), NodeId(3)];
        assert!(links.reach_majority(&three));
        links.lost(NodeId(2));
        assert!(links.reach_majority(&three), "1 and 3 are a majority");
        links.lost(NodeId(3));
        assert!(!links.reach_majority(&three));
        assert!(links.is_lost(NodeId(3)) && !links.is_lost(NodeId(1)));
        assert!(
            links.reach_majority(&[NodeId(1)]),
            "a one-voter group is its own majority"
        );
        links.heard(NodeId(3));
        assert!(links.reach_majority(&three));
        assert!(!links.is_lost(NodeId(3)), "heard again");
        // A group without the lost peer is not affected.
        links.lost(NodeId(3));
        assert!(links.reach_majority(&[NodeId(1), NodeId(4), NodeId(5)]));
    }
}
