//! A replica that may have lost what it reported durable does not vote
//! (ADR 0018). Two ways to lose it, both found before any group starts:
//!
//! - the data directory is new while the cluster already existed (a
//!   replaced disk, a wiped directory): [`formation`] tells that from a
//!   brand-new cluster by asking the peers; the node then rejoins every
//!   group it hosts as a learner (ADR 0016's path) until its controller log
//!   is restored and applied;
//! - the host restarted while the node's logs held appends reported
//!   durable but never synced (replication-only mode, [`boot`]): every
//!   replica of the node that holds a log rejoins as a learner, keeping its
//!   log (its prefix is valid, only an unsynced tail may be missing).
//!
//! [`Standing`] holds the outcome; `replica::recover` asks it whether a
//! replica starts as a learner, and peers ask it where this node stands.

pub mod boot;
pub mod formation;
pub mod identity;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use helix_raft::NodeId;
use helix_wal::Durability;

use crate::cluster::peers::{BoxFuture, CallService, PeerLink, PeerWitness};
use crate::config::Config;
use crate::error::Result;
use crate::replica::learner::LearnerAtOpen;
use crate::replica::raft::HardStateFile;
use formation::{Start, StatusAnswer, Witnesses};
use identity::{Membership, NodeIdentity};

/// Kind byte of a status call ("where do you stand?"), answered by
/// [`Standing::answer`].
pub const CALL_STATUS: u8 = 2;
/// How long one status call may take.
const ASK_TIMEOUT: Duration = Duration::from_millis(1000);
/// Pause between rounds of status calls.
const ASK_PAUSE: Duration = Duration::from_millis(200);
/// Log "still waiting" once per this many rounds.
const WAIT_LOG_ROUNDS: u32 = 25;
/// How long a node that lost its page cache waits for every peer to say
/// whether it lost its page cache too, before deciding with the answers it
/// has (a peer that did not answer is taken as intact: the safe side).
const PAGE_CACHE_ASK_WINDOW: Duration = Duration::from_secs(10);
/// How often a rejoining node checks whether its controller replica has
/// been restored and applied.
const REJOIN_CHECK: Duration = Duration::from_millis(200);

/// Where this node stands: decided at start, read by every replica open
/// and by peers' status calls (which arrive while it is still deciding).
#[derive(Debug)]
pub struct Standing {
    data_dir: PathBuf,
    /// The identity file is stored: this node may have taken part.
    formed: AtomicBool,
    /// Replicas opened with no stored state start as learners.
    rejoining: AtomicBool,
    /// This node found at start that its host restarted with unsynced
    /// appends reported (set before it asks its peers, so that nodes that
    /// all lost theirs in one power loss see each other).
    lost_own_page_cache: AtomicBool,
    /// The boot id has been compared with the last stop's: until then a
    /// peer must not take "no loss" from this node's answer.
    boot_checked: AtomicBool,
    /// Every replica the node held at start is open.
    opened: AtomicBool,
    /// Replica directories that started as learners for a lost page cache,
    /// to tell peers whether this node still counts as one that lost it.
    page_cache_learners: Mutex<Vec<PathBuf>>,
    witnesses: Witnesses,
    identity: Mutex<Option<NodeIdentity>>,
    /// The peers whose "not formed" answers this node counted when it
    /// formed a new cluster (this process only: after a restart a founder
    /// still deciding waits for every peer, as before).
    formed_with: Mutex<BTreeSet<NodeId>>,
}

impl Standing {
    /// A node still deciding: answers "not formed" until
    /// [`establish`] settles it, and opens nothing meanwhile.
    pub fn pending(data_dir: &Path) -> Result<Arc<Standing>> {
        Ok(Arc::new(Standing {
            data_dir: data_dir.to_path_buf(),
            formed: AtomicBool::new(false),
            rejoining: AtomicBool::new(false),
            lost_own_page_cache: AtomicBool::new(false),
            boot_checked: AtomicBool::new(false),
            opened: AtomicBool::new(false),
            page_cache_learners: Mutex::new(Vec::new()),
            witnesses: Witnesses::open(data_dir)?,
            identity: Mutex::new(None),
            formed_with: Mutex::new(BTreeSet::new()),
        }))
    }

