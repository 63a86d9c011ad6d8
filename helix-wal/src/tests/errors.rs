//! Every error of spec item 11 (and the other typed errors): each returns its
//! variant, nothing panics, and nothing already acknowledged is damaged.

use std::fs;

use super::support::*;
use crate::batch::{BatchError, build_test_batch};
use crate::fault::{self, Point};
use crate::{AppendCheck, Durability, LogConfig, PartitionLog, SyncGroup, WalError};

const ENOSPC: i32 = 28;
const EIO: i32 = 5;

/// A log holding three acknowledged entries, and their bytes.
fn log_with_data(dir: &std::path::Path, config: LogConfig) -> (PartitionLog, Vec<u8>) {
    let (mut log, _) = PartitionLog::open(dir, config).unwrap();
    let mut all = Vec::new();
    for i in 1..=3 {
        all.extend(append_batches(&mut log, pos(1, i), 1, 2, 0, 100));
    }
    (log, all)
}

fn assert_intact(log: &PartitionLog, all: &[u8]) {
    assert_eq!(log.next_offset(), 6);
    assert_eq!(log.last_position(), Some(pos(1, 3)));
    let r = log.reader().read(0, 1 << 20).unwrap();
    assert_eq!(&r.bytes[..], all);
}

fn log_file_len(dir: &std::path::Path) -> u64 {
    fs::metadata(crate::segment::log_path(dir, 0))
        .unwrap()
        .len()
}

#[test]
fn wrong_magic_is_rejected_without_writing() {
    let dir = tempfile::tempdir().unwrap();
    let (mut log, all) = log_with_data(dir.path(), LogConfig::default());
    let mut b = batch(6, 1, 0, 10);
    b[16] = 1;
    let len = log_file_len(dir.path());
    let err = log.append(pos(1, 4), &b).unwrap_err();
    assert!(matches!(
        err,
        WalError::InvalidBatch {
            at: 0,
            source: BatchError::BadMagic { magic: 1 }
        }
    ));
    assert_eq!(log_file_len(dir.path()), len);
    assert_intact(&log, &all);
    // The position was not consumed.
    append_batches(&mut log, pos(1, 4), 1, 1, 0, 10);
}

#[test]
fn a_bad_batch_after_a_good_one_writes_neither() {
    let dir = tempfile::tempdir().unwrap();
    let (mut log, all) = log_with_data(dir.path(), LogConfig::default());
    let mut entry = batch(6, 1, 0, 10);
    let mut bad = batch(7, 1, 0, 10);
    let last = bad.len() - 1;
    bad[last] ^= 0xff;
    entry.extend(bad.clone());
    let err = log.append(pos(1, 4), &entry).unwrap_err();
    assert!(matches!(
        err,
        WalError::InvalidBatch {
            source: BatchError::CrcMismatch { .. },
            ..
        }
    ));
    // Truncated input and a too-small length are typed too.
    let good = batch(6, 1, 0, 10);
    assert!(matches!(
        log.append(pos(1, 4), &good[..good.len() - 3]).unwrap_err(),
        WalError::InvalidBatch {
            source: BatchError::Truncated { .. },
            ..
        }
    ));
    assert!(matches!(
        log.append(pos(1, 4), &good[..20]).unwrap_err(),
        WalError::InvalidBatch {
            source: BatchError::ShortHeader { available: 20 },
            ..
        }
    ));
    assert_intact(&log, &all);
}

#[test]
fn crc_verified_by_caller_still_checks_structure_and_recovery_checks_the_crc() {
    let dir = tempfile::tempdir().unwrap();
    let (mut log, all) = log_with_data(dir.path(), LogConfig::default());
    let trusted = AppendCheck::CrcVerifiedByCaller;
    let good = batch(6, 1, 0, 10);
    let mut bad_magic = good.clone();
    bad_magic[16] = 1;
    let mut bad_delta = good.clone();
    bad_delta[23..27].copy_from_slice(&(-1i32).to_be_bytes());
    let structural = [
        &bad_magic[..],
        &good[..good.len() - 3],
        &good[..20],
        &bad_delta[..],
    ];
    for bytes in structural {
        assert!(
            matches!(
                log.append_checked(pos(1, 4), bytes, trusted).unwrap_err(),
                WalError::InvalidBatch { .. }
            ),
            "structure is checked in every mode"
        );
    }
    assert!(matches!(
        log.append_checked(pos(1, 4), &batch(7, 1, 0, 10), trusted)
            .unwrap_err(),
        WalError::NonContiguousOffset {
            expected: 6,
            found: 7,
            ..
        }
    ));
    assert_intact(&log, &all);
    // A bad CRC is the caller's responsibility here: written, then cut by
    // recovery, which verifies every CRC it re-reads.
    let mut bad_crc = good.clone();
    let last = bad_crc.len() - 1;
    bad_crc[last] ^= 0xff;
    assert!(log.append(pos(1, 4), &bad_crc).is_err(), "Full verifies it");
    let info = log.append_checked(pos(1, 4), &bad_crc, trusted).unwrap();
    assert_eq!(info.next_offset, 7);
    log.crash();
    let (log, rec) = PartitionLog::open(dir.path(), LogConfig::default()).unwrap();
    let cut = rec.truncated_tail.expect("recovery verifies the CRC");
    assert_eq!(cut.from_offset, 6);
    assert_intact(&log, &all);
}

