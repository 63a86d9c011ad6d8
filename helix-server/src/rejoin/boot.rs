//! Did the host restart while this node's logs held appends that were
//! reported durable but only written to the page cache (ADR 0018)? In
//! replication-only mode a replica reports an append durable once it is in
//! its WAL's page cache; a power loss or a reboot can take the unsynced
//! tail away. The node records the host's boot id (`<data-dir>/boot-id`)
//! at each start and a `clean-shutdown` mark once a graceful stop has
//! synced every log; a start that finds another boot id and no mark may
//! have lost acknowledged appends.
//!
//! The boot id is read from `/proc/sys/kernel/random/boot_id`, or from the
//! file named by `HELIX_BOOT_ID_FILE` (tests simulate a reboot by changing
//! that file while the node is stopped).

use std::path::{Path, PathBuf};

use crate::config::WriteDurability;
use crate::error::Result;
use crate::replica::learner::PAGE_CACHE_MARK;

const BOOT_ID_FILE: &str = "boot-id";
const CLEAN_FILE: &str = "clean-shutdown";
const HOST_BOOT_ID: &str = "/proc/sys/kernel/random/boot_id";
/// Names the file to read the host boot id from instead of the kernel's.
pub const BOOT_ID_ENV: &str = "HELIX_BOOT_ID_FILE";

/// The current host boot id, or `None` where the kernel does not give one
/// (then no reboot can be detected, as before this check existed).
pub fn current_boot_id() -> Option<String> {
    let path = std::env::var_os(BOOT_ID_ENV)
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(HOST_BOOT_ID));
    std::fs::read_to_string(path)
        .ok()
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
}

/// What the data directory says about the last stop.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LastStop {
    /// The boot id recorded at the last start (none before the first).
    pub boot_id: Option<String>,
    /// The last stop was graceful and synced every log.
    pub clean: bool,
}

impl LastStop {
    pub fn read(data_dir: &Path) -> LastStop {
        LastStop {
            boot_id: std::fs::read_to_string(data_dir.join(BOOT_ID_FILE))
                .ok()
                .map(|s| s.trim().to_string())
                .filter(|s| !s.is_empty()),
            clean: data_dir.join(CLEAN_FILE).exists(),
        }
    }
}

/// Whether appends reported durable may have been lost: replication-only
/// mode (fsync mode reports nothing it has not synced), a recorded boot id
/// that differs from the current one, and no clean stop since.
pub fn page_cache_lost(mode: WriteDurability, last: &LastStop, current: Option<&str>) -> bool {
    mode == WriteDurability::ReplicationOnly
        && !last.clean
        && matches!((last.boot_id.as_deref(), current), (Some(was), Some(now)) if was != now)
}

/// At start, once the node knows how it stands: records the current boot
/// id and removes the clean mark (this run is not clean until it stops),
/// both durable before any replica takes part.
pub fn record_start(data_dir: &Path, current: Option<&str>) -> Result<()> {
    use std::io::Write;
    std::fs::create_dir_all(data_dir)?;
    if let Some(id) = current {
        let path = data_dir.join(BOOT_ID_FILE);
        let tmp = path.with_extension("tmp");
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(format!("{id}\n").as_bytes())?;
        f.sync_all()?;
        std::fs::rename(&tmp, &path)?;
    }
    match std::fs::remove_file(data_dir.join(CLEAN_FILE)) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e.into()),
        _ => {}
    }
    std::fs::File::open(data_dir)?.sync_all()?;
    Ok(())
}

/// At a graceful stop, after every log is closed: syncs the whole
/// filesystem of the data directory (every log's unsynced appends), then
/// writes the clean mark.
pub fn record_clean_stop(data_dir: &Path) -> Result<()> {
    helix_wal::sync_filesystem(data_dir)?;
    let path = data_dir.join(CLEAN_FILE);
    std::fs::write(&path, b"")?;
    std::fs::File::open(&path)?.sync_all()?;
    std::fs::File::open(data_dir)?.sync_all()?;
    Ok(())
}

