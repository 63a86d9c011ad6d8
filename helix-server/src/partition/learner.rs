//! A replica whose log is damaged inside data it had flushed, in a group
//! with other replicas, rejoins as a learner (ADR 0016): the damaged log is
//! set aside whole and the replica starts empty, neither voting nor
//! campaigning until the leader has restored it (helix-raft's
//! `HardState::learner`). The only replica of a group is refused instead:
//! there is no other copy (ADR 0001).

use std::path::{Path, PathBuf};

use helix_raft::HardState;
use helix_wal::PartitionLog;

use super::raft::HardStateFile;
use super::{PartitionSettings, scan};
use crate::error::{HelixError, Result};

/// A replica whose log was found damaged inside flushed data, in a group
/// with other replicas: its log is set aside whole (kept for the operator,
/// `wal.damaged-<unix ms>`) and it rejoins empty as a learner, neither
/// voting nor campaigning until the leader has restored it (ADR 0016).
/// The only replica of a group is refused instead: there is no other copy.
pub(super) struct Learner {
    wal_dir: PathBuf,
}

impl Learner {
    pub(super) fn set_aside(
        dir: &Path,
        topic: &str,
        index: i32,
        settings: &PartitionSettings,
        damage: helix_wal::WalError,
    ) -> Result<Learner> {
        if settings.spec.voters.len() == 1 {
            return Err(HelixError::Wal(damage));
        }
        let wal_dir = dir.join("wal");
        let aside = dir.join(format!("wal.damaged-{}", crate::topics::now_ms()));
        std::fs::rename(&wal_dir, &aside)?;
        std::fs::File::open(dir)?.sync_all()?;
        // Derived from the log set aside.
        scan::Snapshot::remove(dir);
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
        Ok(Learner { wal_dir })
    }

    /// The vote record says "learner" before anything else happens, so a
    /// crash before the replica is restored leaves it a learner.
    pub(super) fn persist(&self, file: &HardStateFile, hard_state: HardState) -> Result<HardState> {
        let hs = HardState {
            learner: true,
            ..hard_state
        };
        file.store(hs)?;
        Ok(hs)
    }

    pub(super) fn reopen(
        self,
        settings: &PartitionSettings,
    ) -> Result<(PartitionLog, helix_wal::Recovery)> {
        Ok(PartitionLog::open(&self.wal_dir, settings.log.clone())?)
    }
}
