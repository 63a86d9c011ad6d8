//! The DeleteRecords entry a log keeps for catch-up (`log/delete_records.rs`):
//! recorded when it raises the offset asked, kept across a reopen, gone
//! with its entry.

use super::support::{append_batches, pos, small_config};
use crate::{DeleteRecordsEntry, PartitionLog, WalError};

#[test]
fn the_delete_records_entry_is_kept_until_its_entry_is_cut() {
    let dir = tempfile::tempdir().unwrap();
    let entry = |index, offset| Some(DeleteRecordsEntry { index, offset });
    {
        let (mut log, _) = PartitionLog::open(dir.path(), small_config()).unwrap();
        for i in 1..=10 {
            append_batches(&mut log, pos(1, i), 1, 1, 0, 100);
        }
        log.append_delete_records(pos(1, 11), 4).unwrap();
        assert_eq!(log.log_start_offset(), 4);
        assert_eq!(log.last_delete_records(), entry(11, 4));
        // Asking less, or past the end, records nothing; both entries are
        // still appended.
        log.append_delete_records(pos(1, 12), 3).unwrap();
        assert!(matches!(
            log.append_delete_records(pos(1, 13), 11),
            Err(WalError::OffsetOutOfRange { .. })
        ));
        assert_eq!(log.last_position(), Some(pos(1, 13)));
        assert_eq!(log.last_delete_records(), entry(11, 4));
    }
    let (mut log, _) = PartitionLog::open(dir.path(), small_config()).unwrap();
    assert_eq!(
        log.last_delete_records(),
        entry(11, 4),
        "kept across a reopen"
    );
    log.truncate_after(11).unwrap();
    assert_eq!(log.last_delete_records(), entry(11, 4));
    log.truncate_after(10).unwrap();
    assert_eq!(log.last_delete_records(), None, "gone with its entry");
    drop(log);
    let (log, _) = PartitionLog::open(dir.path(), small_config()).unwrap();
    assert_eq!(log.last_delete_records(), None);
}

#[test]
fn a_delete_records_entry_past_the_reopened_log_is_forgotten() {
    let dir = tempfile::tempdir().unwrap();
    {
        let (mut log, _) = PartitionLog::open(dir.path(), small_config()).unwrap();
        for i in 1..=5 {
            append_batches(&mut log, pos(1, i), 1, 1, 0, 100);
        }
        log.append_delete_records(pos(1, 6), 2).unwrap();
    }
    // As if entry 6 was lost with an unflushed tail while its record was
    // written durably: only a record of an entry the log holds is kept.
    {
        let (mut log, _) = PartitionLog::open(dir.path(), small_config()).unwrap();
        log.truncate_after(5).unwrap();
    }
    crate::meta::write_delete_records_entry(
        dir.path(),
        DeleteRecordsEntry {
            index: 6,
            offset: 2,
        },
    )
    .unwrap();
    let (log, _) = PartitionLog::open(dir.path(), small_config()).unwrap();
    assert_eq!(log.last_delete_records(), None);
}
