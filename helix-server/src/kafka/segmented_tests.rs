//! The segmented Fetch frame is byte-identical to the plain encode, for
//! every advertised Fetch version and response shape; record segments are
//! the caller's memory; partial vectored writes resume correctly.

use std::pin::Pin;
use std::task::{Context, Poll};

use kafka_protocol::messages::fetch_response::{FetchableTopicResponse, PartitionData};

use super::*;
use crate::kafka::{api_versions, wire_topic};

fn versions() -> std::ops::RangeInclusive<i16> {
    let (lo, hi) = api_versions::range(ApiKey::Fetch).expect("fetch is served");
    lo..=hi
}

/// Deterministic bytes that look nothing like a marker prefix.
fn payload(len: usize, seed: u8) -> Bytes {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect::<Vec<u8>>()
        .into()
}

fn partition(index: i32, records: Option<Bytes>) -> PartitionData {
    let mut p = PartitionData::default();
    p.partition_index = index;
    p.high_watermark = 1000 + i64::from(index);
    p.last_stable_offset = p.high_watermark;
    p.log_start_offset = 0;
    p.aborted_transactions = Some(Vec::new());
    p.records = records;
    p
}

fn topic(version: i16, name: &str, partitions: Vec<PartitionData>) -> FetchableTopicResponse {
    let mut t = FetchableTopicResponse::default();
    if version >= 13 {
        t.topic_id = uuid::Uuid::from_u128(name.len() as u128 * 7919);
    } else {
        t.topic = wire_topic(name);
    }
    t.partitions = partitions;
    t
}

/// Response shapes: none, one, and many partitions with empty, null,
/// small, large and error-coded records.
fn shapes(version: i16) -> Vec<FetchResponse> {
    let mut out = vec![FetchResponse::default()];
    let mut one = FetchResponse::default();
    one.responses = vec![topic(
        version,
        "t",
        vec![partition(0, Some(payload(70, 1)))],
    )];
    out.push(one);
    let mut many = FetchResponse::default();
    many.throttle_time_ms = 5;
    many.responses = (0..4)
        .map(|t| {
            let parts = (0..6)
                .map(|p| {
                    let records = match (t + p) % 5 {
                        0 => Some(Bytes::new()),
                        1 => None,
                        2 => Some(payload(1 << 20, p as u8)), // large: multi-byte varint
                        3 => Some(payload(127, t as u8)),     // varint boundary (len + 1 = 128)
                        _ => Some(payload(1, 9)),
                    };
                    let mut pd = partition(p, records);
                    if p == 5 {
                        pd.error_code = 6;
                        pd.records = Some(Bytes::new());
                    }
                    pd
                })
                .collect();
            topic(version, &format!("topic-{t}"), parts)
        })
        .collect();
    out.push(many);
    let mut nothing = FetchResponse::default();
    nothing.responses = vec![topic(
        version,
        "n",
        vec![partition(0, None), partition(1, Some(Bytes::new()))],
    )];
    out.push(nothing);
    out
}

fn plain(version: i16, resp: &FetchResponse) -> Bytes {
    encode(
        ApiKey::Fetch,
        version,
        42,
        &ResponseKind::Fetch(resp.clone()),
    )
    .expect("plain encode")
}

fn records_of(resp: &FetchResponse) -> Vec<Bytes> {
    resp.responses
        .iter()
        .flat_map(|t| &t.partitions)
        .filter_map(|p| p.records.clone())
        .filter(|r| !r.is_empty())
        .collect()
}

fn shares_memory(frame: &Frame, records: &Bytes) -> bool {
    frame
        .segments()
        .iter()
        .any(|s| s.as_ptr() == records.as_ptr() && s.len() == records.len())
}

