//! State derived from a partition's log: idempotent-producer sequences and
//! the batch with the largest timestamp. Rebuilt at open from a snapshot
//! (written by the worker at close and with every retention sweep) plus the
//! batch headers after it; without a usable snapshot, from the whole log.
//! Reads headers only, a bounded chunk at a time.

use std::path::Path;

use helix_wal::LogReader;
use serde::{Deserialize, Serialize};

use super::producers::ProducerTable;
use crate::error::Result;

const SNAPSHOT_FILE: &str = "derived-state.json";

/// The derived state as of `covers` (the log's next offset when taken).
#[derive(Debug, Default, Serialize, Deserialize)]
pub struct Snapshot {
    pub covers: i64,
    pub producers: ProducerTable,
    pub max_timestamp: MaxTimestamp,
    /// The high watermark when taken: a lower bound of what is acknowledged,
    /// where a restarted replica's high watermark starts.
    #[serde(default)]
    pub acknowledged_offset: i64,
}

impl Snapshot {
    /// The snapshot in `dir`, if there is a readable one.
    pub fn load(dir: &Path) -> Option<Snapshot> {
        let text = std::fs::read(dir.join(SNAPSHOT_FILE)).ok()?;
        match serde_json::from_slice(&text) {
            Ok(s) => Some(s),
            Err(e) => {
                tracing::warn!(dir = %dir.display(), error = %e, "ignoring an unreadable state snapshot");
                None
            }
        }
    }

    /// Drops the snapshot in `dir` (the log was truncated below what it covers).
    pub fn remove(dir: &Path) {
        match std::fs::remove_file(dir.join(SNAPSHOT_FILE)) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => {
                tracing::warn!(dir = %dir.display(), error = %e, "cannot remove a state snapshot")
            }
        }
    }

    /// Replaces the snapshot in `dir` atomically. Not fsynced: a snapshot
    /// lost or older after a power loss only makes the next open scan more.
    pub fn save(&self, dir: &Path) -> Result<()> {
        let json = serde_json::to_vec(self)
            .map_err(|e| crate::error::HelixError::CorruptState(format!("snapshot: {e}")))?;
        let tmp = dir.join(format!("{SNAPSHOT_FILE}.tmp"));
        std::fs::write(&tmp, json)?;
        std::fs::rename(&tmp, dir.join(SNAPSHOT_FILE))?;
        Ok(())
    }
}

/// Bytes read per step of the scan.
const SCAN_CHUNK: usize = 1 << 20;

/// The batch holding the largest timestamp: (its base offset, timestamp).
pub type MaxTimestamp = Option<(i64, i64)>;

/// The state as of `end` (the log's next offset): the snapshot, if it does
/// not claim more than the log holds, plus every batch after it.
pub fn rebuild(
    reader: &LogReader,
    end: i64,
    snapshot: Option<Snapshot>,
) -> Result<(ProducerTable, MaxTimestamp)> {
    let snapshot = snapshot.filter(|s| s.covers <= end).unwrap_or_default();
    let mut producers = snapshot.producers;
    let mut max_ts = snapshot.max_timestamp;
    let mut offset = reader.log_start_offset().max(snapshot.covers);
    while offset < end {
        let chunk = reader.read(offset, SCAN_CHUNK)?;
        if chunk.bytes.is_empty() {
            // An empty segment tail: continue from where the read says.
            if chunk.next_offset <= offset {
                break;
            }
            offset = chunk.next_offset;
            continue;
        }
        let mut pos = 0usize;
        while pos < chunk.bytes.len() {
            let h = super::batch::parse_header(&chunk.bytes[pos..])?;
            if max_ts.is_none_or(|(_, ts)| h.max_timestamp > ts) {
                max_ts = Some((h.base_offset, h.max_timestamp));
            }
            pos += h.total_len();
            producers.record(&h, h.base_offset);
        }
        offset = chunk.next_offset;
    }
    Ok((producers, max_ts))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::partition::batch::BatchHeader;
    use crate::partition::batch::tests::make_batch;
    use crate::partition::producers::SequenceCheck;
    use helix_wal::{LogConfig, PartitionLog, RaftPosition};

    fn append(log: &mut PartitionLog, index: u64, seq: i32, ts: i64) -> BatchHeader {
        let mut b = make_batch(&[b"v"], 5, seq, ts).to_vec();
        helix_wal::patch_batch_header(&mut b, log.next_offset(), 1).expect("patch");
        log.append(RaftPosition { term: 1, index }, &b)
            .expect("append");
        BatchHeader::parse(&b).expect("header")
    }

    #[test]
    fn a_snapshot_plus_the_tail_equals_a_full_scan() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (mut log, _) =
            PartitionLog::open(&dir.path().join("wal"), LogConfig::default()).expect("open");
        let first = append(&mut log, 1, 0, 100);
        let (producers, max_ts) = rebuild(&log.reader(), log.next_offset(), None).expect("scan");
        Snapshot {
            covers: log.next_offset(),
            producers,
            max_timestamp: max_ts,
            acknowledged_offset: log.next_offset(),
        }
        .save(dir.path())
        .expect("save");
        let second = append(&mut log, 2, 1, 50);
        let end = log.next_offset();
        let (from_snapshot, ts) =
            rebuild(&log.reader(), end, Snapshot::load(dir.path())).expect("tail");
        assert_eq!(
            ts,
            Some((0, 100)),
            "max timestamp carried over from the snapshot"
        );
        for h in [first, second] {
            assert!(matches!(
                from_snapshot.check(&h),
                Ok(SequenceCheck::Duplicate { .. })
            ));
        }
        // A snapshot claiming more than the log holds (the log lost its
        // tail) is ignored: the state comes from the log alone.
        Snapshot {
            covers: end + 10,
            ..Snapshot::default()
        }
        .save(dir.path())
        .expect("save");
        let (scanned, _) = rebuild(&log.reader(), end, Snapshot::load(dir.path())).expect("scan");
        assert!(matches!(
            scanned.check(&second),
            Ok(SequenceCheck::Duplicate { .. })
        ));
    }
}