#[test]
fn non_contiguous_offsets_are_rejected() {
    let dir = tempfile::tempdir().unwrap();
    let (mut log, all) = log_with_data(dir.path(), LogConfig::default());
    for base in [5, 7, 0] {
        let err = log.append(pos(1, 4), &batch(base, 1, 0, 10)).unwrap_err();
        assert!(
            matches!(err, WalError::NonContiguousOffset { expected: 6, found, .. } if found == base),
            "{err}"
        );
    }
    // Second batch of an entry must continue the first.
    let mut entry = batch(6, 2, 0, 10);
    entry.extend(batch(9, 1, 0, 10));
    assert!(matches!(
        log.append(pos(1, 4), &entry).unwrap_err(),
        WalError::NonContiguousOffset {
            expected: 8,
            found: 9,
            ..
        }
    ));
    assert_intact(&log, &all);
}

#[test]
fn non_contiguous_raft_positions_are_rejected() {
    let dir = tempfile::tempdir().unwrap();
    let (mut log, all) = log_with_data(dir.path(), LogConfig::default());
    for p in [pos(1, 3), pos(1, 5), pos(0, 4)] {
        assert!(matches!(
            log.append(p, &[]).unwrap_err(),
            WalError::NonContiguousPosition { .. }
        ));
    }
    assert_intact(&log, &all);
}

#[test]
fn reads_outside_the_log_are_out_of_range() {
    let dir = tempfile::tempdir().unwrap();
    let (mut log, _) = log_with_data(dir.path(), small_config());
    for i in 4..=40 {
        append_batches(&mut log, pos(1, i), 1, 1, 0, 300);
    }
    log.delete_records_before(10).unwrap();
    let r = log.reader();
    let end = r.next_offset();
    for offset in [-1, 9, end + 1, i64::MAX] {
        assert!(
            matches!(r.read(offset, 100), Err(WalError::OffsetOutOfRange { .. })),
            "offset {offset}"
        );
    }
    assert!(r.read(end, 100).unwrap().bytes.is_empty());
}

#[test]
fn enospc_during_a_write_leaves_acknowledged_data_and_no_torn_bytes() {
    let dir = tempfile::tempdir().unwrap();
    let (mut log, all) = log_with_data(dir.path(), LogConfig::default());
    let len = log_file_len(dir.path());
    fault::inject(dir.path(), Point::LogWrite, ENOSPC, 0, 1);
    let err = log.append(pos(1, 4), &batch(6, 1, 0, 1000)).unwrap_err();
    assert_eq!(err.raw_os_error(), Some(ENOSPC), "{err}");
    assert_eq!(
        log_file_len(dir.path()),
        len,
        "half-written bytes rolled back"
    );
    assert_intact(&log, &all);
    // Space is back: the same entry now goes in.
    let b = batch(6, 1, 0, 1000);
    log.append(pos(1, 4), &b).unwrap();
    drop(log);
    let (log, rec) = PartitionLog::open(dir.path(), LogConfig::default()).unwrap();
    assert_eq!(rec.truncated_tail, None);
    assert_eq!(&log.reader().read(6, 1).unwrap().bytes[..], &b[..]);
}

