//! DescribeLogDirs (`kafka-log-dirs.sh --describe`): this node's one log
//! directory (its data directory) and the partitions it holds there, as
//! Kafka's `ReplicaManager.describeLogDirs` answers: each replica's size
//! in segment bytes, its offset lag (the high watermark it knows less its
//! log end, never below 0), never a future replica (Helix does not move
//! replicas between directories), and (v4) the file system's total and
//! usable bytes.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use kafka_protocol::messages::describe_log_dirs_response::{
    DescribeLogDirsPartition, DescribeLogDirsResult, DescribeLogDirsTopic,
};
use kafka_protocol::messages::{DescribeLogDirsRequest, DescribeLogDirsResponse};

use super::{wire_str, wire_topic};
use crate::topics::TopicTable;

/// The answer for `data_dir`'s replicas among `topics`; `req.topics` None
/// asks for all of them.
pub fn describe(
    topics: &TopicTable,
    data_dir: &Path,
    req: &DescribeLogDirsRequest,
) -> DescribeLogDirsResponse {
    let wanted: Option<BTreeSet<(&str, i32)>> = req.topics.as_ref().map(|ts| {
        ts.iter()
            .flat_map(|t| t.partitions.iter().map(move |p| (t.topic.0.as_str(), *p)))
            .collect()
    });
    let mut by_topic: BTreeMap<String, Vec<DescribeLogDirsPartition>> = BTreeMap::new();
    for topic in topics.all() {
        for p in &topic.partitions {
            let Some(local) = &p.local else { continue };
            if wanted
                .as_ref()
                .is_some_and(|w| !w.contains(&(topic.name.as_str(), p.index)))
            {
                continue;
            }
            let mut out = DescribeLogDirsPartition::default();
            out.partition_index = p.index;
            out.partition_size = i64::try_from(local.size_bytes()).unwrap_or(i64::MAX);
            out.offset_lag = (local.high_watermark().0 - local.log_end_offset().0).max(0);
            out.is_future_key = false;
            by_topic.entry(topic.name.clone()).or_default().push(out);
        }
    }
    let mut dir = DescribeLogDirsResult::default();
    let path = std::fs::canonicalize(data_dir).unwrap_or_else(|_| data_dir.to_path_buf());
    dir.log_dir = wire_str(&path.to_string_lossy());
    let (total, usable) = space(&path).unwrap_or((-1, -1));
    dir.total_bytes = total;
    dir.usable_bytes = usable;
    dir.topics = by_topic
        .into_iter()
        .map(|(name, partitions)| {
            let mut t = DescribeLogDirsTopic::default();
            t.name = wire_topic(&name);
            t.partitions = partitions;
            t
        })
        .collect();
    let mut resp = DescribeLogDirsResponse::default();
    resp.results = vec![dir];
    resp
}

/// (total, usable) bytes of the file system holding `path`, as Kafka's
/// `FileStore.getTotalSpace` / `getUsableSpace` (blocks available to an
/// unprivileged user); None when it cannot be read (answered as -1, as
/// Kafka does for an unknown size).
fn space(path: &Path) -> Option<(i64, i64)> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(path.as_os_str().as_bytes()).ok()?;
    let mut s = std::mem::MaybeUninit::<libc::statvfs>::uninit();
    // SAFETY: `c` is a NUL-terminated path and `s` a buffer of the size
    // statvfs writes; it is read only when the call succeeded.
    let rc = unsafe { libc::statvfs(c.as_ptr(), s.as_mut_ptr()) };
    if rc != 0 {
        return None;
    }
    // SAFETY: statvfs returned 0, so it filled `s`.
    let s = unsafe { s.assume_init() };
    let frsize: u64 = s.f_frsize;
    let total = s.f_blocks.saturating_mul(frsize);
    let usable = s.f_bavail.saturating_mul(frsize);
    Some((
        i64::try_from(total).unwrap_or(i64::MAX),
        i64::try_from(usable).unwrap_or(i64::MAX),
    ))
}
