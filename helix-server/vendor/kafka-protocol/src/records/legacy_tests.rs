//! Tests of the legacy (magic 0/1) message set codec (Helix patch).

use bytes::{Bytes, BytesMut};

use super::legacy::{
    decode_message_set, encode_message_set, LegacyEncodeOptions, LegacyError, LegacyMessage,
};
use super::{Compression, TimestampType, IEEE, NO_TIMESTAMP};

/// Generous inflate bound for tests that are not about it.
const LIMIT: usize = 1 << 20;

fn hex(s: &str) -> Bytes {
    let v: Vec<u8> = (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect();
    Bytes::from(v)
}

fn msg(offset: i64, timestamp: i64, key: Option<&str>, value: &str) -> LegacyMessage {
    LegacyMessage {
        offset,
        timestamp,
        timestamp_type: TimestampType::Creation,
        key: key.map(|k| Bytes::copy_from_slice(k.as_bytes())),
        value: Some(Bytes::copy_from_slice(value.as_bytes())),
    }
}

fn opts(magic: i8, compression: Compression) -> LegacyEncodeOptions {
    LegacyEncodeOptions {
        magic,
        compression,
        timestamp_type: TimestampType::Creation,
        log_append_time: NO_TIMESTAMP,
    }
}

fn encode(messages: &[LegacyMessage], o: &LegacyEncodeOptions) -> Bytes {
    let mut out = BytesMut::new();
    encode_message_set(&mut out, messages, o).unwrap();
    out.freeze()
}

// Written by kafka-python's LegacyRecordBatchBuilder: (offset 0, ts
// 1700000000000, "k", "v"), (offset 1, ts 1700000000001, null, "value2").
const KAFKA_PYTHON_V0: &str = "0000000000000000000000101fecd70a0000000000016b00000001760000000000000001000000142b9164140000ffffffff0000000676616c756532";
const KAFKA_PYTHON_V1: &str = "00000000000000000000001839268c3301000000018bcfe56800000000016b000000017600000000000000010000001c9cb873bf01000000018bcfe56801ffffffff0000000676616c756532";
const KAFKA_PYTHON_V1_GZIP: &str = "000000000000000000000058c7506e8c01010000000000000000ffffffff000000421f8b08005c16086b02ff63608003094bb51e63462083b1fbfcd30c90086336882883ca83a464e6ec28de0f57c3f81f08801cb6b2c49cd2542300658f4ea54c000000";

#[test]
fn ieee_crc_is_the_standard_crc32() {
    assert_eq!(IEEE.checksum(b"123456789"), 0xCBF4_3926);
}

#[test]
fn encodes_uncompressed_sets_byte_for_byte_as_kafka_clients_do() {
    let v0 = [
        msg(0, NO_TIMESTAMP, Some("k"), "v"),
        msg(1, NO_TIMESTAMP, None, "value2"),
    ];
    assert_eq!(
        encode(&v0, &opts(0, Compression::None)),
        hex(KAFKA_PYTHON_V0)
    );
    let v1 = [
        msg(0, 1_700_000_000_000, Some("k"), "v"),
        msg(1, 1_700_000_000_001, None, "value2"),
    ];
    assert_eq!(
        encode(&v1, &opts(1, Compression::None)),
        hex(KAFKA_PYTHON_V1)
    );
}

#[test]
fn decodes_a_kafka_python_gzip_wrapper_with_relative_offsets() {
    let set = decode_message_set(&hex(KAFKA_PYTHON_V1_GZIP), LIMIT).unwrap();
    assert_eq!(set.entries.len(), 1);
    let e = &set.entries[0];
    assert_eq!((e.magic, e.compression), (1, Compression::Gzip));
    // A producer's wrapper says offset 0 (it knows no better); the inner
    // offsets 0 and 1 are relative to the last, as Kafka reads them.
    assert_eq!(
        e.messages,
        vec![
            msg(-1, 1_700_000_000_000, Some("k"), "v"),
            msg(0, 1_700_000_000_001, None, "value2"),
        ]
    );
}

#[test]
fn every_codec_round_trips_with_absolute_offsets() {
    for magic in [0i8, 1] {
        let ts = |t| if magic == 0 { NO_TIMESTAMP } else { t };
        let messages = vec![
            msg(40, ts(5), Some("a"), "one"),
            msg(41, ts(7), None, "two"),
            msg(42, ts(6), Some("c"), ""),
        ];
        for codec in [
            Compression::None,
            Compression::Gzip,
            Compression::Snappy,
            Compression::Lz4,
        ] {
            let bytes = encode(&messages, &opts(magic, codec));
            let set = decode_message_set(&bytes, LIMIT).unwrap();
            assert_eq!(set.complete_bytes, bytes.len());
            let all: Vec<_> = set
                .entries
                .iter()
                .flat_map(|e| e.messages.clone())
                .collect();
            assert_eq!(all, messages, "magic {magic} {codec:?}");
            let wrappers = if codec == Compression::None { 3 } else { 1 };
            assert_eq!(set.entries.len(), wrappers);
        }
    }
}

#[test]
fn a_compressed_magic_1_wrapper_carries_the_last_offset_and_relative_inner_offsets() {
    let messages = [msg(100, 1, None, "x"), msg(101, 9, None, "y")];
    let bytes = encode(&messages, &opts(1, Compression::Gzip));
    assert_eq!(&bytes[..8], &101i64.to_be_bytes());
    // The wrapper's timestamp is the largest inner one.
    assert_eq!(&bytes[18..26], &9i64.to_be_bytes());
}

#[test]
fn log_append_time_wrapper_gives_its_time_to_every_inner_message() {
    let messages = [msg(0, 1, None, "x"), msg(1, 2, None, "y")];
    let o = LegacyEncodeOptions {
        timestamp_type: TimestampType::LogAppend,
        log_append_time: 77,
        ..opts(1, Compression::Snappy)
    };
    let set = decode_message_set(&encode(&messages, &o), LIMIT).unwrap();
    for m in &set.entries[0].messages {
        assert_eq!(
            (m.timestamp, m.timestamp_type),
            (77, TimestampType::LogAppend)
        );
    }
}

#[test]
fn a_flipped_bit_is_a_crc_failure() {
    let mut b = hex(KAFKA_PYTHON_V1).to_vec();
    let last = b.len() - 1;
    b[last] ^= 1;
    let e = decode_message_set(&Bytes::from(b), LIMIT).unwrap_err();
    assert!(matches!(e, LegacyError::Corrupt(m) if m.contains("CRC")));
}

#[test]
fn a_partial_last_entry_is_left_out() {
    let whole = hex(KAFKA_PYTHON_V0);
    let cut = whole.slice(..whole.len() - 3);
    let set = decode_message_set(&cut, LIMIT).unwrap();
    assert_eq!(set.entries.len(), 1);
    assert_eq!(set.complete_bytes, 12 + 16);
}

#[test]
fn lengths_past_the_message_are_refused_before_allocation() {
    // A message whose key claims i32::MAX bytes, with a valid CRC.
    let mut body = vec![0u8, 0];
    body.extend_from_slice(&i32::MAX.to_be_bytes());
    body.extend_from_slice(&(-1i32).to_be_bytes());
    let mut set = Vec::new();
    set.extend_from_slice(&0i64.to_be_bytes());
    set.extend_from_slice(&((body.len() + 4) as i32).to_be_bytes());
    set.extend_from_slice(&IEEE.checksum(&body).to_be_bytes());
    set.extend_from_slice(&body);
    let e = decode_message_set(&Bytes::from(set), LIMIT).unwrap_err();
    assert!(matches!(e, LegacyError::Corrupt(_)), "{e}");
}

#[test]
fn negative_and_tiny_sizes_are_corrupt() {
    for size in [-5i32, 3] {
        let mut set = 0i64.to_be_bytes().to_vec();
        set.extend_from_slice(&size.to_be_bytes());
        set.extend_from_slice(&[0u8; 20]);
        let e = decode_message_set(&Bytes::from(set), LIMIT).unwrap_err();
        assert!(matches!(e, LegacyError::Corrupt(_)), "size {size}: {e}");
    }
}

#[test]
fn a_wrapper_inflating_past_the_limit_is_refused() {
    let big = "z".repeat(10_000);
    let bytes = encode(&[msg(0, 0, None, &big)], &opts(1, Compression::Gzip));
    assert!(bytes.len() < 1_000);
    let e = decode_message_set(&bytes, 5_000).unwrap_err();
    assert!(matches!(e, LegacyError::Invalid(_)), "{e}");
    assert!(decode_message_set(&bytes, 20_000).is_ok());
}

#[test]
fn the_inflate_bound_is_for_all_wrappers_of_a_set_together() {
    let big = "z".repeat(10_000);
    let one = encode(&[msg(0, 0, None, &big)], &opts(1, Compression::Gzip));
    let three = Bytes::from([one.clone(), one.clone(), one].concat());
    // Each inner set is the 10,000-byte value and a 34-byte message header.
    assert!(decode_message_set(&three, 3 * 10_034).is_ok());
    let e = decode_message_set(&three, 3 * 10_034 - 1).unwrap_err();
    assert!(matches!(e, LegacyError::Invalid(_)), "{e}");
}

#[test]
fn nested_compression_is_invalid() {
    let inner = encode(&[msg(0, 0, None, "x")], &opts(1, Compression::Gzip));
    let outer = LegacyMessage {
        value: Some(inner),
        ..msg(0, 0, None, "")
    };
    // Wrap the compressed entry as the value of another gzip wrapper.
    let mut nested = BytesMut::new();
    encode_message_set(&mut nested, &[outer], &opts(1, Compression::None)).unwrap();
    // Turn the plain outer entry into a gzip wrapper of the compressed set.
    let mut raw = nested.to_vec();
    let inner_set = raw[12 + 4 + 1 + 1 + 8 + 4 + 4..].to_vec();
    let gz = super::legacy_codec::deflate(Compression::Gzip, &inner_set).unwrap();
    raw.truncate(0);
    let mut out = BytesMut::new();
    encode_message_set(
        &mut out,
        &[LegacyMessage {
            value: Some(gz),
            ..msg(0, 0, None, "")
        }],
        &opts(1, Compression::None),
    )
    .unwrap();
    // Set the gzip codec bit on the outer entry and fix its CRC.
    let mut b = out.to_vec();
    b[17] = 1;
    let crc = IEEE.checksum(&b[16..]);
    b[12..16].copy_from_slice(&crc.to_be_bytes());
    let e = decode_message_set(&Bytes::from(b), LIMIT).unwrap_err();
    assert!(matches!(e, LegacyError::Invalid(m) if m.contains("inside")));
}

#[test]
fn zstd_is_not_a_legacy_codec() {
    let mut b = hex(KAFKA_PYTHON_V1).to_vec();
    b[17] = 4;
    let crc = IEEE.checksum(&b[16..12 + 0x18]);
    b[12..16].copy_from_slice(&crc.to_be_bytes());
    let e = decode_message_set(&Bytes::from(b), LIMIT).unwrap_err();
    assert!(matches!(e, LegacyError::Invalid(_)), "{e}");
}

#[test]
fn a_magic_0_lz4_wrapper_is_read_whatever_its_header_checksum() {
    // Clients of the magic 0 era hash the wrong bytes (KAFKA-3160); Kafka
    // ignores that checksum for magic 0.
    let messages = [msg(0, NO_TIMESTAMP, Some("a"), "one")];
    let mut b = encode(&messages, &opts(0, Compression::Lz4)).to_vec();
    let frame = 12 + 4 + 1 + 1 + 4 + 4;
    let flg = b[frame + 4];
    let optional = if flg & 0x08 != 0 { 8 } else { 0 } + if flg & 0x01 != 0 { 4 } else { 0 };
    b[frame + 6 + optional] ^= 0xff;
    let crc = IEEE.checksum(&b[16..]);
    b[12..16].copy_from_slice(&crc.to_be_bytes());
    let set = decode_message_set(&Bytes::from(b), LIMIT).unwrap();
    assert_eq!(set.entries[0].messages, messages.to_vec());
}