#[test]
fn eio_with_a_failed_rollback_stops_writes_and_recovery_cuts_the_tail() {
    let dir = tempfile::tempdir().unwrap();
    let (mut log, all) = log_with_data(dir.path(), LogConfig::default());
    fault::inject(dir.path(), Point::LogWrite, EIO, 0, 1);
    fault::inject(dir.path(), Point::Rollback, EIO, 0, 1);
    let err = log.append(pos(1, 4), &batch(6, 1, 0, 1000)).unwrap_err();
    assert_eq!(err.raw_os_error(), Some(EIO));
    // Writes are refused; reads of acknowledged data still work.
    assert!(matches!(
        log.append(pos(1, 4), &batch(6, 1, 0, 10)),
        Err(WalError::Failed { .. })
    ));
    assert_intact(&log, &all);
    drop(log);
    let (log, rec) = PartitionLog::open(dir.path(), LogConfig::default()).unwrap();
    let cut = rec.truncated_tail.expect("the half-written batch is cut");
    assert_eq!(cut.from_offset, 6);
    assert!(cut.bytes > 0);
    assert_intact(&log, &all);
}

#[test]
fn enospc_growing_the_entry_index_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let (mut log, _) = PartitionLog::open(dir.path(), LogConfig::default()).unwrap();
    for i in 1..=1024 {
        log.append(pos(1, i), &[]).unwrap();
    }
    let len = log_file_len(dir.path());
    fault::inject(dir.path(), Point::EntryIndexGrow, ENOSPC, 0, 1);
    let err = log.append(pos(1, 1025), &batch(0, 1, 0, 10)).unwrap_err();
    assert_eq!(err.raw_os_error(), Some(ENOSPC));
    assert_eq!(log_file_len(dir.path()), len);
    assert_eq!(log.next_offset(), 0);
    assert_eq!(log.last_position(), Some(pos(1, 1024)));
    log.append(pos(1, 1025), &batch(0, 1, 0, 10)).unwrap();
    assert_eq!(log.term_of(1025).unwrap(), Some(1));
}

#[test]
fn enospc_creating_a_segment_keeps_the_old_one_active() {
    let dir = tempfile::tempdir().unwrap();
    let (mut log, _) = PartitionLog::open(dir.path(), small_config()).unwrap();
    let a = append_batches(&mut log, pos(1, 1), 1, 1, 0, 3000);
    fault::inject(dir.path(), Point::Roll, ENOSPC, 0, 1);
    let err = log.append(pos(1, 2), &batch(1, 1, 0, 3000)).unwrap_err();
    assert_eq!(err.raw_os_error(), Some(ENOSPC));
    assert_eq!(log.shared.snapshot().len(), 1);
    assert_eq!(&log.reader().read(0, 1).unwrap().bytes[..], &a[..]);
    append_batches(&mut log, pos(1, 2), 1, 1, 0, 3000);
    assert_eq!(log.shared.snapshot().len(), 2);
}

#[test]
fn eio_on_fsync_fails_the_round_and_freezes_the_durable_position() {
    let dir = tempfile::tempdir().unwrap();
    let group = SyncGroup::new();
    let config = LogConfig {
        durability: Durability::Fsync,
        sync_group: Some(group.clone()),
        ..LogConfig::default()
    };
    let (mut log, all) = log_with_data(dir.path(), config.clone());
    log.sync().unwrap();
    assert_eq!(log.durable_position(), Some(pos(1, 3)));
    append_batches(&mut log, pos(1, 4), 1, 1, 0, 10);
    fault::inject(dir.path(), Point::Sync, EIO, 0, 1);
    let err = log.sync().unwrap_err();
    assert_eq!(err.raw_os_error(), Some(EIO), "{err}");
    assert_eq!(log.durable_position(), Some(pos(1, 3)));
    assert!(matches!(
        log.append(pos(1, 5), &batch(7, 1, 0, 10)),
        Err(WalError::Failed { .. })
    ));
    let r = log.reader().read(0, 1 << 20).unwrap();
    assert_eq!(&r.bytes[..all.len()], &all[..]);
    drop(log);
    fault::clear(dir.path());
    let (log, _) = PartitionLog::open(dir.path(), config).unwrap();
    assert_eq!(log.last_position(), Some(pos(1, 4)));
}

