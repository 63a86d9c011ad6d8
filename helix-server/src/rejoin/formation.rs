//! Telling a brand-new cluster from a node whose data directory was
//! replaced (ADR 0018). A node that starts without an identity file asks
//! every peer ([`StatusAnswer`]) whether it has formed (holds an identity
//! for this cluster) and whether it has ever received anything from the
//! asker ([`Witnesses`]): a node sends to peers only once it has formed, and
//! a peer records the sender durably before it acts on its first message,
//! so a node that took part before is known to every peer whose state may
//! depend on it. [`decide`] turns the answers into a start.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use helix_raft::NodeId;
use serde::{Deserialize, Serialize};

use crate::error::Result;

const WITNESSES_FILE: &str = "peers-seen";

/// A peer's answer to "where do you stand?" (a unary peer call).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct StatusAnswer {
    /// It holds an identity for this cluster: it may have taken part.
    pub formed: bool,
    /// It has received something from the asker: the asker took part.
    pub seen_you: bool,
    /// It started after a host restart that may have lost unsynced appends
    /// and some of its replicas are still learners for that reason.
    pub page_cache_lost: bool,
    /// It has compared its boot id with its last stop: until then
    /// `page_cache_lost` says nothing and the asker asks again. (Absent in
    /// answers from nodes older than the field: they always had checked.)
    #[serde(default = "checked_by_default")]
    pub boot_checked: bool,
    /// It formed a new cluster counting the asker among the majority that
    /// had not formed: the asker had not taken part then, and has sent
    /// nothing since (it has not formed), so it is as new as the cluster.
    /// Absent in answers from older nodes.
    #[serde(default)]
    pub formed_with_you: bool,
}

fn checked_by_default() -> bool {
    true
}

/// How a node without an identity file starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Start {
    /// A new cluster (or a node joining that never took part): vote.
    Fresh,
    /// The cluster existed and this node took part: its directory was
    /// replaced. Every group it hosts rejoins as a learner.
    Rejoin,
    /// Not enough answers yet: ask again, take part in nothing.
    Wait,
}

/// The start of a node of a cluster of `nodes` configured nodes (itself
/// included) without an identity file, given what each peer answered
/// (`None`: no answer yet).
///
/// - A peer that has seen this node means it took part: rejoin.
/// - A peer that formed the cluster counting this node among its
///   not-formed majority: a new cluster, this node one of its founders
///   (without this, the founder that decided second waited for every
///   other peer, for ever if one of them could not answer).
/// - A majority of the nodes (itself included) not formed: a new cluster
///   (or a majority lost at once, which no replicated system survives).
/// - Every peer answered and none has seen it: it never took part (a new
///   node, or one whose first start was cut short before it sent anything).
/// - Otherwise wait: a peer that has not answered may have seen it.
pub fn decide(nodes: usize, answers: &[Option<StatusAnswer>]) -> Start {
    if answers.iter().flatten().any(|a| a.formed && a.seen_you) {
        return Start::Rejoin;
    }
    if answers
        .iter()
        .flatten()
        .any(|a| a.formed && a.formed_with_you)
    {
        return Start::Fresh;
    }
    let not_formed = 1 + answers.iter().flatten().filter(|a| !a.formed).count();
    if not_formed > nodes / 2 || answers.iter().all(Option::is_some) {
        return Start::Fresh;
    }
    Start::Wait
}

/// Whether a majority of `voters` lost their page cache (this node's own
/// answer included in `lost`): then no replica holds for certain what was
/// acknowledged, and waiting for one would wait for ever.
pub fn majority_lost(voters: &[NodeId], lost: &BTreeSet<NodeId>) -> bool {
    voters.iter().filter(|v| lost.contains(v)).count() > voters.len() / 2
}

/// The peers this node has ever received anything from, kept durably in
/// `<data-dir>/peers-seen` (one node id a line). Recorded before the first
/// message of a peer is acted on: one small write and fsync per peer, ever.
#[derive(Debug)]
pub struct Witnesses {
    path: PathBuf,
    seen: Mutex<BTreeSet<u64>>,
    /// Bit `i` set once node `i` (below [`FAST_IDS`]) is recorded: every
    /// delivered payload asks, so the common answer takes no lock.
    recorded: AtomicU64,
}

/// Node ids that [`Witnesses`] answers without its lock.
const FAST_IDS: u64 = 64;

fn bit(node: u64) -> u64 {
    if node < FAST_IDS { 1 << node } else { 0 }
}

impl Witnesses {
    pub fn open(data_dir: &Path) -> Result<Witnesses> {
        let path = data_dir.join(WITNESSES_FILE);
        let seen = match std::fs::read_to_string(&path) {
            Ok(text) => text.lines().filter_map(|l| l.trim().parse().ok()).collect(),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => BTreeSet::new(),
            Err(e) => return Err(e.into()),
        };
        let recorded = seen.iter().fold(0, |bits, n| bits | bit(*n));
        Ok(Witnesses {
            path,
            seen: Mutex::new(seen),
            recorded: AtomicU64::new(recorded),
        })
    }

    pub fn has_seen(&self, node: NodeId) -> bool {
        self.seen.lock().is_ok_and(|s| s.contains(&node.0))
    }

