//! Conversion both ways: legacy message sets to the v2 batch Kafka stores,
//! and stored v2 batches down to a Fetch v0-v3 reader's format.

use bytes::{Bytes, BytesMut};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::records::legacy::{
    LegacyEncodeOptions, LegacyMessage, decode_message_set, encode_message_set,
};
use kafka_protocol::records::{
    Compression, Record, RecordBatchDecoder, RecordBatchEncoder, RecordEncodeOptions, TimestampType,
};

use super::fetch::{down_convert, reader_magic};
use super::produce::{is_legacy, to_v2_batch};
use crate::error::HelixError;
use crate::replica::batch::{self, parse_header};
use crate::replica::recompress::{TopicCompression, recompress};

const MAX: usize = 1 << 20;

/// One message "v" (timestamp 1000) in a magic 0 or 1 message set, as a
/// Produce v0-v2 client sends it.
pub(crate) fn one_message_set(magic: i8) -> Bytes {
    legacy(magic, Compression::None, &[message(0, 1000, "", "v")])
}

fn message(offset: i64, timestamp: i64, key: &str, value: &str) -> LegacyMessage {
    LegacyMessage {
        offset,
        timestamp,
        timestamp_type: TimestampType::Creation,
        key: Some(Bytes::copy_from_slice(key.as_bytes())),
        value: Some(Bytes::copy_from_slice(value.as_bytes())),
    }
}

fn legacy(magic: i8, compression: Compression, messages: &[LegacyMessage]) -> Bytes {
    let mut out = BytesMut::new();
    let options = LegacyEncodeOptions {
        magic,
        compression,
        timestamp_type: TimestampType::Creation,
        log_append_time: -1,
    };
    encode_message_set(&mut out, messages, &options).expect("encode");
    out.freeze()
}

/// A stored-looking v2 batch: base offset `base`, one record per value,
/// timestamps 100, 101, ..., a header on each.
fn stored(base: i64, values: &[&str], compression: Compression, control: bool) -> Bytes {
    let records: Vec<Record> = values
        .iter()
        .enumerate()
        .map(|(i, v)| Record {
            transactional: false,
            control,
            delete_horizon: false,
            partition_leader_epoch: 3,
            producer_id: -1,
            producer_epoch: -1,
            sequence: base as i32 + i as i32 - 1,
            timestamp_type: TimestampType::Creation,
            offset: base + i as i64,
            timestamp: 100 + i as i64,
            key: Some(Bytes::from(format!("k{i}"))),
            value: Some(Bytes::copy_from_slice(v.as_bytes())),
            headers: [(
                StrBytes::from_static_str("h"),
                Some(Bytes::from_static(b"x")),
            )]
            .into_iter()
            .collect(),
        })
        .collect();
    let mut out = BytesMut::new();
    let options = RecordEncodeOptions {
        version: 2,
        compression,
    };
    RecordBatchEncoder::encode(&mut out, &records, &options).expect("encode");
    out.freeze()
}

fn decoded_v2(batch: &Bytes) -> Vec<Record> {
    RecordBatchDecoder::decode(&mut batch.clone())
        .expect("decodes")
        .records
}

fn read_back(set: &Bytes) -> Vec<LegacyMessage> {
    decode_message_set(set, MAX)
        .expect("decodes")
        .entries
        .into_iter()
        .flat_map(|e| e.messages)
        .collect()
}

#[test]
fn a_magic_0_set_becomes_one_v2_batch_without_timestamps() {
    let set = legacy(
        0,
        Compression::None,
        &[message(7, -1, "a", "1"), message(9, -1, "b", "2")],
    );
    assert!(is_legacy(&set));
    let b = to_v2_batch(&set, MAX).expect("converts");
    let h = parse_header(&b).expect("v2 header");
    assert_eq!((h.record_count, h.compression()), (2, 0));
    assert_eq!((h.first_timestamp, h.max_timestamp), (-1, -1));
    assert_eq!((h.producer_id, h.base_sequence), (-1, -1));
    assert!(!h.is_log_append_time());
    let records = decoded_v2(&b);
    let got: Vec<_> = records
        .iter()
        .map(|r| (r.offset, r.timestamp, r.value.clone()))
        .collect();
    assert_eq!(
        got,
        vec![
            (0, -1, Some(Bytes::from("1"))),
            (1, -1, Some(Bytes::from("2")))
        ]
    );
    // The converted batch passes the ordinary produce validation.
    batch::validate(&b, MAX as i32, Some((0, i64::MAX))).expect("valid");
}

#[test]
fn a_magic_1_wrapper_keeps_its_codec_and_timestamps() {
    for codec in [Compression::Gzip, Compression::Snappy, Compression::Lz4] {
        let set = legacy(
            1,
            codec,
            &[message(0, 50, "a", "1"), message(1, 40, "b", "2")],
        );
        let b = to_v2_batch(&set, MAX).expect("converts");
        let h = parse_header(&b).expect("v2 header");
        assert_eq!(h.compression(), codec as i16, "{codec:?}");
        assert_eq!((h.first_timestamp, h.max_timestamp), (40, 50));
        let stamps: Vec<_> = decoded_v2(&b).iter().map(|r| r.timestamp).collect();
        assert_eq!(stamps, vec![50, 40]);
    }
}

#[test]
fn v2_batches_in_old_requests_are_left_alone() {
    assert!(!is_legacy(&stored(0, &["x"], Compression::None, false)));
}

