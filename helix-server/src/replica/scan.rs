//! State derived from a partition's log: idempotent-producer sequences and
//! the batch with the largest timestamp. Rebuilt at open from a snapshot
//! plus the batch headers after it; without a usable snapshot, from the
//! whole log. Reads headers only, a bounded chunk at a time.
//!
//! A snapshot is the state as of one Raft position (ADR 0022), written and
//! fsynced at close, before every retention sweep and before every
//! DeleteRecords, so the producer state outlives the records it came from.
//! It is used only where the log still holds that position with that term
//! (or no longer holds it because the records were removed below it).

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
    /// The Raft position it covers (0: a snapshot of an older version,
    /// never used).
    #[serde(default)]
    pub index: u64,
    #[serde(default)]
    pub term: u64,
    /// A leader's state carried by a restart of this replica's log, saved
    /// before this replica reached the entry it describes: adopted when it
    /// does (`state/restart.rs`). Any other snapshot ahead of the log is
    /// stale (the log lost its tail) and never used.
    #[serde(default)]
    pub carried: bool,
}

impl Snapshot {
    /// The snapshot in `dir`, if there is a readable one.
    pub fn load(dir: &Path) -> Option<Snapshot> {
        let text = std::fs::read(dir.join(SNAPSHOT_FILE)).ok()?;
        match Snapshot::from_bytes(&text) {
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

    /// The snapshot as bytes: what is saved, and what a log restart
    /// carries to a follower (`state/restart.rs`).
    pub fn to_bytes(&self) -> Result<Vec<u8>> {
        serde_json::to_vec(self)
            .map_err(|e| crate::error::HelixError::CorruptState(format!("snapshot: {e}")))
    }

    pub fn from_bytes(bytes: &[u8]) -> Result<Snapshot> {
        serde_json::from_slice(bytes)
            .map_err(|e| crate::error::HelixError::CorruptState(format!("snapshot: {e}")))
    }

    /// Whether it is a state carried by a log restart that `log` has not
    /// reached yet (`state/restart.rs`).
    pub fn carried_ahead_of(&self, log: &helix_wal::PartitionLog) -> bool {
        self.carried && self.index > log.last_position().map_or(0, |p| p.index)
    }

    /// Replaces the snapshot in `dir` atomically and durably (file, then
    /// rename, then directory flushed): taken before records are removed,
    /// it is all that is left of the producer state they carried.
    pub fn save(&self, dir: &Path) -> Result<()> {
        use std::io::Write;
        let json = self.to_bytes()?;
        let tmp = dir.join(format!("{SNAPSHOT_FILE}.tmp"));
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(&json)?;
        f.sync_data()?;
        std::fs::rename(&tmp, dir.join(SNAPSHOT_FILE))?;
        std::fs::File::open(dir)?.sync_all()?;
        Ok(())
    }

    /// This snapshot if it describes `log`: its position is in the log with
    /// its term, or below the log's entries (removed since), and it claims
    /// no more records than the log holds.
    pub fn describes(self, log: &helix_wal::PartitionLog) -> Option<Snapshot> {
        if self.index == 0 || self.covers > log.next_offset() {
            return None;
        }
        let last = log.last_position().map_or(0, |p| p.index);
        match log.term_of(self.index) {
            Ok(Some(term)) if term == self.term => Some(self),
            Ok(None) if self.index < last && self.covers <= log.log_start_offset().max(0) => {
                Some(self)
            }
            _ => None,
        }
    }
}

/// Bytes read per step of the scan.
const SCAN_CHUNK: usize = 1 << 20;

/// The batch holding the largest timestamp: (its base offset, timestamp).
pub type MaxTimestamp = Option<(i64, i64)>;

/// The state as of `end` (the log's next offset): the snapshot, if it does
/// not claim more than the log holds, plus every batch after it.
///
/// With `txn_dir`, the aborted index's chunk files there are made to match
/// (`txn_index.rs`): those the snapshot does not name go (sealed after it,
/// they are sealed again from the batches read), those it names are
/// checked and rebuilt from the log if damaged, and the tail is sealed as
/// it fills. Without (tests), every entry stays in memory.
pub fn rebuild(
    reader: &LogReader,
    end: i64,
    snapshot: Option<Snapshot>,
    txn_dir: Option<&Path>,
) -> Result<(ProducerTable, MaxTimestamp)> {
    let snapshot = snapshot.filter(|s| s.covers <= end).unwrap_or_default();
    // Records the snapshot covers may be gone; those after it are read.
    let mut producers = snapshot.producers;
    if let Some(dir) = txn_dir {
        producers.trim_aborted(reader.log_start_offset());
        super::txn_index::remove_unlisted(dir, producers.aborted_index());
        super::txn_index::repair(dir, reader, producers.aborted_index_mut())?;
    }
    let mut max_ts = snapshot.max_timestamp;
    // Records between the snapshot and the log start were removed and no
    // snapshot of them is left: the producers they held are lost.
    let lost = snapshot.covers < reader.log_start_offset();
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
            let batch = chunk.bytes.get(pos..pos + h.total_len()).unwrap_or(&[]);
            derive_from_stored(&mut producers, &h, batch);
            if let Some(dir) = txn_dir {
                super::txn_index::seal_if_full(dir, producers.aborted_index_mut());
            }
            pos += h.total_len();
        }
        offset = chunk.next_offset;
    }
    if lost {
        producers.lost_unnamed();
    }
    Ok((producers, max_ts))
}

