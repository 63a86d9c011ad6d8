//! Cleaning transactional data: aborted records go first, markers after
//! their horizon, committed records are compacted like any others.

use super::*;

/// `batch` marked transactional (attribute 0x10), CRC fixed.
fn transactional(mut batch: Vec<u8>) -> Vec<u8> {
    batch[22] |= 0x10;
    let crc = helix_wal::batch::compute_crc(&batch);
    batch[17..21].copy_from_slice(&crc.to_be_bytes());
    batch
}

/// The control batch of producer 9 (epoch 0) at `offset`.
fn marker_at(offset: i64, commit: bool) -> Vec<u8> {
    let mut b = control_batch(&Marker {
        producer_id: 9,
        producer_epoch: 0,
        commit,
        coordinator_epoch: 4,
        timestamp: 1000 + offset,
    });
    helix_wal::patch_batch_header(&mut b, offset, 3).unwrap();
    b
}

fn is_marker(b: &[u8]) -> bool {
    BatchHeader::parse(b).unwrap().is_control()
}

#[test]
fn aborted_data_goes_first_and_its_marker_after_the_horizon() {
    let input = concat(&[
        batch_of(0, &[(Some("a"), Some("a0"))], -1),
        transactional(batch_of(1, &[(Some("a"), Some("aborted"))], 9)),
        marker_at(2, false),
    ]);
    let aborted = [AbortedTxn {
        producer_id: 9,
        first_offset: 1,
        last_offset: 2,
    }];
    let derived = DerivedState {
        aborted: &aborted,
        producers: None,
    };
    let mut map = KeyMap::with_capacity_bytes(1 << 20, 0.9);
    let mapped = build_key_map(&input, 3, &aborted, &mut map).unwrap();
    assert_eq!(map.get(b"a"), Some(0), "aborted keys are not mapped");
    // Pass 1: the aborted batch goes; its marker stays (batches were seen).
    let (once, _) = clean(&input, &map, &horizons(mapped.end), &derived).unwrap();
    assert_eq!(contents(&once[..1]), vec![at(0, kv("a", "a0"))]);
    assert_eq!(once.len(), 2);
    assert_eq!(&once[1][..], &marker_at(2, false)[..]);
    // Pass 2: nothing of the transaction is left: the marker gets a horizon
    // and still reads as the same marker.
    let input = once.concat();
    let (twice, _) = clean(&input, &map, &horizons(3), &derived).unwrap();
    assert_eq!(twice.len(), 2);
    let h = BatchHeader::parse(&twice[1]).unwrap();
    assert_eq!(h.delete_horizon_ms(), Some(NOW + RETENTION));
    let m = read_marker(&twice[1]).expect("still a marker");
    assert_eq!(
        (m.producer_id, m.commit, m.coordinator_epoch),
        (9, false, 4)
    );
    // Pass 3, after the horizon: the marker goes, unless it carries the
    // producer's last epoch.
    let input = twice.concat();
    let later = Horizons {
        now_ms: NOW + RETENTION,
        ..horizons(3)
    };
    let (thrice, _) = clean(&input, &map, &later, &derived).unwrap();
    assert_eq!(thrice.len(), 1);
    assert!(!is_marker(&thrice[0]));
    let producers = HashMap::from([(
        9,
        LastBatch {
            last_data_offset: None,
            epoch: 0,
        },
    )]);
    let tracked = DerivedState {
        aborted: &aborted,
        producers: Some(&producers),
    };
    let (kept, _) = clean(&input, &map, &later, &tracked).unwrap();
    assert_eq!(kept.len(), 2);
    let empty = BatchHeader::parse_checked(&kept[1]).unwrap();
    assert!(empty.is_control());
    assert_eq!((empty.base_offset, empty.record_count), (2, 0));
}

#[test]
fn committed_transactional_records_are_compacted_and_their_marker_outlives_them() {
    let input = concat(&[
        transactional(batch_of(0, &[(Some("a"), Some("a0"))], 9)),
        marker_at(1, true),
        batch_of(2, &[(Some("a"), Some("a1"))], -1),
    ]);
    let (map, mapped) = map_all(&input, 3);
    assert_eq!(map.get(b"a"), Some(2));
    let (once, _) = clean(
        &input,
        &map,
        &horizons(mapped.end),
        &DerivedState::default(),
    )
    .unwrap();
    // a0 is superseded; the marker stays this pass (its batch was seen).
    assert_eq!(once.len(), 2);
    assert_eq!(&once[0][..], &marker_at(1, true)[..]);
    let (twice, _) = clean(&once.concat(), &map, &horizons(3), &DerivedState::default()).unwrap();
    let h = BatchHeader::parse(&twice[0]).unwrap();
    assert!(h.is_control());
    assert_eq!(h.delete_horizon_ms(), Some(NOW + RETENTION));
}