#[test]
fn the_segmented_frame_equals_the_plain_encode_for_every_version() {
    for version in versions() {
        for resp in shapes(version) {
            let expected = plain(version, &resp);
            let records = records_of(&resp);
            let frame = encode_fetch(version, 42, resp).expect("segmented encode");
            assert_eq!(frame.len(), expected.len(), "v{version} length");
            assert!(
                !frame.is_empty(),
                "v{version}: a frame has its size at least"
            );
            for r in &records {
                assert!(shares_memory(&frame, r), "v{version}: records were copied");
            }
            if records.is_empty() {
                assert_eq!(frame.segments().len(), 1, "v{version}: nothing to splice");
            }
            assert!(
                frame.into_bytes() == expected,
                "v{version}: segmented frame differs from the plain encode"
            );
        }
    }
}

#[test]
fn a_tag_found_elsewhere_falls_back_to_the_copying_encode() {
    let tag = Tag(*b"collide!");
    for version in versions() {
        let mut resp = FetchResponse::default();
        let mut t = topic(version, "x", vec![partition(0, Some(payload(300, 3)))]);
        if version < 13 {
            t.topic = wire_topic("collide!");
        }
        t.partitions.push(partition(1, Some(payload(10, 4))));
        resp.responses = vec![t];
        if version >= 13 {
            // v13+ carries topic ids, not names: an id holds the tag.
            let mut extra = topic(version, "yy", vec![]);
            extra.topic_id = uuid::Uuid::from_bytes(*b"collide!collide!");
            resp.responses.push(extra);
        }
        let expected = plain(version, &resp);
        let before = copy_fallbacks();
        let frame = encode_fetch_tagged(tag, version, 42, resp).expect("encode");
        assert_eq!(frame.segments().len(), 1, "v{version}: must not splice");
        assert!(copy_fallbacks() > before, "v{version}: fallback counted");
        assert!(frame.into_bytes() == expected, "v{version}: fallback frame");
    }
}

#[test]
fn length_prefixes_match_the_encoder() {
    assert_eq!(length_prefix(11, 16), Some(vec![0, 0, 0, 16]));
    assert_eq!(length_prefix(12, 16), Some(vec![17]));
    assert_eq!(length_prefix(12, 127), Some(vec![0x80, 0x01]));
    assert_eq!(length_prefix(12, 126), Some(vec![0x7f]));
    assert_eq!(length_prefix(11, usize::MAX), None);
}

/// Accepts at most `chunk` bytes per call, spread over the slices.
struct Trickle {
    out: Vec<u8>,
    chunk: usize,
}

impl AsyncWrite for Trickle {
    fn poll_write(
        mut self: Pin<&mut Self>,
        _: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        let n = buf.len().min(self.chunk);
        self.out.extend_from_slice(&buf[..n]);
        Poll::Ready(Ok(n))
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        _: &mut Context<'_>,
        bufs: &[IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        let mut left = self.chunk;
        let mut n = 0;
        for b in bufs {
            let take = b.len().min(left);
            self.out.extend_from_slice(&b[..take]);
            left -= take;
            n += take;
            if left == 0 {
                break;
            }
        }
        Poll::Ready(Ok(n))
    }

    fn is_write_vectored(&self) -> bool {
        true
    }

    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

#[tokio::test]
async fn partial_vectored_writes_send_every_byte_in_order() {
    let mut resp = FetchResponse::default();
    let parts = (0..40).map(|p| partition(p, Some(payload(100, p as u8))));
    resp.responses = vec![topic(12, "w", parts.collect())];
    let expected = plain(12, &resp);
    let frame = encode_fetch(12, 42, resp).expect("encode");
    assert!(
        frame.segments().len() > MAX_IOV,
        "more segments than one write takes"
    );
    for chunk in [1, 7, 4096, usize::MAX] {
        let mut w = Trickle {
            out: Vec::new(),
            chunk,
        };
        write_frame(&mut w, &frame).await.expect("written");
        assert!(w.out == expected[..], "chunk {chunk}: bytes differ");
    }
}
