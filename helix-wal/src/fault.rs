//! Test-only fault injection: makes chosen I/O steps of one log directory fail
//! with a chosen OS error (ENOSPC, EIO), or stop as if the process died.
//! Compiled to nothing outside tests.

use std::io;
use std::path::Path;

/// An I/O step that can be made to fail.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Point {
    /// Writing an entry's batches: half the bytes land, then the error.
    LogWrite,
    /// Rolling a write back after a failed append.
    Rollback,
    /// Growing the entry index file.
    EntryIndexGrow,
    /// An fsync of a log's files by the group committer.
    Sync,
    /// Creating a new segment on roll.
    Roll,
    /// Step `n` of `truncate_after` (a simulated crash: the log must be
    /// dropped without closing and reopened).
    Truncate(u8),
    /// Step `n` of a compaction swap (`compaction::commit_swap`): a
    /// simulated crash, the directory is then recovered as at open.
    CompactSwap(u8),
}

#[cfg(test)]
struct Fault {
    dir: std::path::PathBuf,
    point: Point,
    errno: i32,
    /// Hits to let pass before failing.
    skip: u32,
    /// Failures left (`u32::MAX`: every hit).
    times: u32,
}

#[cfg(test)]
static PLAN: std::sync::Mutex<Vec<Fault>> = std::sync::Mutex::new(Vec::new());

/// Fails the `skip + 1`-th hit of `point` under `dir` (and `times - 1` more)
/// with OS error `errno`.
#[cfg(test)]
pub fn inject(dir: &Path, point: Point, errno: i32, skip: u32, times: u32) {
    PLAN.lock().unwrap_or_else(|p| p.into_inner()).push(Fault {
        dir: dir.to_path_buf(),
        point,
        errno,
        skip,
        times,
    });
}

/// Removes every fault planned under `dir`.
#[cfg(test)]
pub fn clear(dir: &Path) {
    PLAN.lock()
        .unwrap_or_else(|p| p.into_inner())
        .retain(|f| f.dir != dir);
}

/// Called at each injectable step; `path` is any path inside the log dir.
#[cfg(test)]
pub fn hit(path: &Path, point: Point) -> io::Result<()> {
    let mut plan = PLAN.lock().unwrap_or_else(|p| p.into_inner());
    for f in plan.iter_mut() {
        if f.point == point && path.starts_with(&f.dir) && f.times > 0 {
            if f.skip > 0 {
                f.skip -= 1;
                continue;
            }
            if f.times != u32::MAX {
                f.times -= 1;
            }
            return Err(io::Error::from_raw_os_error(f.errno));
        }
    }
    Ok(())
}

#[cfg(not(test))]
#[inline(always)]
pub fn hit(_path: &Path, _point: Point) -> io::Result<()> {
    Ok(())
}