/// Marks every replica directory of `data_dir` (partitions and
/// coordinator partitions; the controller's log is always fsynced) with
/// the nodes known to have lost their page cache, durably. Returns how
/// many were marked.
pub fn mark_replicas(data_dir: &Path, lost: &[u64]) -> Result<usize> {
    let text: Vec<String> = lost.iter().map(u64::to_string).collect();
    let text = format!("{}\n", text.join(" "));
    let mut marked = 0;
    let mut parents = Vec::new();
    for dir in replica_dirs(data_dir)? {
        let path = dir.join(PAGE_CACHE_MARK);
        std::fs::write(&path, &text)?;
        std::fs::File::open(&path)?.sync_all()?;
        parents.push(dir);
        marked += 1;
    }
    for dir in parents {
        std::fs::File::open(&dir)?.sync_all()?;
    }
    Ok(marked)
}

/// `groups/<n>` and `topics/<id>/<p>` directories holding a replica.
fn replica_dirs(data_dir: &Path) -> Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    let holds_replica = |d: &Path| d.join("wal").exists() || d.join("raft-hard-state").exists();
    for d in subdirs(&data_dir.join("groups"))? {
        if holds_replica(&d) {
            out.push(d);
        }
    }
    for topic in subdirs(&data_dir.join("topics"))? {
        for d in subdirs(&topic)? {
            if holds_replica(&d) {
                out.push(d);
            }
        }
    }
    Ok(out)
}

fn subdirs(dir: &Path) -> Result<Vec<PathBuf>> {
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e.into()),
    };
    let mut out = Vec::new();
    for entry in entries {
        let entry = entry?;
        if entry.file_type()?.is_dir() {
            out.push(entry.path());
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::replica::learner::{clear_replica_mark, replica_mark};

    use WriteDurability::{Fsync, ReplicationOnly};

    fn stop(boot: Option<&str>, clean: bool) -> LastStop {
        LastStop {
            boot_id: boot.map(str::to_string),
            clean,
        }
    }

    #[test]
    fn only_an_unclean_stop_across_a_reboot_in_replication_only_mode_loses_the_page_cache() {
        assert!(page_cache_lost(
            ReplicationOnly,
            &stop(Some("a"), false),
            Some("b")
        ));
        // The same boot: a process crash keeps the page cache.
        assert!(!page_cache_lost(
            ReplicationOnly,
            &stop(Some("a"), false),
            Some("a")
        ));
        // A clean stop synced everything first.
        assert!(!page_cache_lost(
            ReplicationOnly,
            &stop(Some("a"), true),
            Some("b")
        ));
        // Fsync mode never reported an unsynced append.
        assert!(!page_cache_lost(Fsync, &stop(Some("a"), false), Some("b")));
        // Nothing to compare: the first start, or no boot id on this host.
        assert!(!page_cache_lost(
            ReplicationOnly,
            &stop(None, false),
            Some("b")
        ));
        assert!(!page_cache_lost(
            ReplicationOnly,
            &stop(Some("a"), false),
            None
        ));
    }

    #[test]
    fn every_replica_directory_is_marked_until_its_open_clears_it() {
        let dir = tempfile::tempdir().expect("tempdir");
        let group = dir.path().join("groups").join("3");
        let partition = dir.path().join("topics").join("abc").join("0");
        let controller = dir.path().join("controller");
        for d in [&group, &partition, &controller] {
            std::fs::create_dir_all(d.join("wal")).expect("mkdir");
        }
        std::fs::create_dir_all(dir.path().join("topics").join("abc").join("empty"))
            .expect("mkdir");
        assert_eq!(mark_replicas(dir.path(), &[1, 3]).expect("mark"), 2);
        assert_eq!(replica_mark(&group), Some(vec![1, 3]));
        assert_eq!(replica_mark(&partition), Some(vec![1, 3]));
        assert_eq!(replica_mark(&controller), None, "always fsynced");
        clear_replica_mark(&group).expect("clear");
        assert_eq!(replica_mark(&group), None);
        clear_replica_mark(&group).expect("clearing twice is fine");
    }

    #[test]
    fn a_start_clears_the_clean_mark_and_a_clean_stop_sets_it() {
        let dir = tempfile::tempdir().expect("tempdir");
        assert_eq!(LastStop::read(dir.path()), stop(None, false));
        record_start(dir.path(), Some("boot-1")).expect("start");
        assert_eq!(LastStop::read(dir.path()), stop(Some("boot-1"), false));
        record_clean_stop(dir.path()).expect("stop");
        assert_eq!(LastStop::read(dir.path()), stop(Some("boot-1"), true));
        record_start(dir.path(), Some("boot-2")).expect("start");
        assert_eq!(LastStop::read(dir.path()), stop(Some("boot-2"), false));
    }
}