#[test]
fn bad_sets_get_kafka_error_codes() {
    let one = legacy(1, Compression::Gzip, &[message(0, 1, "a", "1")]);
    let mut two = one.to_vec();
    two.extend_from_slice(&one);
    let e = to_v2_batch(&Bytes::from(two), MAX).unwrap_err();
    assert!(matches!(e, HelixError::InvalidRecord(_)), "{e}");

    let mut flipped = legacy(0, Compression::None, &[message(0, -1, "a", "1")]).to_vec();
    let last = flipped.len() - 1;
    flipped[last] ^= 0x40;
    let e = to_v2_batch(&Bytes::from(flipped), MAX).unwrap_err();
    assert_eq!(e.kafka_code(), 2, "CORRUPT_MESSAGE: {e}");

    let mixed = [
        legacy(0, Compression::None, &[message(0, -1, "a", "1")]),
        legacy(1, Compression::None, &[message(1, 5, "b", "2")]),
    ]
    .concat();
    let e = to_v2_batch(&Bytes::from(mixed), MAX).unwrap_err();
    assert_eq!(e.kafka_code(), 87, "INVALID_RECORD: {e}");

    let cut = legacy(0, Compression::None, &[message(0, -1, "a", "1")]).slice(..20);
    assert!(matches!(
        to_v2_batch(&cut, MAX),
        Err(HelixError::InvalidRecord(_))
    ));
}

#[test]
fn fetch_versions_map_to_magics_as_in_kafka() {
    let got: Vec<_> = (0..=5).map(reader_magic).collect();
    assert_eq!(got, vec![Some(0), Some(0), Some(1), Some(1), None, None]);
}

#[test]
fn down_conversion_keeps_offsets_and_drops_headers_and_magic_0_timestamps() {
    let data = [
        stored(10, &["a", "b"], Compression::None, false),
        stored(12, &["c"], Compression::None, false),
    ]
    .concat();
    let data = Bytes::from(data);
    let v0 = read_back(&down_convert(&data, 0, 10).expect("converts"));
    let got: Vec<_> = v0
        .iter()
        .map(|m| (m.offset, m.timestamp, m.value.clone()))
        .collect();
    assert_eq!(
        got,
        vec![
            (10, -1, Some(Bytes::from("a"))),
            (11, -1, Some(Bytes::from("b"))),
            (12, -1, Some(Bytes::from("c"))),
        ]
    );
    let v1 = read_back(&down_convert(&data, 1, 11).expect("converts"));
    // Uncompressed: the records before the fetch offset are left out.
    let got: Vec<_> = v1.iter().map(|m| (m.offset, m.timestamp)).collect();
    assert_eq!(got, vec![(11, 101), (12, 100)]);
}

#[test]
fn a_compressed_batch_becomes_one_whole_wrapper_in_its_codec() {
    let data = stored(20, &["a", "b", "c"], Compression::Gzip, false);
    let out = down_convert(&data, 1, 21).expect("converts");
    let set = decode_message_set(&out, MAX).expect("decodes");
    assert_eq!(set.entries.len(), 1);
    assert_eq!(set.entries[0].compression, Compression::Gzip);
    let offsets: Vec<_> = set.entries[0].messages.iter().map(|m| m.offset).collect();
    assert_eq!(offsets, vec![20, 21, 22]);
}

#[test]
fn a_log_append_time_batch_gives_its_time_to_every_message() {
    let b = batch::stamp_log_append_time(&stored(0, &["a", "b"], Compression::None, false), 777)
        .expect("stamp");
    for m in read_back(&down_convert(&b, 1, 0).expect("converts")) {
        assert_eq!(
            (m.timestamp, m.timestamp_type),
            (777, TimestampType::LogAppend)
        );
    }
}

#[test]
fn control_batches_are_left_out_and_zstd_cannot_be_converted() {
    let data = [
        stored(0, &["x"], Compression::None, true),
        stored(1, &["y"], Compression::None, false),
    ]
    .concat();
    let got = read_back(&down_convert(&Bytes::from(data), 0, 0).expect("converts"));
    assert_eq!(got.iter().map(|m| m.offset).collect::<Vec<_>>(), vec![1]);

    let plain = stored(0, &["x"], Compression::None, false);
    let zstd = recompress(&plain, TopicCompression::Zstd(3), MAX).expect("zstd");
    let e = down_convert(&zstd, 1, 0).unwrap_err();
    assert_eq!(e.kafka_code(), 76, "UNSUPPORTED_COMPRESSION_TYPE: {e}");
}

#[test]
fn the_answer_is_cut_to_the_bytes_read_leaving_a_partial_last_message() {
    // Magic 1 messages are larger than v2 records (a 34-byte header each
    // against a few varints): a batch of many small records grows.
    let many: Vec<String> = (0..20).map(|i| format!("v{i}")).collect();
    let many: Vec<&str> = many.iter().map(String::as_str).collect();
    let data = [
        stored(0, &["first"], Compression::None, false),
        stored(1, &many, Compression::None, false),
    ]
    .concat();
    let data = Bytes::from(data);
    let out = down_convert(&data, 1, 0).expect("converts");
    assert_eq!(out.len(), data.len());
    let set = decode_message_set(&out, MAX).expect("decodes");
    assert!(set.complete_bytes < out.len(), "a partial last message");
    assert!(!set.entries.is_empty());
    // The first message set is always whole, however small the read.
    let first = stored(0, &[&"z".repeat(10)], Compression::None, false);
    let whole = down_convert(&first, 1, 0).expect("converts");
    assert_eq!(read_back(&whole).len(), 1);
}
