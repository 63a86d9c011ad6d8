//! Response frames as a list of segments, and the zero-copy Fetch encoder.
//!
//! Fetch answers carry record data as `Bytes` slices of the WAL (mmap
//! backed). Encoding them with `kafka-protocol` would copy every record byte
//! into the response buffer. Instead [`encode_fetch`] encodes the response
//! with each non-empty `records` replaced by a 16-byte marker (a random
//! per-response tag + the marker's index), finds every marker in the encoded
//! metadata together with the length prefix the encoder wrote before it,
//! and splices: metadata pieces, the real length prefix, the original
//! record `Bytes`. The frame is then written with vectored writes
//! ([`write_frame`]); record bytes go from the WAL to the socket untouched.
//!
//! Never a wrong frame: if the tag is not found exactly once per marker, at
//! the expected index and behind the expected prefix, the response is
//! encoded the ordinary (copying) way and [`copy_fallbacks`] counts it.

use std::hash::{BuildHasher, RandomState};
use std::io::IoSlice;
use std::sync::atomic::{AtomicU64, Ordering};

use bytes::{BufMut, Bytes, BytesMut};
use kafka_protocol::messages::{ApiKey, FetchResponse, ResponseHeader, ResponseKind};
use kafka_protocol::protocol::Encodable;
use tokio::io::{AsyncWrite, AsyncWriteExt};

use crate::error::{HelixError, Result};
use crate::metrics::{Metrics, metrics};

/// A whole response frame (i32 size included): the concatenation of its
/// segments.
#[derive(Debug, Clone, Default)]
pub struct Frame {
    segments: Vec<Bytes>,
}

impl Frame {
    /// A frame held in one buffer.
    pub fn whole(bytes: Bytes) -> Self {
        Frame {
            segments: vec![bytes],
        }
    }

    /// The pieces, in wire order.
    pub fn segments(&self) -> &[Bytes] {
        &self.segments
    }

    /// Total bytes on the wire.
    pub fn len(&self) -> usize {
        self.segments.iter().map(Bytes::len).sum()
    }

    /// Whether the frame has no bytes at all.
    #[cfg(test)]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The frame in one buffer (copies unless it already is one segment).
    #[cfg(test)]
    pub fn into_bytes(mut self) -> Bytes {
        if self.segments.len() == 1 {
            return self.segments.pop().unwrap_or_default();
        }
        use bytes::BufMut;
        let mut out = bytes::BytesMut::with_capacity(self.len());
        for s in &self.segments {
            out.put_slice(s);
        }
        out.freeze()
    }
}

/// Most slices handed to one vectored write (below every platform's IOV_MAX).
const MAX_IOV: usize = 64;

/// Writes every byte of `frame`, with vectored writes; partial writes
/// resume where they stopped.
pub async fn write_frame<W: AsyncWrite + Unpin>(w: &mut W, frame: &Frame) -> std::io::Result<()> {
    let segs = frame.segments();
    let (mut i, mut off) = (0usize, 0usize);
    let mut slices: Vec<IoSlice<'_>> = Vec::with_capacity(MAX_IOV.min(segs.len()));
    loop {
        while i < segs.len() && off == segs[i].len() {
            i += 1;
            off = 0;
        }
        let Some(first) = segs.get(i) else {
            return Ok(());
        };
        slices.clear();
        slices.push(IoSlice::new(&first[off..]));
        slices.extend(
            segs[i + 1..]
                .iter()
                .filter(|s| !s.is_empty())
                .take(MAX_IOV - 1)
                .map(|s| IoSlice::new(s)),
        );
        let mut n = w.write_vectored(&slices).await?;
        if n == 0 {
            return Err(std::io::ErrorKind::WriteZero.into());
        }
        while n > 0 && i < segs.len() {
            let left = segs[i].len() - off;
            if n >= left {
                n -= left;
                i += 1;
                off = 0;
            } else {
                off += n;
                n = 0;
            }
        }
    }
}

static TAG_SEQ: AtomicU64 = AtomicU64::new(0);

/// Fetch responses encoded by copying because the markers could not be
/// located unambiguously (expected: 0).
pub fn copy_fallbacks() -> u64 {
    metrics()
        .counters
        .fetch_copy_fallbacks
        .load(Ordering::Relaxed)
}

/// Bytes of one marker: 8 bytes of tag, 8 bytes of index.
const MARKER_LEN: usize = 16;

/// The random part shared by a response's markers.
#[derive(Debug, Clone, Copy)]
struct Tag([u8; 8]);

impl Tag {
    fn fresh() -> Self {
        let seq = TAG_SEQ.fetch_add(1, Ordering::Relaxed);
        Tag(RandomState::new().hash_one(seq).to_be_bytes())
    }

    fn marker(self, index: usize) -> [u8; MARKER_LEN] {
        let mut m = [0u8; MARKER_LEN];
        m[..8].copy_from_slice(&self.0);
        m[8..].copy_from_slice(&(index as u64).to_be_bytes());
        m
    }
}

