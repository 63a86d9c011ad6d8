//! A log started over at another replica's first held entry
//! (`log/restart.rs`): empty, at the new offset, and so after a reopen.

use super::support::{append_batches, pos, small_config};
use crate::{Durability, LogConfig, PartitionLog, WalError};

fn restarted_log_starts_at_the_new_offset(config: LogConfig) {
    let dir = tempfile::tempdir().unwrap();
    {
        let (mut log, _) = PartitionLog::open(dir.path(), config.clone()).unwrap();
        // Several segments (4 KiB each), and a DeleteRecords entry kept.
        for i in 1..=30 {
            append_batches(&mut log, pos(1, i), 1, 1, 0, 300);
        }
        log.append_delete_records(pos(1, 31), 2).unwrap();
        assert_eq!(log.first_index(), Some(1));
        assert!(matches!(
            log.restart_at(29),
            Err(WalError::OffsetOutOfRange { .. })
        ));
        log.restart_at(100).unwrap();
        assert_eq!((log.last_position(), log.first_index()), (None, None));
        assert_eq!((log.next_offset(), log.log_start_offset()), (100, 100));
        assert!(log.delete_records_entries().is_empty());
        // The leader's first held entry, at any index.
        append_batches(&mut log, pos(3, 70), 1, 2, 0, 300);
        append_batches(&mut log, pos(3, 71), 1, 1, 0, 300);
        if config.durability == Durability::Fsync {
            log.sync().unwrap();
        }
        assert_eq!(log.durable_position(), Some(pos(3, 71)));
        let r = log.reader().read(100, 1 << 20).unwrap();
        assert!(!r.bytes.is_empty());
        assert!(log.reader().read(99, 1 << 20).is_err(), "below the start");
    }
    let (log, _) = PartitionLog::open(dir.path(), config).unwrap();
    assert_eq!(log.last_position(), Some(pos(3, 71)));
    assert_eq!(log.first_index(), Some(70));
    assert_eq!((log.next_offset(), log.log_start_offset()), (103, 100));
    assert_eq!(log.term_starts().unwrap(), vec![pos(3, 70)]);
}

#[test]
fn a_restarted_log_starts_at_the_new_offset() {
    restarted_log_starts_at_the_new_offset(small_config());
}

#[test]
fn a_restarted_fsync_log_starts_at_the_new_offset() {
    restarted_log_starts_at_the_new_offset(LogConfig {
        durability: Durability::Fsync,
        ..small_config()
    });
}

#[test]
fn an_empty_log_restarts_and_a_restart_left_half_done_reopens_empty() {
    let dir = tempfile::tempdir().unwrap();
    {
        let (mut log, _) = PartitionLog::open(dir.path(), small_config()).unwrap();
        log.restart_at(50).unwrap();
        assert_eq!((log.next_offset(), log.log_start_offset()), (50, 50));
    }
    let (log, _) = PartitionLog::open(dir.path(), small_config()).unwrap();
    assert_eq!((log.next_offset(), log.log_start_offset()), (50, 50));
    drop(log);
    // As if a crash came after the old segments were deleted and before
    // the new one was created: the persisted log start places the log.
    for entry in std::fs::read_dir(dir.path()).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e != "tmp")
            && path.file_stem().is_some_and(|s| s.len() == 20)
        {
            std::fs::remove_file(path).unwrap();
        }
    }
    crate::meta::write_log_start(dir.path(), 80).unwrap();
    crate::meta::remove(dir.path(), crate::meta::CHECKPOINT).unwrap();
    let (log, _) = PartitionLog::open(dir.path(), small_config()).unwrap();
    assert_eq!(log.last_position(), None);
    assert_eq!((log.next_offset(), log.log_start_offset()), (80, 80));
}