pub use super::producers::derive_from_stored;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::replica::batch::BatchHeader;
    use crate::replica::batch::tests::make_batch;
    use crate::replica::producers::SequenceCheck;
    use helix_wal::{LogConfig, PartitionLog, RaftPosition};

    fn append(log: &mut PartitionLog, index: u64, seq: i32, ts: i64) -> BatchHeader {
        let mut b = make_batch(&[b"v"], 5, seq, ts).to_vec();
        helix_wal::patch_batch_header(&mut b, log.next_offset(), 1).expect("patch");
        log.append(RaftPosition { term: 1, index }, &b)
            .expect("append");
        BatchHeader::parse(&b).expect("header")
    }

    /// The state of `log`, whose last entry is index 1 of term 1, as a
    /// snapshot.
    fn snapshot_at_1(log: &PartitionLog) -> Snapshot {
        let (producers, max_ts) =
            rebuild(&log.reader(), log.next_offset(), None, None).expect("scan");
        Snapshot {
            covers: log.next_offset(),
            producers,
            max_timestamp: max_ts,
            acknowledged_offset: log.next_offset(),
            index: 1,
            term: 1,
            carried: false,
        }
    }

    #[test]
    fn a_snapshot_plus_the_tail_equals_a_full_scan() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (mut log, _) =
            PartitionLog::open(&dir.path().join("wal"), LogConfig::default()).expect("open");
        let first = append(&mut log, 1, 0, 100);
        snapshot_at_1(&log).save(dir.path()).expect("save");
        let second = append(&mut log, 2, 1, 50);
        let end = log.next_offset();
        let loaded = Snapshot::load(dir.path()).and_then(|s| s.describes(&log));
        assert!(loaded.is_some(), "the log holds its position with its term");
        let (from_snapshot, ts) = rebuild(&log.reader(), end, loaded, None).expect("tail");
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
        // tail), or a position the log holds with another term, or none
        // (an older version's) is not used: the state comes from the log.
        for wrong in [
            Snapshot {
                covers: end + 10,
                index: 2,
                term: 1,
                ..Snapshot::default()
            },
            Snapshot {
                covers: 1,
                index: 1,
                term: 9,
                ..Snapshot::default()
            },
            Snapshot {
                covers: 1,
                ..Snapshot::default()
            },
        ] {
            assert!(wrong.describes(&log).is_none());
        }
        let (scanned, _) = rebuild(&log.reader(), end, None, None).expect("scan");
        assert!(matches!(
            scanned.check(&second),
            Ok(SequenceCheck::Duplicate { .. })
        ));
    }

    /// Only a state carried by a log restart is kept for later when the
    /// log has not reached it; a snapshot ahead of the log otherwise lost
    /// the log's tail and is stale.
    #[test]
    fn only_a_carried_state_ahead_of_the_log_waits_for_it() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (mut log, _) =
            PartitionLog::open(&dir.path().join("wal"), LogConfig::default()).expect("open");
        append(&mut log, 1, 0, 100);
        let ahead = Snapshot {
            covers: 5,
            index: 4,
            term: 1,
            ..Snapshot::default()
        };
        assert!(!ahead.carried_ahead_of(&log));
        let carried = Snapshot {
            carried: true,
            ..ahead
        };
        assert!(carried.carried_ahead_of(&log));
        let reached = Snapshot {
            index: 1,
            ..carried
        };
        assert!(
            !reached.carried_ahead_of(&log),
            "reached: an ordinary snapshot"
        );
    }

    /// Producer 5's records removed, then the state rebuilt: with the
    /// snapshot taken before the removal it still knows 5, and a producer
    /// it never saw must start at 0 (ADR 0025); without it, it knows
    /// neither, and takes either at its next sequence, as Kafka does.
    #[test]
    fn a_rebuild_without_the_snapshot_of_removed_records_knows_it_may_have_forgotten() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (mut log, _) =
            PartitionLog::open(&dir.path().join("wal"), LogConfig::default()).expect("open");
        let first = append(&mut log, 1, 0, 100);
        let snapshot = snapshot_at_1(&log);
        log.append(RaftPosition { index: 2, term: 1 }, &[])
            .expect("delete entry");
        log.delete_records_before(log.next_offset())
            .expect("delete");
        let next_of_5 = BatchHeader {
            base_sequence: 1,
            ..first
        };
        let stranger = BatchHeader {
            producer_id: 6,
            ..next_of_5
        };
        let end = log.next_offset();
        let kept = snapshot.describes(&log);
        assert!(kept.is_some(), "the snapshot covers what was removed");
        let (with, _) = rebuild(&log.reader(), end, kept, None).expect("tail");
        assert!(with.check(&next_of_5).is_ok());
        assert!(with.check(&stranger).is_err());
        let (without, _) = rebuild(&log.reader(), end, None, None).expect("scan");
        assert!(without.check(&stranger).is_ok());
    }
}