/// The length prefix `kafka-protocol` writes before `len` record bytes at
/// `version`: i32 before v12, unsigned varint of len + 1 from v12 (flexible).
fn length_prefix(version: i16, len: usize) -> Option<Vec<u8>> {
    if version >= 12 {
        let mut v = u32::try_from(len).ok()?.checked_add(1)?;
        let mut out = Vec::with_capacity(5);
        while v >= 0x80 {
            out.push((v as u8) | 0x80);
            v >>= 7;
        }
        out.push(v as u8);
        Some(out)
    } else {
        Some(i32::try_from(len).ok()?.to_be_bytes().to_vec())
    }
}

/// Every `records` field of the response, in encoding order.
fn records_mut(resp: &mut FetchResponse) -> impl Iterator<Item = &mut Option<Bytes>> {
    resp.responses
        .iter_mut()
        .flat_map(|t| t.partitions.iter_mut())
        .map(|p| &mut p.records)
}

/// Encodes a Fetch response frame without copying record data.
pub fn encode_fetch(version: i16, correlation_id: i32, resp: FetchResponse) -> Result<Frame> {
    encode_fetch_tagged(Tag::fresh(), version, correlation_id, resp)
}

fn encode_fetch_tagged(
    tag: Tag,
    version: i16,
    correlation_id: i32,
    resp: FetchResponse,
) -> Result<Frame> {
    let mut body = ResponseKind::Fetch(resp);
    let mut originals = Vec::new();
    if let ResponseKind::Fetch(resp) = &mut body {
        for records in records_mut(resp) {
            if let Some(r) = records.as_mut().filter(|r| !r.is_empty()) {
                let marker = Bytes::copy_from_slice(&tag.marker(originals.len()));
                originals.push(std::mem::replace(r, marker));
            }
        }
    }
    let meta = encode(ApiKey::Fetch, version, correlation_id, &body)?;
    if originals.is_empty() {
        return Ok(Frame::whole(meta));
    }
    if let Some(frame) = splice(version, &meta, tag, &originals) {
        return Ok(frame);
    }
    Metrics::count(&metrics().counters.fetch_copy_fallbacks, 1);
    tracing::warn!(
        version,
        fallbacks = copy_fallbacks(),
        "fetch markers not found unambiguously; copying"
    );
    if let ResponseKind::Fetch(resp) = &mut body {
        // The markers are exactly the non-empty records, in the same order.
        let mut originals = originals.into_iter();
        for records in records_mut(resp) {
            if let Some(r) = records.as_mut().filter(|r| !r.is_empty()) {
                *r = originals.next().ok_or_else(|| {
                    HelixError::InvalidRequest("fetch records changed while encoding".into())
                })?;
            }
        }
    }
    encode(ApiKey::Fetch, version, correlation_id, &body).map(Frame::whole)
}

/// Replaces the markers in `meta` (an encoded frame) by `originals`; None
/// unless every marker is found exactly once, in order, behind its prefix.
fn splice(version: i16, meta: &Bytes, tag: Tag, originals: &[Bytes]) -> Option<Frame> {
    let marker_prefix = length_prefix(version, MARKER_LEN)?;
    let hits: Vec<usize> = meta
        .windows(tag.0.len())
        .enumerate()
        .filter(|(_, w)| *w == tag.0)
        .map(|(at, _)| at)
        .collect();
    if hits.len() != originals.len() {
        return None;
    }
    let mut segments = Vec::with_capacity(3 * originals.len() + 2);
    segments.push(Bytes::new()); // the frame size, set below
    let mut cursor = 4;
    let mut size = meta.len().checked_sub(4)?;
    for (index, (&at, records)) in hits.iter().zip(originals).enumerate() {
        let start = at.checked_sub(marker_prefix.len())?;
        let end = at + MARKER_LEN;
        if start < cursor
            || meta.get(start..at)? != marker_prefix.as_slice()
            || meta.get(at..end)? != tag.marker(index).as_slice()
        {
            return None;
        }
        let prefix = length_prefix(version, records.len())?;
        size = size - (marker_prefix.len() + MARKER_LEN) + prefix.len() + records.len();
        segments.push(meta.slice(cursor..start));
        segments.push(Bytes::from(prefix));
        segments.push(records.clone());
        cursor = end;
    }
    segments.push(meta.slice(cursor..));
    segments[0] = Bytes::copy_from_slice(&i32::try_from(size).ok()?.to_be_bytes());
    Some(Frame { segments })
}

/// Encodes a whole response frame (length, header, body) for `version`. A failure here is a
/// broker bug (a field the version lacks); the connection is closed.
pub fn encode(
    key: ApiKey,
    version: i16,
    correlation_id: i32,
    body: &ResponseKind,
) -> Result<Bytes> {
    let mut buf = BytesMut::with_capacity(64);
    buf.put_i32(0); // the frame length, filled in below
    let mut header = ResponseHeader::default();
    header.correlation_id = correlation_id;
    header
        .encode(&mut buf, key.response_header_version(version))
        .map_err(|e| HelixError::InvalidRequest(format!("encoding {key:?} header: {e}")))?;
    body.encode(&mut buf, version)
        .map_err(|e| HelixError::InvalidRequest(format!("encoding {key:?} v{version}: {e:#}")))?;
    let len = i32::try_from(buf.len() - 4)
        .map_err(|_| HelixError::InvalidRequest(format!("{key:?} response above 2 GiB")))?;
    buf[0..4].copy_from_slice(&len.to_be_bytes());
    Ok(buf.freeze())
}

#[cfg(test)]
#[path = "segmented_tests.rs"]
mod tests;
