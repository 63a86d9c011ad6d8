use super::*;

const NOW: i64 = 10_000_000;

/// Segments at `bases` (the last one active), 100 bytes each, all written
/// at `ts`.
fn segments(bases: &[i64], ts: i64) -> Vec<SegmentSummary> {
    bases
        .iter()
        .map(|&base_offset| SegmentSummary {
            base_offset,
            bytes: 100,
            max_timestamp: ts,
            first_batch_timestamp: ts,
        })
        .collect()
}

fn positions(checkpoint: Option<i64>) -> LogPositions {
    LogPositions {
        log_start_offset: 0,
        log_end_offset: 450,
        checkpoint,
        last_stable_offset: 450,
        high_watermark: 450,
    }
}

#[test]
fn the_active_segment_is_never_cleanable() {
    let segs = segments(&[0, 100, 200, 300, 400], NOW - 1000);
    let c = CompactionConfig::default();
    let ltc = log_to_clean(&segs, &positions(None), &c, NOW).unwrap();
    assert_eq!(
        (ltc.first_dirty_offset, ltc.first_uncleanable_offset),
        (0, 400)
    );
    assert_eq!((ltc.clean_bytes, ltc.cleanable_bytes), (0, 400));
    assert!(ltc.should_clean(&c));
    let single = segments(&[0], NOW);
    let ltc = log_to_clean(&single, &positions(None), &c, NOW).unwrap();
    assert_eq!(ltc.cleanable_bytes, 0);
    assert!(!ltc.should_clean(&c));
}

#[test]
fn the_lso_and_the_high_watermark_stop_the_range_at_their_segment() {
    let segs = segments(&[0, 100, 200, 300, 400], NOW - 1000);
    let c = CompactionConfig::default();
    let mut p = positions(None);
    p.last_stable_offset = 250;
    let ltc = log_to_clean(&segs, &p, &c, NOW).unwrap();
    assert_eq!(
        ltc.first_uncleanable_offset, 200,
        "the segment holding the LSO"
    );
    p.last_stable_offset = 450;
    p.high_watermark = 100;
    let ltc = log_to_clean(&segs, &p, &c, NOW).unwrap();
    assert_eq!(ltc.first_uncleanable_offset, 100);
}

#[test]
fn the_dirty_ratio_counts_cleaned_and_dirty_segments() {
    let segs = segments(&[0, 100, 200, 300, 400], NOW - 1000);
    let c = CompactionConfig::default();
    let ltc = log_to_clean(&segs, &positions(Some(200)), &c, NOW).unwrap();
    assert_eq!((ltc.clean_bytes, ltc.cleanable_bytes), (200, 200));
    assert_eq!(ltc.cleanable_ratio, 0.5);
    assert!(
        !ltc.should_clean(&c),
        "Kafka cleans above the ratio, not at it"
    );
    let ltc = log_to_clean(&segs, &positions(Some(100)), &c, NOW).unwrap();
    assert!(ltc.cleanable_ratio > 0.5 && ltc.should_clean(&c));
}

#[test]
fn min_compaction_lag_keeps_young_segments_out() {
    let mut segs = segments(&[0, 100, 200, 300, 400], NOW - 10_000);
    segs[2].max_timestamp = NOW - 10;
    let c = CompactionConfig {
        min_compaction_lag_ms: 1000,
        ..CompactionConfig::default()
    };
    let ltc = log_to_clean(&segs, &positions(None), &c, NOW).unwrap();
    assert_eq!(ltc.first_uncleanable_offset, 200);
}

#[test]
fn max_compaction_lag_forces_a_clean_below_the_ratio() {
    let segs = segments(&[0, 100, 200, 300, 400], NOW - 10_000);
    let lax = CompactionConfig::default();
    let ltc = log_to_clean(&segs, &positions(Some(300)), &lax, NOW).unwrap();
    assert!(!ltc.should_clean(&lax));
    let strict = CompactionConfig {
        max_compaction_lag_ms: 5_000,
        ..CompactionConfig::default()
    };
    let ltc = log_to_clean(&segs, &positions(Some(300)), &strict, NOW).unwrap();
    assert!(ltc.need_compaction_now && ltc.should_clean(&strict));
}

#[test]
fn a_checkpoint_outside_the_log_is_reset_to_its_start() {
    let segs = segments(&[0, 100, 200], NOW);
    let c = CompactionConfig::default();
    for bad in [-5, 10_000] {
        let mut p = positions(Some(bad));
        p.log_end_offset = 250;
        let ltc = log_to_clean(&segs, &p, &c, NOW).unwrap();
        assert_eq!(ltc.first_dirty_offset, 0);
        assert!(ltc.checkpoint_reset);
    }
}