    /// Records `node` durably if it is new. A failure to record is logged
    /// and retried at its next message: the message is still delivered
    /// (refusing it would stop the cluster over a full disk).
    pub fn record(&self, node: NodeId) {
        if self.recorded.load(Ordering::Acquire) & bit(node.0) != 0 {
            return;
        }
        let Ok(mut seen) = self.seen.lock() else {
            return;
        };
        if seen.contains(&node.0) {
            return;
        }
        let write = || -> std::io::Result<()> {
            use std::io::Write;
            let mut f = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(&self.path)?;
            f.write_all(format!("{}\n", node.0).as_bytes())?;
            f.sync_all()?;
            if let Some(dir) = self.path.parent() {
                std::fs::File::open(dir)?.sync_all()?;
            }
            Ok(())
        };
        match write() {
            Ok(()) => {
                seen.insert(node.0);
                self.recorded.fetch_or(bit(node.0), Ordering::Release);
            }
            Err(e) => tracing::warn!(
                node = node.0,
                file = %self.path.display(),
                error = %e,
                "cannot record that a peer took part"
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOT_FORMED: Option<StatusAnswer> = Some(StatusAnswer {
        formed: false,
        seen_you: false,
        page_cache_lost: false,
        boot_checked: true,
        formed_with_you: false,
    });
    const FORMED: Option<StatusAnswer> = Some(StatusAnswer {
        formed: true,
        seen_you: false,
        page_cache_lost: false,
        boot_checked: true,
        formed_with_you: false,
    });
    const SAW_ME: Option<StatusAnswer> = Some(StatusAnswer {
        formed: true,
        seen_you: true,
        page_cache_lost: false,
        boot_checked: true,
        formed_with_you: false,
    });

    #[test]
    fn a_single_node_is_its_own_majority() {
        assert_eq!(decide(1, &[]), Start::Fresh);
    }

    #[test]
    fn a_new_cluster_starts_once_a_majority_is_not_formed() {
        assert_eq!(decide(3, &[None, None]), Start::Wait);
        assert_eq!(decide(3, &[NOT_FORMED, None]), Start::Fresh);
        // A peer that formed first (and saw nothing of this node) does not
        // make this node a learner: the race of nodes starting together.
        assert_eq!(decide(3, &[FORMED, NOT_FORMED]), Start::Fresh);
        assert_eq!(decide(5, &[NOT_FORMED, FORMED, None, None]), Start::Wait);
        assert_eq!(
            decide(5, &[NOT_FORMED, NOT_FORMED, FORMED, None]),
            Start::Fresh
        );
    }

    #[test]
    fn a_founder_that_decides_second_starts_even_with_a_peer_down() {
        // Node 1 formed on node 2's "not formed"; node 2 asks again and
        // node 3 never answers: node 1's answer alone settles it.
        let formed_with_me = StatusAnswer {
            formed: true,
            seen_you: false,
            page_cache_lost: false,
            boot_checked: true,
            formed_with_you: true,
        };
        assert_eq!(decide(3, &[Some(formed_with_me), None]), Start::Fresh);
        assert_eq!(
            decide(5, &[Some(formed_with_me), None, None, None]),
            Start::Fresh
        );
        // Having been seen still wins: the node took part.
        let both = Some(StatusAnswer {
            seen_you: true,
            ..formed_with_me
        });
        assert_eq!(decide(3, &[both, None]), Start::Rejoin);
    }

    #[test]
    fn a_node_a_peer_has_seen_rejoins_even_with_others_down() {
        assert_eq!(decide(3, &[SAW_ME, None]), Start::Rejoin);
        assert_eq!(decide(5, &[None, None, None, SAW_ME]), Start::Rejoin);
        assert_eq!(decide(3, &[SAW_ME, NOT_FORMED]), Start::Rejoin);
    }

    #[test]
    fn a_node_nobody_has_seen_waits_until_every_peer_answers() {
        // A peer that is down may be the one that saw it.
        assert_eq!(decide(3, &[FORMED, None]), Start::Wait);
        assert_eq!(decide(3, &[FORMED, FORMED]), Start::Fresh);
    }

    #[test]
    fn a_group_resumes_voting_only_when_a_majority_of_it_lost_its_page_cache() {
        let voters = [NodeId(1), NodeId(2), NodeId(3)];
        let lost = |ids: &[u64]| ids.iter().map(|&i| NodeId(i)).collect::<BTreeSet<_>>();
        assert!(!majority_lost(&voters, &lost(&[1])));
        assert!(!majority_lost(&voters, &lost(&[1, 4, 5])));
        assert!(majority_lost(&voters, &lost(&[1, 3])));
    }

    #[test]
    fn witnesses_are_remembered_across_restarts() {
        let dir = tempfile::tempdir().expect("tempdir");
        let w = Witnesses::open(dir.path()).expect("open");
        assert!(!w.has_seen(NodeId(2)));
        w.record(NodeId(2));
        w.record(NodeId(2));
        w.record(NodeId(3));
        // Past the lock-free bits: the set alone.
        w.record(NodeId(100));
        w.record(NodeId(100));
        let again = Witnesses::open(dir.path()).expect("open");
        assert!(again.has_seen(NodeId(2)) && again.has_seen(NodeId(3)));
        assert!(again.has_seen(NodeId(100)));
        assert!(!again.has_seen(NodeId(1)));
        again.record(NodeId(3));
        assert_eq!(
            std::fs::read_to_string(dir.path().join(WITNESSES_FILE)).expect("read"),
            "2\n3\n100\n"
        );
    }
}