    /// The answer to a peer's status call.
    pub fn answer(&self, from: NodeId) -> StatusAnswer {
        let formed = self.formed.load(Ordering::Acquire);
        // Until its replicas have opened, and while any of them is a learner
        // for it: a loss long repaired must not make a later one look like
        // a power loss of the whole group.
        let page_cache_lost = self.lost_own_page_cache.load(Ordering::Acquire)
            && (!self.opened.load(Ordering::Acquire) || {
                let dirs = self
                    .page_cache_learners
                    .lock()
                    .map(|d| d.clone())
                    .unwrap_or_default();
                dirs.iter()
                    .any(|d| HardStateFile::new(d).load().is_ok_and(|hs| hs.learner))
            });
        StatusAnswer {
            formed,
            seen_you: self.witnesses.has_seen(from),
            page_cache_lost,
            boot_checked: self.boot_checked.load(Ordering::Acquire),
            formed_with_you: formed
                && self
                    .formed_with
                    .lock()
                    .is_ok_and(|peers| peers.contains(&from)),
        }
    }

    /// Something arrived from `from`: it has formed and takes part.
    pub fn heard_from(&self, from: NodeId) {
        self.witnesses.record(from);
    }

    /// Every replica the node held at start has been opened.
    pub fn set_opened(&self) {
        self.opened.store(true, Ordering::Release);
    }

    pub fn rejoining(&self) -> bool {
        self.rejoining.load(Ordering::Acquire)
    }

    /// The controller's replica (in `controller_dir`) votes again and the
    /// controller has applied its log up to where it was when it did
    /// (`applied`, `log_end`: offsets now): every topic that existed when
    /// this node lost its directory has been opened, as a learner where it
    /// held a replica. Replicas opened from here on are new: the node is a
    /// member again, durably.
    pub fn finish_rejoin_when(
        &self,
        controller_dir: &Path,
        applied: i64,
        log_end: i64,
        target: &mut Option<i64>,
    ) -> Result<bool> {
        if !self.rejoining() {
            return Ok(true);
        }
        if target.is_none() {
            if HardStateFile::new(controller_dir).load()?.learner {
                return Ok(false);
            }
            *target = Some(log_end);
        }
        // The log may have been cut back past the target (an entry that
        // was never acknowledged): wait only for what is still there.
        let goal = target.map_or(log_end, |t| t.min(log_end));
        if applied < goal {
            return Ok(false);
        }
        let Ok(mut identity) = self.identity.lock() else {
            return Ok(false);
        };
        if let Some(id) = identity.as_mut() {
            id.membership = Membership::Member;
            id.store(&self.data_dir)?;
        }
        self.rejoining.store(false, Ordering::Release);
        tracing::info!(
            applied,
            "rejoin complete: the controller's log is restored and applied; new replicas of this node vote at once"
        );
        Ok(true)
    }

    fn settle(&self, identity: NodeIdentity) {
        self.rejoining.store(
            identity.membership == Membership::Rejoining,
            Ordering::Release,
        );
        if let Ok(mut slot) = self.identity.lock() {
            *slot = Some(identity);
        }
        self.formed.store(true, Ordering::Release);
    }
}

/// Every replica opened on this node asks the standing whether it starts
/// as a learner.
impl LearnerAtOpen for Standing {
    /// Whether a replica being opened starts as a learner, and why: only in
    /// a group with other replicas (the only replica has no one to learn
    /// from), and only if it may have lost something: it has no stored
    /// state while the node rejoins, or its directory carries the mark of a
    /// lost page cache (`page_cache_mark`: the nodes known to have lost
    /// theirs, see [`boot::mark_replicas`]) on a replication-only log,
    /// unless a majority of its group lost theirs too: then nobody holds
    /// more, and the group elects among what is left, the loss
    /// replication-only mode documents.
    fn learner_at_open(
        &self,
        dir: &Path,
        has_state: bool,
        page_cache_mark: Option<&[u64]>,
        durability: Durability,
        voters: &[NodeId],
    ) -> Option<&'static str> {
        if voters.len() < 2 {
            return None;
        }
        if !has_state && self.rejoining() {
            return Some("the node rejoins on a new data directory");
        }
        if let Some(lost) = page_cache_mark
            && durability == Durability::ReplicationOnly
        {
            let lost: BTreeSet<NodeId> = lost.iter().map(|&n| NodeId(n)).collect();
            if formation::majority_lost(voters, &lost) {
                return None;
            }
            if let Ok(mut dirs) = self.page_cache_learners.lock() {
                dirs.push(dir.to_path_buf());
            }
            return Some("the host restarted with appends only in the page cache");
        }
        None
    }
}

