//! The DeleteRecords entries a log keeps for catch-up
//! (`log/delete_records.rs`): kept when they raise the offset asked, across
//! a reopen, and gone with their entries.

use super::support::{append_batches, pos, small_config};
use crate::log::delete_records::KEPT_ENTRIES;
use crate::{DeleteRecordsEntry, PartitionLog, WalError};

fn kept(log: &PartitionLog) -> Vec<(u64, i64)> {
    log.delete_records_entries()
        .iter()
        .map(|e| (e.index, e.offset))
        .collect()
}

#[test]
fn delete_records_entries_are_kept_until_their_entries_are_cut() {
    let dir = tempfile::tempdir().unwrap();
    {
        let (mut log, _) = PartitionLog::open(dir.path(), small_config()).unwrap();
        for i in 1..=10 {
            append_batches(&mut log, pos(1, i), 1, 1, 0, 100);
        }
        log.append_delete_records(pos(1, 11), 4).unwrap();
        assert_eq!(log.log_start_offset(), 4);
        // Asking less, or past the end, keeps nothing; both entries are
        // still appended.
        log.append_delete_records(pos(1, 12), 3).unwrap();
        assert!(matches!(
            log.append_delete_records(pos(1, 13), 11),
            Err(WalError::OffsetOutOfRange { .. })
        ));
        log.append_delete_records(pos(1, 14), 7).unwrap();
        assert_eq!(log.last_position(), Some(pos(1, 14)));
        assert_eq!(kept(&log), vec![(11, 4), (14, 7)]);
    }
    let (mut log, _) = PartitionLog::open(dir.path(), small_config()).unwrap();
    assert_eq!(kept(&log), vec![(11, 4), (14, 7)], "kept across a reopen");
    log.truncate_after(13).unwrap();
    assert_eq!(kept(&log), vec![(11, 4)], "gone with its entry");
    drop(log);
    let (mut log, _) = PartitionLog::open(dir.path(), small_config()).unwrap();
    assert_eq!(kept(&log), vec![(11, 4)]);
    log.truncate_after(10).unwrap();
    assert_eq!(kept(&log), vec![]);
}

#[test]
fn delete_records_entries_past_the_reopened_log_are_forgotten() {
    let dir = tempfile::tempdir().unwrap();
    {
        let (mut log, _) = PartitionLog::open(dir.path(), small_config()).unwrap();
        for i in 1..=5 {
            append_batches(&mut log, pos(1, i), 1, 1, 0, 100);
        }
    }
    // As if entry 6 was lost with an unflushed tail while the file naming
    // it was written durably: only entries the log holds are kept.
    let entry = |index, offset| DeleteRecordsEntry { index, offset };
    crate::meta::write_delete_records_entries(dir.path(), &[entry(4, 1), entry(6, 2)]).unwrap();
    let (log, _) = PartitionLog::open(dir.path(), small_config()).unwrap();
    assert_eq!(kept(&log), vec![(4, 1)]);
}

#[test]
fn only_the_newest_delete_records_entries_are_kept() {
    let dir = tempfile::tempdir().unwrap();
    let (mut log, _) = PartitionLog::open(dir.path(), small_config()).unwrap();
    let n = KEPT_ENTRIES as u64 + 3;
    for i in 1..=n {
        append_batches(&mut log, pos(1, 2 * i - 1), 1, 1, 0, 10);
        log.append_delete_records(pos(1, 2 * i), i as i64).unwrap();
    }
    let all = kept(&log);
    assert_eq!(all.len(), KEPT_ENTRIES);
    assert_eq!(all.first(), Some(&(8, 4)));
    assert_eq!(all.last(), Some(&(2 * n, n as i64)));
    drop(log);
    let (log, _) = PartitionLog::open(dir.path(), small_config()).unwrap();
    assert_eq!(kept(&log), all);
}