#[test]
fn corruption_before_the_tail_is_refused_with_file_and_position() {
    let dir = tempfile::tempdir().unwrap();
    let mut all = Vec::new();
    {
        let (mut log, _) = PartitionLog::open(dir.path(), small_config()).unwrap();
        for i in 1..=30 {
            all.push(append_batches(&mut log, pos(1, i), 1, 1, 0, 300));
        }
        log.close().unwrap();
    }
    // Flip a payload bit of the third batch of the first (sealed) segment.
    let path = crate::segment::log_path(dir.path(), 0);
    let mut raw = fs::read(&path).unwrap();
    let third = (all[0].len() + all[1].len()) as u64;
    raw[third as usize + 100] ^= 0x04;
    fs::write(&path, raw).unwrap();
    let (log, rec) = PartitionLog::open(dir.path(), small_config()).unwrap();
    assert_eq!(rec.truncated_tail, None, "not a torn tail: nothing is cut");
    let r = log.reader();
    assert_eq!(&r.read(0, 1).unwrap().bytes[..], &all[0][..]);
    assert_eq!(&r.read(1, 1).unwrap().bytes[..], &all[1][..]);
    match r.read(2, 1) {
        Err(WalError::Corrupt { file, position, .. }) => {
            assert_eq!(file, path);
            assert_eq!(position, third);
        }
        other => panic!("expected Corrupt, got {other:?}"),
    }
    // A read that starts before the damage stops at it.
    let before = r.read(0, 1 << 20).unwrap();
    assert_eq!(before.next_offset, 2);
    // Later segments are unaffected.
    assert_eq!(&r.read(29, 1).unwrap().bytes[..], &all[29][..]);
}

#[test]
fn truncate_below_the_first_held_entry_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let (mut log, _) = PartitionLog::open(dir.path(), small_config()).unwrap();
    log.append(pos(1, 10), &batch(0, 1, 0, 10)).unwrap();
    log.append(pos(1, 11), &batch(1, 1, 0, 10)).unwrap();
    assert!(matches!(
        log.truncate_after(5),
        Err(WalError::TruncateBelowStart {
            index: 5,
            first_index: 10
        })
    ));
    log.truncate_after(9).unwrap();
    assert_eq!(log.last_position(), None);
    assert_eq!(log.next_offset(), 0);
}

#[test]
fn invalid_configuration_is_rejected() {
    let dir = tempfile::tempdir().unwrap();
    for config in [
        LogConfig {
            segment_bytes: 0,
            ..LogConfig::default()
        },
        LogConfig {
            segment_bytes: crate::MAX_SEGMENT_BYTES + 1,
            ..LogConfig::default()
        },
        LogConfig {
            index_interval_bytes: 0,
            ..LogConfig::default()
        },
    ] {
        assert!(matches!(
            PartitionLog::open(dir.path(), config),
            Err(WalError::InvalidConfig(_))
        ));
    }
}

#[test]
fn patching_a_produced_batch_keeps_it_appendable() {
    let dir = tempfile::tempdir().unwrap();
    let (mut log, _) = PartitionLog::open(dir.path(), LogConfig::default()).unwrap();
    let mut b = build_test_batch(0, 3, 5, 7, b"client-bytes");
    crate::patch_batch_header(&mut b, 0, 4).unwrap();
    log.append(pos(4, 1), &b).unwrap();
    let mut c = build_test_batch(0, 1, 5, 7, b"more");
    crate::patch_batch_header(&mut c, 3, 4).unwrap();
    log.append(pos(4, 2), &c).unwrap();
    assert_eq!(log.next_offset(), 4);
    let h = crate::BatchHeader::parse(&log.reader().read(3, 1).unwrap().bytes).unwrap();
    assert_eq!((h.base_offset, h.partition_leader_epoch), (3, 4));
}

#[test]
fn a_sealed_entry_index_with_untrimmed_slots_still_loads() {
    let dir = tempfile::tempdir().unwrap();
    let mut all = Vec::new();
    {
        let (mut log, _) = PartitionLog::open(dir.path(), small_config()).unwrap();
        for i in 1..=30 {
            all.push(append_batches(&mut log, pos(1, i), 1, 1, 0, 300));
        }
        log.close().unwrap();
    }
    // As if the trim at seal was lost: zero slots after the records.
    let path = crate::entry_index::path_for(dir.path(), 0);
    let len = fs::metadata(&path).unwrap().len();
    fs::OpenOptions::new()
        .write(true)
        .open(&path)
        .unwrap()
        .set_len(len + 10 * crate::entry_index::RECORD_LEN as u64)
        .unwrap();
    let (log, rec) = PartitionLog::open(dir.path(), small_config()).unwrap();
    assert!(rec.damaged.is_empty(), "{:?}", rec.damaged);
    assert_eq!(log.term_of(1).unwrap(), Some(1));
    assert_eq!(&log.reader().read(0, 1).unwrap().bytes[..], &all[0][..]);
}

