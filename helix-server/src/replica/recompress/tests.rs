use super::*;
use crate::replica::batch::tests::make_batch;
use crate::replica::records::walk;

#[test]
fn every_codec_round_trips_keeping_the_header_fields() {
    let original = make_batch(&[b"alpha", b"beta", b"gamma"], 7, 3, 1_000);
    let before = parse_header(&original).expect("header");
    for target in [
        TopicCompression::Gzip(-1),
        TopicCompression::Gzip(9),
        TopicCompression::Snappy,
        TopicCompression::Lz4(9),
        TopicCompression::Lz4(12),
        TopicCompression::Zstd(3),
        TopicCompression::Zstd(-5),
    ] {
        let out = recompress(&original, target, 1 << 20).expect("recompress");
        let h = parse_header(&out).expect("header");
        assert_eq!(
            h.compression(),
            target.codec().expect("codec"),
            "{target:?}"
        );
        helix_wal::batch::verify_crc(&out).expect("crc");
        assert_eq!(
            (
                h.first_timestamp,
                h.max_timestamp,
                h.producer_id,
                h.base_sequence,
                h.record_count
            ),
            (
                before.first_timestamp,
                before.max_timestamp,
                before.producer_id,
                before.base_sequence,
                before.record_count
            ),
            "{target:?}"
        );
        assert_eq!(walk(&out, |_| true).expect("walk"), 3, "{target:?}");
        // And back to uncompressed: the same records section as sent.
        let plain = recompress(&out, TopicCompression::Uncompressed, 1 << 20).expect("back");
        assert_eq!(plain[61..], original[61..], "{target:?}");
    }
}

#[test]
fn a_batch_in_the_topics_codec_or_a_producer_topic_is_stored_as_sent() {
    let original = make_batch(&[b"x"], -1, -1, 5);
    for target in [TopicCompression::Producer, TopicCompression::Uncompressed] {
        let out = recompress(&original, target, 1 << 20).expect("same");
        assert_eq!(out, original);
        assert_eq!(out.as_ptr(), original.as_ptr(), "not copied");
    }
}

#[test]
fn a_batch_that_grows_past_max_message_bytes_is_refused() {
    let zeros = vec![0u8; 200_000];
    let original = make_batch(&[zeros.as_slice()], -1, -1, 5);
    let small = recompress(&original, TopicCompression::Zstd(3), 1 << 20).expect("zstd");
    assert!(small.len() < 10_000);
    let err = recompress(&small, TopicCompression::Uncompressed, 100_000).expect_err("too large");
    assert!(matches!(err, HelixError::MessageTooLarge(..)), "{err:?}");
}