/// Peers' status calls ([`CALL_STATUS`]) are answered from the standing,
/// as it is when the call arrives (also while the node is still deciding).
impl CallService for Standing {
    fn serve(&self, from: NodeId, _body: Bytes) -> BoxFuture<std::result::Result<Bytes, String>> {
        let status = self.answer(from);
        Box::pin(async move {
            serde_json::to_vec(&status)
                .map(Bytes::from)
                .map_err(|e| format!("cannot encode the status: {e}"))
        })
    }
}

/// A node sends only once it has formed: every peer heard from takes part,
/// and if it ever comes back on a new directory, this node says so.
impl PeerWitness for Standing {
    fn heard_from(&self, from: NodeId) {
        Standing::heard_from(self, from);
    }
}

/// Encodes a status call.
pub fn status_request() -> Bytes {
    Bytes::from_static(&[CALL_STATUS])
}

/// Decides where this node stands before any of its groups starts: reads
/// the identity file and the last stop, asks the peers through `link` when
/// it must (`link` is `None` for a single node and for in-process test
/// clusters, which always start fresh), and stores the identity and the
/// boot id. While it asks, the node answers its peers' calls (`standing`
/// is shared with the inbound side) and takes part in nothing.
pub async fn establish(
    config: &Config,
    cluster_id: &str,
    me: NodeId,
    peers: &[NodeId],
    link: Option<&dyn PeerLink>,
    standing: &Standing,
) -> Result<()> {
    let data_dir = &config.data_dir;
    let stored = NodeIdentity::load(data_dir, cluster_id, config.node_id)?;
    // A directory with a controller vote but no identity file predates the
    // file: it is this node's own state.
    let predates = data_dir.join("controller").join("raft-hard-state").exists();
    if stored.is_some() || predates {
        standing.formed.store(true, Ordering::Release);
    }
    let last = boot::LastStop::read(data_dir);
    let now = boot::current_boot_id();
    let lost = boot::page_cache_lost(config.write_durability, &last, now.as_deref());
    if lost {
        standing.lost_own_page_cache.store(true, Ordering::Release);
    }
    // Peers that ask from here on learn the truth (set after the loss, so
    // that no answer says "checked" without it).
    standing.boot_checked.store(true, Ordering::Release);
    let membership = match &stored {
        Some(id) => id.membership,
        None if predates => Membership::Member,
        None => match link {
            None => Membership::Member,
            Some(link) => ask_formation(link, me, peers, standing).await,
        },
    };
    if lost {
        tracing::warn!(
            recorded_boot_id = last.boot_id.as_deref().unwrap_or(""),
            boot_id = now.as_deref().unwrap_or(""),
            "the host restarted since this node last synced its logs (replication-only mode, no clean stop): appends it reported durable may be gone; every replica that holds a log rejoins its group as a learner, keeping its log"
        );
        let mut set = BTreeSet::from([me]);
        if let Some(link) = link {
            set.extend(ask_page_cache(link, peers).await);
        }
        let set: Vec<u64> = set.iter().map(|n| n.0).collect();
        // Durable before the new boot id is: a crash in between leaves the
        // marks, and the next start still opens these replicas as learners.
        let marked = boot::mark_replicas(data_dir, &set)?;
        tracing::info!(
            lost = ?set,
            replicas = marked,
            "nodes known to have lost their page cache: a group where they are a majority elects among what is left"
        );
    }
    let identity = match stored {
        Some(id) => id,
        None => {
            let id = NodeIdentity {
                cluster_id: cluster_id.to_string(),
                node_id: config.node_id,
                incarnation: crate::ids::random_uuid().simple().to_string(),
                membership,
            };
            id.store(data_dir)?;
            id
        }
    };
    if identity.membership == Membership::Rejoining {
        tracing::warn!(
            incarnation = %identity.incarnation,
            "this node took part in the cluster before and its data directory is new: it rejoins every group it hosts as a learner (no vote, no candidacy) until the leaders have restored it"
        );
    }
    boot::record_start(data_dir, now.as_deref())?;
    standing.settle(identity);
    Ok(())
}

