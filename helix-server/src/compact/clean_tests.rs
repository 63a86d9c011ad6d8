use bytes::{Bytes, BytesMut};
use helix_wal::batch::{BatchHeader, Batches, verify_crc};
use kafka_protocol::records::{
    Compression, Record, RecordBatchDecoder, RecordBatchEncoder, RecordEncodeOptions, TimestampType,
};

use super::*;
use crate::replica::markers::{Marker, control_batch, read_marker};
use crate::replica::recompress::{TopicCompression, recompress};

const NOW: i64 = 1_000_000;
const RETENTION: i64 = 86_400_000;

/// (key, value); None is a null key / a tombstone.
pub(crate) type Kv<'a> = (Option<&'a str>, Option<&'a str>);

/// A v2 batch of `kvs` at offsets `base..`, timestamps `1000 + offset`.
pub(crate) fn batch_of(base: i64, kvs: &[Kv<'_>], producer_id: i64) -> Vec<u8> {
    let records: Vec<Record> = kvs
        .iter()
        .enumerate()
        .map(|(i, (k, v))| Record {
            transactional: false,
            control: false,
            delete_horizon: false,
            partition_leader_epoch: 3,
            producer_id,
            producer_epoch: if producer_id < 0 { -1 } else { 0 },
            timestamp_type: TimestampType::Creation,
            offset: base + i as i64,
            // One batch: the encoder splits where offset - sequence changes;
            // without a producer only the first record's -1 is written.
            sequence: if producer_id < 0 { -1 } else { base as i32 } + i as i32,
            timestamp: 1000 + base + i as i64,
            key: k.map(|k| Bytes::copy_from_slice(k.as_bytes())),
            value: v.map(|v| Bytes::copy_from_slice(v.as_bytes())),
            headers: Default::default(),
        })
        .collect();
    let mut buf = BytesMut::new();
    let options = RecordEncodeOptions {
        version: 2,
        compression: Compression::None,
    };
    RecordBatchEncoder::encode(&mut buf, records.iter(), &options).expect("encode");
    buf.to_vec()
}

fn compressed(batch: Vec<u8>, codec: TopicCompression) -> Vec<u8> {
    recompress(&Bytes::from(batch), codec, usize::MAX)
        .expect("compress")
        .to_vec()
}

fn concat(batches: &[Vec<u8>]) -> Vec<u8> {
    batches.concat()
}

/// Every record of `batches` as (offset, key, value), any codec.
pub(crate) fn contents(batches: &[Bytes]) -> Vec<(i64, Option<String>, Option<String>)> {
    let mut out = Vec::new();
    for b in batches {
        verify_crc(b).expect("crc");
        let h = BatchHeader::parse_checked(b).expect("header");
        let section = records_section(b, MAX_RECORDS_SECTION).expect("section");
        let records = split_records(&section).expect("records");
        assert_eq!(records.len(), h.record_count as usize);
        for r in records {
            let text = |s: &[u8]| String::from_utf8(s.to_vec()).expect("utf8");
            let value = r.value.map(text);
            out.push((
                h.base_offset + i64::from(r.offset_delta),
                r.key.map(text),
                value,
            ));
        }
    }
    out
}

fn horizons(clean_below: i64) -> Horizons {
    Horizons {
        clean_below,
        now_ms: NOW,
        delete_retention_ms: RETENTION,
    }
}

fn map_all(input: &[u8], upper: i64) -> (KeyMap, Mapped) {
    let mut map = KeyMap::with_capacity_bytes(1 << 20, 0.9);
    let mapped = build_key_map(input, upper, &[], &mut map).expect("map");
    (map, mapped)
}

fn kv(k: &str, v: &str) -> (i64, Option<String>, Option<String>) {
    (0, Some(k.to_string()), Some(v.to_string()))
}

fn at(
    offset: i64,
    r: (i64, Option<String>, Option<String>),
) -> (i64, Option<String>, Option<String>) {
    (offset, r.1, r.2)
}

#[test]
fn the_latest_value_per_key_survives_at_its_original_offset() {
    let input = concat(&[
        batch_of(0, &[(Some("a"), Some("a0")), (Some("b"), Some("b0"))], -1),
        batch_of(2, &[(Some("a"), Some("a1")), (Some("c"), Some("c0"))], -1),
        batch_of(4, &[(Some("b"), Some("b1"))], -1),
    ]);
    let (map, mapped) = map_all(&input, 100);
    assert_eq!(
        mapped,
        Mapped {
            end: 5,
            full: false
        }
    );
    let (out, stats) = clean(
        &input,
        &map,
        &horizons(mapped.end),
        &DerivedState::default(),
    )
    .unwrap();
    assert_eq!(
        contents(&out),
        vec![
            at(2, kv("a", "a1")),
            at(3, kv("c", "c0")),
            at(4, kv("b", "b1"))
        ]
    );
    assert_eq!(stats.records_removed, 2);
    assert_eq!(
        stats.batches_dropped, 1,
        "the first batch lost every record"
    );
    // Batches keep their offsets range: base offset and lastOffsetDelta.
    let ranges: Vec<_> = out
        .iter()
        .map(|b| {
            let h = BatchHeader::parse(b).unwrap();
            (h.base_offset, h.last_offset())
        })
        .collect();
    assert_eq!(ranges, vec![(2, 3), (4, 4)]);
}

#[test]
fn offsets_stay_strictly_increasing_across_the_output() {
    let mut batches = Vec::new();
    for i in 0..40i64 {
        let key = format!("k{}", i % 7);
        let value = format!("v{i}");
        batches.push(batch_of(
            i * 3,
            &[
                (Some(&key), Some(&value)),
                (Some("hot"), Some(&value)),
                (Some(&format!("u{i}")), Some("x")),
            ],
            -1,
        ));
    }
    let input = concat(&batches);
    let (map, mapped) = map_all(&input, 120);
    let (out, _) = clean(
        &input,
        &map,
        &horizons(mapped.end),
        &DerivedState::default(),
    )
    .unwrap();
    let offsets: Vec<i64> = contents(&out).iter().map(|r| r.0).collect();
    assert!(offsets.windows(2).all(|w| w[0] < w[1]), "{offsets:?}");
    let mut prev_end = i64::MIN;
    for b in Batches::new(&out.concat()) {
        let (h, _) = b.unwrap();
        assert!(h.base_offset >= prev_end);
        prev_end = h.next_offset();
    }
    // 7 + 1 + 40 live keys, each once.
    assert_eq!(offsets.len(), 48);
}

#[test]
fn a_tombstone_gets_a_delete_horizon_and_goes_after_it() {
    let input = concat(&[
        batch_of(0, &[(Some("a"), Some("a0")), (Some("b"), Some("b0"))], -1),
        batch_of(2, &[(Some("a"), None)], -1),
    ]);
    let (map, mapped) = map_all(&input, 3);
    let (out, _) = clean(
        &input,
        &map,
        &horizons(mapped.end),
        &DerivedState::default(),
    )
    .unwrap();
    assert_eq!(
        contents(&out),
        vec![at(1, kv("b", "b0")), (2, Some("a".into()), None)]
    );
    let h = BatchHeader::parse(&out[1]).unwrap();
    assert_eq!(h.delete_horizon_ms(), Some(NOW + RETENTION));
    // The record's timestamp is unchanged: Kafka's decoder reads it off
    // the rebased delta.
    let set = RecordBatchDecoder::decode(&mut out[1].clone()).unwrap();
    assert_eq!(set.records[0].timestamp, 1002);
    assert_eq!(set.records[0].offset, 2);
    assert!(set.records[0].value.is_none());

    // Before the horizon: the tombstone stays, the batch is not rewritten.
    let again = out.concat();
    let (map, _) = map_all(&again, 3);
    let before = Horizons {
        now_ms: NOW + RETENTION - 1,
        ..horizons(3)
    };
    let (kept, _) = clean(&again, &map, &before, &DerivedState::default()).unwrap();
    assert_eq!(kept, out);
    // At the horizon: it goes, and its emptied batch with it.
    let after = Horizons {
        now_ms: NOW + RETENTION,
        ..horizons(3)
    };
    let (gone, stats) = clean(&again, &map, &after, &DerivedState::default()).unwrap();
    assert_eq!(contents(&gone), vec![at(1, kv("b", "b0"))]);
    assert_eq!(stats.batches_dropped, 1);
}

#[test]
fn nothing_at_or_above_the_clean_bound_is_touched() {
    let input = concat(&[
        batch_of(0, &[(Some("a"), Some("a0"))], -1),
        batch_of(1, &[(Some("a"), Some("a1")), (Some("a"), None)], -1),
        batch_of(3, &[(None, Some("keyless"))], -1),
    ]);
    // The map reaches 3; the batch at 3 is above the bound.
    let (map, mapped) = map_all(&input, 3);
    assert_eq!(mapped.end, 3);
    let (out, _) = clean(&input, &map, &horizons(1), &DerivedState::default()).unwrap();
    // Only offset 0 was below the bound; it is superseded. The rest stays
    // byte for byte, keyless record and tombstone included.
    assert_eq!(out.len(), 2);
    assert_eq!(
        &out[0][..],
        &batch_of(1, &[(Some("a"), Some("a1")), (Some("a"), None)], -1)[..]
    );
    assert_eq!(
        &out[1][..],
        &batch_of(3, &[(None, Some("keyless"))], -1)[..]
    );
}

#[test]
fn a_full_key_map_ends_the_cleanable_range_at_a_batch_boundary() {
    let input = concat(&[
        batch_of(0, &[(Some("a"), Some("a0")), (Some("b"), Some("b0"))], -1),
        batch_of(2, &[(Some("a"), Some("a1")), (Some("c"), Some("c0"))], -1),
        batch_of(4, &[(Some("b"), Some("b1"))], -1),
    ]);
    // Room for two keys: "c" at offset 3 does not fit.
    let mut map = KeyMap::with_capacity_bytes(2 * KeyMap::BYTES_PER_KEY, 1.0);
    let mapped = build_key_map(&input, 100, &[], &mut map).unwrap();
    assert_eq!(mapped, Mapped { end: 2, full: true });
    let (out, _) = clean(
        &input,
        &map,
        &horizons(mapped.end),
        &DerivedState::default(),
    )
    .unwrap();
    // a0 goes (a1 at 2 is mapped and stays, being past the end); b0 stays:
    // b1 was never mapped. Everything from 2 on is as it was.
    assert_eq!(
        contents(&out),
        vec![
            at(1, kv("b", "b0")),
            at(2, kv("a", "a1")),
            at(3, kv("c", "c0")),
            at(4, kv("b", "b1")),
        ]
    );
    assert_eq!(
        out[1..].concat(),
        input[BatchHeader::parse(&input).unwrap().total_len()..]
    );
}

#[test]
fn a_record_without_a_key_is_removed_and_counted() {
    let input = concat(&[
        batch_of(0, &[(None, Some("old")), (Some("a"), Some("a0"))], -1),
        batch_of(2, &[(Some("b"), Some("b0"))], -1),
    ]);
    let (map, mapped) = map_all(&input, 3);
    let (out, stats) = clean(
        &input,
        &map,
        &horizons(mapped.end),
        &DerivedState::default(),
    )
    .unwrap();
    assert_eq!(
        contents(&out),
        vec![at(1, kv("a", "a0")), at(2, kv("b", "b0"))]
    );
    assert_eq!(stats.keyless_removed, 1);
}

#[test]
fn the_last_batch_of_a_tracked_producer_is_kept_empty() {
    let input = concat(&[
        batch_of(0, &[(Some("a"), Some("a0"))], 7),
        batch_of(1, &[(Some("b"), Some("b0"))], 8),
        batch_of(2, &[(Some("a"), Some("a1")), (Some("b"), Some("b1"))], -1),
    ]);
    let (map, mapped) = map_all(&input, 4);
    // Producer 7's last batch ends at 0; producer 8 is no longer tracked.
    let producers = HashMap::from([(
        7,
        LastBatch {
            last_data_offset: Some(0),
            epoch: 0,
        },
    )]);
    let derived = DerivedState {
        aborted: &[],
        producers: Some(&producers),
    };
    let (out, _) = clean(&input, &map, &horizons(mapped.end), &derived).unwrap();
    assert_eq!(out.len(), 2);
    let empty = BatchHeader::parse_checked(&out[0]).unwrap();
    assert_eq!(
        (empty.base_offset, empty.last_offset(), empty.record_count),
        (0, 0, 0)
    );
    assert_eq!((empty.producer_id, empty.base_sequence), (7, 0));
    verify_crc(&out[0]).unwrap();
    assert_eq!(
        contents(&out),
        vec![at(2, kv("a", "a1")), at(3, kv("b", "b1"))]
    );
}

#[test]
fn compressed_batches_are_cleaned_and_stay_in_their_codec() {
    for codec in [
        TopicCompression::Gzip(-1),
        TopicCompression::Snappy,
        TopicCompression::Lz4(9),
        TopicCompression::Zstd(3),
    ] {
        let input = concat(&[
            compressed(
                batch_of(0, &[(Some("a"), Some("a0")), (Some("b"), Some("b0"))], -1),
                codec,
            ),
            compressed(
                batch_of(2, &[(Some("a"), Some("a1")), (Some("b"), None)], -1),
                codec,
            ),
        ]);
        let (map, mapped) = map_all(&input, 4);
        let (out, _) = clean(
            &input,
            &map,
            &horizons(mapped.end),
            &DerivedState::default(),
        )
        .unwrap();
        assert_eq!(
            contents(&out),
            vec![at(2, kv("a", "a1")), (3, Some("b".into()), None)],
            "{codec:?}"
        );
        let input_codec = BatchHeader::parse(&input).unwrap().compression();
        for b in &out {
            assert_eq!(BatchHeader::parse(b).unwrap().compression(), input_codec);
        }
    }
}

#[test]
fn the_same_input_gives_byte_identical_output() {
    let run = || {
        let mut batches = Vec::new();
        for i in 0..30i64 {
            let k = format!("k{}", i % 5);
            let v = (i % 4 != 0).then(|| format!("v{i}"));
            let b = batch_of(
                i * 2,
                &[(Some(&k), v.as_deref()), (Some("z"), Some("zz"))],
                -1,
            );
            batches.push(if i % 2 == 0 {
                compressed(b, TopicCompression::Zstd(3))
            } else {
                b
            });
        }
        let input = concat(&batches);
        let (map, mapped) = map_all(&input, 50);
        clean(
            &input,
            &map,
            &horizons(mapped.end),
            &DerivedState::default(),
        )
        .unwrap()
        .0
        .concat()
    };
    assert_eq!(run(), run());
}

mod model {
    //! The cleaning step against a model: the first pass over random keyed
    //! batches keeps exactly the latest mapped record per key (tombstones
    //! included, their horizon not yet set), everything past the mapped
    //! end as it was, at the original offsets.
    use std::collections::HashMap;

    use proptest::prelude::*;

    use super::*;

    /// (key index or None, value or tombstone) per record; batches of 1-4.
    fn batches() -> impl Strategy<Value = Vec<Vec<(Option<u8>, bool)>>> {
        let record = (
            prop::option::weighted(0.95, 0u8..6),
            prop::bool::weighted(0.85),
        );
        prop::collection::vec(prop::collection::vec(record, 1..5), 1..25)
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(200))]
        #[test]
        fn the_first_pass_keeps_the_latest_mapped_record_per_key(
            spec in batches(),
            map_keys in 1usize..8,
            cut in 0usize..30,
            gzip in any::<bool>(),
        ) {
            let mut input = Vec::new();
            let mut all = Vec::new();
            let mut offset = 0i64;
            for (bi, records) in spec.iter().enumerate() {
                let kvs: Vec<(Option<String>, Option<String>)> = records
                    .iter()
                    .enumerate()
                    .map(|(i, (k, v))| {
                        (k.map(|k| format!("k{k}")), v.then(|| format!("v{bi}.{i}")))
                    })
                    .collect();
                let refs: Vec<Kv<'_>> =
                    kvs.iter().map(|(k, v)| (k.as_deref(), v.as_deref())).collect();
                let b = batch_of(offset, &refs, -1);
                input.push(if gzip && bi % 2 == 0 {
                    compressed(b, TopicCompression::Gzip(-1))
                } else {
                    b
                });
                for (i, (k, v)) in kvs.into_iter().enumerate() {
                    all.push((offset + i as i64, k, v));
                }
                offset += records.len() as i64;
            }
            let upper = all.get(cut).map_or(offset, |r| r.0);
            let input = input.concat();
            let mut map = KeyMap::with_capacity_bytes(map_keys * KeyMap::BYTES_PER_KEY, 1.0);
            let mapped = build_key_map(&input, upper, &[], &mut map).unwrap();
            prop_assert!(mapped.end <= upper);
            let (out, stats) =
                clean(&input, &map, &horizons(mapped.end), &DerivedState::default()).unwrap();

            // The model: the map takes keyed records in order until the
            // range ends or a new key finds it full (then the batch being
            // mapped is partly in it, past the end, where nothing goes).
            let mut latest: HashMap<&str, i64> = HashMap::new();
            for (o, k, _) in &all {
                if !mapped.full && *o >= mapped.end {
                    break;
                }
                let Some(k) = k.as_deref() else { continue };
                if !latest.contains_key(k) && latest.len() == map_keys {
                    break;
                }
                latest.insert(k, *o);
            }
            let expected: Vec<_> = all
                .iter()
                .filter(|(o, k, _)| {
                    *o >= mapped.end
                        || k.as_deref().is_some_and(|k| latest.get(k) == Some(o))
                })
                .cloned()
                .collect();
            let got = contents(&out);
            prop_assert_eq!(&got, &expected);
            // Whatever the map: a keyed record goes only when a later record
            // of its key stays.
            for (o, k, _) in all.iter().filter(|r| r.1.is_some() && !got.contains(r)) {
                prop_assert!(got.iter().any(|(o2, k2, _)| k2 == k && o2 > o));
            }
            prop_assert_eq!(stats.records_read as usize - stats.records_removed as usize,
                all.iter().filter(|r| r.0 < mapped.end).count()
                    - (all.len() - expected.len()));
            // Every output batch covers the offsets of one input batch.
            let ranges: Vec<(i64, i64)> = Batches::new(&input)
                .map(|b| b.map(|(h, _)| (h.base_offset, h.last_offset())).unwrap())
                .collect();
            for b in &out {
                let h = BatchHeader::parse_checked(b).unwrap();
                prop_assert!(ranges.contains(&(h.base_offset, h.last_offset())));
            }
        }
    }
}

#[path = "clean_txn_tests.rs"]
mod txn;
