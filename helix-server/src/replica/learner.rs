//! A replica whose log is damaged inside data it had flushed, in a group
//! with other replicas, rejoins as a learner (ADR 0016): the damaged log is
//! set aside whole and the replica starts empty, neither voting nor
//! campaigning until the leader has restored it (helix-raft's
//! `HardState::learner`). The only replica of a group is refused instead:
//! there is no other copy (ADR 0001).

use std::path::Path;

use helix_raft::{HardState, NodeId};
use helix_wal::{Durability, PartitionLog};

use super::raft::HardStateFile;
use super::{PartitionSettings, scan};
use crate::error::{HelixError, Result};

/// Written into the replica's directory when a read finds damage in a
/// group with other replicas: the next open sets the log aside.
const MARK: &str = "damaged";

/// Written into every replica directory when a lost page cache is found
/// (`rejoin::boot::mark_replicas`), before the new boot id is recorded; the
/// replica's next open decides and removes it. So a crash between the two
/// never leaves a replica voting with a log it may have lost: its mark is
/// still there.
pub const PAGE_CACHE_MARK: &str = "page-cache-lost";

/// Whether a replica being opened starts as a learner because its node may
/// have lost what it reported durable (ADR 0018). The node's standing
/// (`rejoin::Standing`) decides; the replica only asks, at open.
pub trait LearnerAtOpen: std::fmt::Debug + Send + Sync {
    /// Some(reason) if the replica in `dir` starts as a learner.
    /// `has_state`: it has a stored vote; `page_cache_mark`: the nodes its
    /// [`PAGE_CACHE_MARK`] names.
    fn learner_at_open(
        &self,
        dir: &Path,
        has_state: bool,
        page_cache_mark: Option<&[u64]>,
        durability: Durability,
        voters: &[NodeId],
    ) -> Option<&'static str>;
}

/// The mark in a replica directory: the nodes that had lost their page
/// cache when it was written (`None`: no mark).
pub fn replica_mark(dir: &Path) -> Option<Vec<u64>> {
    let text = std::fs::read_to_string(dir.join(PAGE_CACHE_MARK)).ok()?;
    Some(
        text.split_whitespace()
            .filter_map(|w| w.parse().ok())
            .collect(),
    )
}

/// Removes the mark once the replica's vote says what was decided.
pub fn clear_replica_mark(dir: &Path) -> Result<()> {
    match std::fs::remove_file(dir.join(PAGE_CACHE_MARK)) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e.into()),
        _ => {}
    }
    std::fs::File::open(dir)?.sync_all()?;
    Ok(())
}

/// A replica whose log was found damaged inside flushed data, in a group
/// with other replicas: its vote record says `learner` before anything else
/// happens (a crash before it is restored leaves it a learner), its log is
/// set aside whole (kept for the operator, `wal.damaged-<unix ms>`), and it
/// reopens an empty WAL (ADR 0016). The only replica of a group is refused
/// instead: there is no other copy.
pub(super) fn rejoin(
    dir: &Path,
    topic: &str,
    index: i32,
    settings: &PartitionSettings,
    damage: helix_wal::WalError,
    vote: &HardStateFile,
    hard_state: &mut HardState,
) -> Result<(PartitionLog, helix_wal::Recovery)> {
    if settings.spec.voters.len() == 1 {
        return Err(HelixError::Wal(damage));
    }
    // The vote record says "learner" first: a crash at any later step
    // leaves a learner (the next open finds the damage or the mark again,
    // or an empty log), never a voter with a log it lost.
    hard_state.learner = true;
    vote.store(*hard_state)?;
    let wal_dir = dir.join("wal");
    let aside = dir.join(format!("wal.damaged-{}", crate::clock::now_ms()));
    if wal_dir.exists() {
        std::fs::rename(&wal_dir, &aside)?;
    }
    // Derived from the log set aside.
    scan::Snapshot::remove(dir);
    match std::fs::remove_file(dir.join(MARK)) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e.into()),
        _ => {}
    }
    std::fs::File::open(dir)?.sync_all()?;
    crate::metrics::Metrics::count(&crate::metrics::metrics().counters.damaged_replicas, 1);
    let (file, position, reason) = match &damage {
        helix_wal::WalError::Corrupt {
            file,
            position,
            reason,
        } => (file.display().to_string(), *position, reason.clone()),
        other => (String::new(), 0, other.to_string()),
    };
    tracing::error!(
        topic,
        index,
        group = settings.spec.group.0,
        file,
        position,
        reason,
        set_aside = %aside.display(),
        "damaged data in this replica's log: the log is set aside and the replica rejoins empty as a learner; it votes again once the leader has restored it"
    );
    Ok(PartitionLog::open(&wal_dir, settings.log.clone())?)
}

/// Records that a read found `damage` (the replica stood down): the next
/// open of `dir` sets its log aside. Written once, durably.
pub(super) fn mark(dir: &Path, damage: &str) -> Result<()> {
    let path = dir.join(MARK);
    if !path.exists() {
        std::fs::write(&path, damage)?;
        std::fs::File::open(&path)?.sync_all()?;
        std::fs::File::open(dir)?.sync_all()?;
    }
    Ok(())
}

/// The damage a read recorded in `dir`, if any.
pub(super) fn marked(dir: &Path) -> Option<helix_wal::WalError> {
    let reason = std::fs::read_to_string(dir.join(MARK)).ok()?;
    Some(helix_wal::WalError::Corrupt {
        file: dir.join("wal"),
        position: 0,
        reason: format!("found on read before the last stop: {}", reason.trim()),
    })
}