/// One round of status calls, every peer at once (each bounded by
/// [`ASK_TIMEOUT`]); `None` where a peer did not answer.
async fn ask_all(link: &dyn PeerLink, peers: &[NodeId]) -> Vec<Option<StatusAnswer>> {
    let calls: Vec<_> = peers
        .iter()
        .map(|&p| tokio::spawn(link.call(p, status_request(), ASK_TIMEOUT)))
        .collect();
    let mut answers = Vec::with_capacity(calls.len());
    for call in calls {
        let bytes = call.await.ok().and_then(|r| r.ok());
        answers.push(bytes.and_then(|b| serde_json::from_slice::<StatusAnswer>(&b).ok()));
    }
    answers
}

/// Asks until [`formation::decide`] can tell; `Member` for a fresh start.
async fn ask_formation(
    link: &dyn PeerLink,
    me: NodeId,
    peers: &[NodeId],
    standing: &Standing,
) -> Membership {
    let nodes = peers.len() + 1;
    let mut rounds = 0u32;
    loop {
        let answers = ask_all(link, peers).await;
        match formation::decide(nodes, &answers) {
            Start::Fresh => {
                // Before this node says it formed: the peers that had not
                // formed are its co-founders (see `StatusAnswer`).
                if let Ok(mut with) = standing.formed_with.lock() {
                    with.extend(
                        peers
                            .iter()
                            .zip(&answers)
                            .filter(|(_, a)| a.is_some_and(|a| !a.formed))
                            .map(|(p, _)| *p),
                    );
                }
                tracing::info!(
                    node = me.0,
                    "no identity file and no peer has seen this node take part: it starts as a new member"
                );
                return Membership::Member;
            }
            Start::Rejoin => return Membership::Rejoining,
            Start::Wait => {}
        }
        if rounds.is_multiple_of(WAIT_LOG_ROUNDS) {
            tracing::info!(
                answered = answers.iter().flatten().count(),
                peers = peers.len(),
                "no identity file: waiting for peers to tell whether this cluster is new or this node's directory was replaced; it takes part in nothing meanwhile"
            );
        }
        rounds = rounds.saturating_add(1);
        tokio::time::sleep(ASK_PAUSE).await;
    }
}

/// The peers that say they lost their page cache too, asked until every
/// peer answered or [`PAGE_CACHE_ASK_WINDOW`] passed.
async fn ask_page_cache(link: &dyn PeerLink, peers: &[NodeId]) -> BTreeSet<NodeId> {
    let deadline = tokio::time::Instant::now() + PAGE_CACHE_ASK_WINDOW;
    let mut known: Vec<Option<StatusAnswer>> = vec![None; peers.len()];
    while known.iter().any(Option::is_none) && tokio::time::Instant::now() < deadline {
        for (slot, answer) in known.iter_mut().zip(ask_all(link, peers).await) {
            // A peer that has not yet checked its own boot id may still
            // find it lost its page cache: ask it again.
            if slot.is_none() && answer.is_some_and(|a| a.boot_checked) {
                *slot = answer;
            }
        }
        if known.iter().any(Option::is_none) {
            tokio::time::sleep(ASK_PAUSE).await;
        }
    }
    peers
        .iter()
        .zip(known)
        .filter(|(_, a)| a.is_some_and(|a| a.page_cache_lost))
        .map(|(p, _)| *p)
        .collect()
}

/// Runs while the node rejoins: ends the rejoin once the controller's
/// replica votes again and its log is applied ([`Standing::finish_rejoin_when`]).
pub async fn finish_rejoin(
    standing: Arc<Standing>,
    controller: Arc<crate::controller::service::Controller>,
    controller_dir: PathBuf,
) {
    let mut target = None;
    loop {
        let applied = controller.view().next_offset;
        let log_end = controller.partition().log_end_offset().0;
        match standing.finish_rejoin_when(&controller_dir, applied, log_end, &mut target) {
            Ok(true) => return,
            Ok(false) => {}
            Err(e) => {
                tracing::warn!(error = %e, "checking whether the rejoin is complete failed; retrying")
            }
        }
        tokio::time::sleep(REJOIN_CHECK).await;
    }
}

#[cfg(test)]
mod tests;