/// Issue 18: after a clean close every byte is flushed and the checkpoint
/// says so; bytes missing from that range are damage, not a torn tail.
#[test]
fn damage_inside_a_flushed_checkpoint_is_refused_not_cut() {
    let dir = tempfile::tempdir().unwrap();
    let (log, _) = log_with_data(dir.path(), LogConfig::default());
    log.close().unwrap();
    let path = crate::segment::log_path(dir.path(), 0);
    let before = fs::read(&path).unwrap();
    let cut = before.len() as u64 - 100;
    fs::OpenOptions::new()
        .write(true)
        .open(&path)
        .unwrap()
        .set_len(cut)
        .unwrap();
    match PartitionLog::open(dir.path(), LogConfig::default()) {
        Err(WalError::Corrupt { file, position, .. }) => {
            assert_eq!(file, path);
            assert_eq!(position, cut, "where the file stops agreeing");
        }
        Err(e) => panic!("expected Corrupt, got {e:?}"),
        Ok(_) => panic!("a log missing flushed bytes was opened"),
    }
    assert_eq!(log_file_len(dir.path()), cut, "nothing was cut on the way");

    // The same for a damaged entry record inside the flushed range.
    fs::write(&path, &before).unwrap();
    let entries = crate::entry_index::path_for(dir.path(), 0);
    let mut raw = fs::read(&entries).unwrap();
    let last_slot = 2 * crate::entry_index::RECORD_LEN;
    raw[last_slot + 3] ^= 0x10;
    fs::write(&entries, &raw).unwrap();
    assert!(matches!(
        PartitionLog::open(dir.path(), LogConfig::default()),
        Err(WalError::Corrupt { .. })
    ));
    assert_eq!(fs::read(&path).unwrap(), before, "the log is untouched");
}

/// A crash in `ReplicationOnly` may lose bytes past the last flush: the
/// periodic checkpoint does not claim them flushed, so a torn tail there is
/// still cut back to the last whole entry.
#[test]
fn a_torn_tail_past_an_unflushed_checkpoint_is_still_cut() {
    let dir = tempfile::tempdir().unwrap();
    let config = LogConfig {
        checkpoint_interval_bytes: 1,
        ..LogConfig::default()
    };
    let (log, all) = log_with_data(dir.path(), config.clone());
    log.crash();
    let path = crate::segment::log_path(dir.path(), 0);
    let len = log_file_len(dir.path());
    fs::OpenOptions::new()
        .write(true)
        .open(&path)
        .unwrap()
        .set_len(len - 10)
        .unwrap();
    let (log, rec) = PartitionLog::open(dir.path(), config).unwrap();
    let cut = rec.truncated_tail.expect("the torn last entry is cut");
    assert_eq!(cut.from_offset, 4);
    assert_eq!(log.next_offset(), 4);
    let r = log.reader().read(0, 1 << 20).unwrap();
    assert_eq!(&r.bytes[..], &all[..r.bytes.len()]);
}

#[test]
fn a_reverify_finds_damage_in_bytes_this_process_already_verified() {
    let dir = tempfile::tempdir().unwrap();
    let (mut log, _) = PartitionLog::open(dir.path(), small_config()).unwrap();
    let mut all = Vec::new();
    for i in 1..=30 {
        all.push(append_batches(&mut log, pos(1, i), 1, 1, 0, 300));
    }
    let r = log.reader();
    let path = crate::segment::log_path(dir.path(), 0);
    assert!(r.reverify(0, 1 << 20).is_ok(), "undamaged");
    assert_eq!(&r.read(2, 1).unwrap().bytes[..], &all[2][..]);
    // The stored bytes rot after this process verified them.
    let third = (all[0].len() + all[1].len()) as u64;
    let mut raw = fs::read(&path).unwrap();
    raw[third as usize + 100] ^= 0x04;
    fs::write(&path, raw).unwrap();
    match r.reverify(0, 1 << 20) {
        Err(WalError::Corrupt { file, position, .. }) => {
            assert_eq!(file, path);
            assert_eq!(position, third);
        }
        other => panic!("expected Corrupt, got {other:?}"),
    }
    // Recorded: ordinary reads now stop before the damage too.
    assert!(matches!(r.read(2, 1), Err(WalError::Corrupt { .. })));
    assert_eq!(r.read(0, 1 << 20).unwrap().next_offset, 2);
    assert_eq!(&r.read(29, 1).unwrap().bytes[..], &all[29][..]);
}
