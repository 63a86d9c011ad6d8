//! Walking the records of a v2 batch without keeping them: the batch body
//! is decompressed as a stream (gzip, snappy with or without the Java
//! client's xerial framing, lz4, zstd) and each record's length, timestamp
//! delta and offset delta are read, the rest skipped. Memory stays bounded
//! by a small buffer (snappy: one block, at most [`MAX_SNAPPY_BLOCK`]),
//! whatever the compression ratio. Batches stay stored as sent; this is
//! used only to check record counts and to find a timestamp inside a batch.

use std::io::{self, Read};

use helix_wal::batch::{BatchHeader, HEADER_LEN};

use crate::error::{HelixError, Result};

/// Largest snappy block decompressed at once (a declared length above it is
/// refused before allocating). Xerial blocks are 32 KiB by default and
/// librdkafka's raw blocks are at most a batch.
pub const MAX_SNAPPY_BLOCK: usize = 64 << 20;

/// Largest single record walked; larger declared lengths are corrupt.
const MAX_RECORD_LEN: i64 = i32::MAX as i64;

/// What the walker sees of one record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecordPrefix {
    pub timestamp_delta: i64,
    pub offset_delta: i32,
    /// The key is not null (a compacted topic refuses records without).
    pub has_key: bool,
}

/// Calls `visit` for each record of the batch at the start of `batch` (a
/// whole batch), in order, until it returns false. Returns how many
/// records were visited.
pub fn walk(batch: &[u8], mut visit: impl FnMut(RecordPrefix) -> bool) -> Result<usize> {
    let mut reader = records_reader(batch)?;
    let corrupt = |e: io::Error| HelixError::CorruptBatch(format!("records: {e}"));
    let mut n = 0usize;
    loop {
        let len = match read_varlong(&mut reader) {
            Ok(Some(len)) => len,
            Ok(None) => return Ok(n),
            Err(e) => return Err(corrupt(e)),
        };
        if !(1..=MAX_RECORD_LEN).contains(&len) {
            return Err(HelixError::CorruptBatch(format!("record length {len}")));
        }
        let mut limited = (&mut reader).take(len as u64);
        let (timestamp_delta, offset_delta) = read_prefix(&mut limited).map_err(corrupt)?;
        let key_len = read_varlong(&mut limited)
            .and_then(|l| l.ok_or_else(|| cut("key length")))
            .map_err(corrupt)?;
        let prefix = RecordPrefix {
            timestamp_delta,
            offset_delta,
            has_key: key_len >= 0,
        };
        io::copy(&mut limited, &mut io::sink()).map_err(corrupt)?;
        if limited.limit() != 0 {
            return Err(HelixError::CorruptBatch("record cut short".into()));
        }
        n += 1;
        if !visit(prefix) {
            return Ok(n);
        }
    }
}

/// The records section of the whole batch at the start of `batch`,
/// decompressed as a stream.
pub fn records_reader(batch: &[u8]) -> Result<Box<dyn Read + '_>> {
    let h =
        BatchHeader::parse_checked(batch).map_err(|e| HelixError::CorruptBatch(e.to_string()))?;
    let body = batch
        .get(HEADER_LEN..h.total_len())
        .ok_or_else(|| HelixError::CorruptBatch("batch shorter than declared".into()))?;
    let corrupt = |e: io::Error| HelixError::CorruptBatch(format!("records: {e}"));
    Ok(match h.compression() {
        0 => Box::new(body),
        1 => Box::new(flate2::read::GzDecoder::new(body)),
        2 => Box::new(SnappyReader::new(body)),
        3 => Box::new(lz4::Decoder::new(body).map_err(corrupt)?),
        4 => Box::new(zstd::stream::read::Decoder::with_buffer(body).map_err(corrupt)?),
        other => {
            return Err(HelixError::CorruptBatch(format!(
                "unknown compression codec {other}"
            )));
        }
    })
}

/// The records section of the whole batch at the start of `batch`,
/// decompressed into memory, refused (CorruptBatch) past `limit` bytes.
/// For the compacting cleaner, which keeps or drops each record.
pub fn records_section(batch: &[u8], limit: usize) -> Result<Vec<u8>> {
    let reader = records_reader(batch)?;
    let mut out = Vec::new();
    let read = reader
        .take(limit as u64 + 1)
        .read_to_end(&mut out)
        .map_err(|e| HelixError::CorruptBatch(format!("records: {e}")))?;
    if read > limit {
        return Err(HelixError::CorruptBatch(format!(
            "records section larger than {limit} bytes"
        )));
    }
    Ok(out)
}

/// One record of an uncompressed records section, as stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecordView<'a> {
    /// The record after its length prefix: attributes, timestamp delta,
    /// offset delta, key, value, headers.
    pub body: &'a [u8],
    pub timestamp_delta: i64,
    pub offset_delta: i32,
    /// Where the offset delta starts in `body` (just after the timestamp
    /// delta): what follows is copied as is when a cleaner rebases the
    /// timestamp.
    pub after_timestamp: usize,
    /// None for a null key.
    pub key: Option<&'a [u8]>,
    /// None for a null value: a tombstone.
    pub value: Option<&'a [u8]>,
}

/// The records of an uncompressed records section, in order.
pub fn split_records(section: &[u8]) -> Result<Vec<RecordView<'_>>> {
    let corrupt = |e: io::Error| HelixError::CorruptBatch(format!("records: {e}"));
    let mut out = Vec::new();
    let mut rest = section;
    while let Some(len) = read_varlong(&mut rest).map_err(corrupt)? {
        let len = usize::try_from(len)
            .ok()
            .filter(|l| (1..=rest.len()).contains(l))
            .ok_or_else(|| HelixError::CorruptBatch(format!("record length {len}")))?;
        let (body, next) = rest.split_at(len);
        rest = next;
        out.push(view(body).map_err(corrupt)?);
    }
    Ok(out)
}

fn view(body: &[u8]) -> io::Result<RecordView<'_>> {
    let mut r = body;
    let (timestamp_delta, offset_delta) = read_prefix(&mut r)?;
    // read_prefix consumed attributes, timestamp delta and offset delta;
    // find where the offset delta started by re-reading the first two.
    let mut t = &body[1..];
    read_varlong(&mut t)?;
    let after_timestamp = body.len() - t.len();
    let key = read_bytes(&mut r)?;
    let value = read_bytes(&mut r)?;
    Ok(RecordView {
        body,
        timestamp_delta,
        offset_delta,
        after_timestamp,
        key,
        value,
    })
}

/// A varint length (-1 = null) and that many bytes.
fn read_bytes<'a>(r: &mut &'a [u8]) -> io::Result<Option<&'a [u8]>> {
    let len = read_varlong(r)?.ok_or_else(|| cut("length"))?;
    if len < 0 {
        return Ok(None);
    }
    let len = usize::try_from(len).map_err(|_| cut("length range"))?;
    if len > r.len() {
        return Err(cut("bytes"));
    }
    let (bytes, rest) = r.split_at(len);
    *r = rest;
    Ok(Some(bytes))
}

/// attributes (1 byte), timestampDelta (varlong), offsetDelta (varint).
fn read_prefix(r: &mut impl Read) -> io::Result<(i64, i32)> {
    let mut attributes = [0u8; 1];
    r.read_exact(&mut attributes)?;
    let timestamp_delta = read_varlong(r)?.ok_or_else(|| cut("timestamp delta"))?;
    let offset_delta = read_varlong(r)?.ok_or_else(|| cut("offset delta"))?;
    let offset_delta = i32::try_from(offset_delta).map_err(|_| cut("offset delta range"))?;
    Ok((timestamp_delta, offset_delta))
}

fn cut(what: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, format!("record {what} missing"))
}

/// A zigzag varlong; Ok(None) at a clean end of stream before its first byte.
fn read_varlong(r: &mut impl Read) -> io::Result<Option<i64>> {
    let mut value: u64 = 0;
    for i in 0..10 {
        let mut b = [0u8; 1];
        if r.read(&mut b)? == 0 {
            return if i == 0 { Ok(None) } else { Err(cut("varint")) };
        }
        value |= u64::from(b[0] & 0x7f) << (7 * i);
        if b[0] & 0x80 == 0 {
            return Ok(Some(((value >> 1) as i64) ^ -((value & 1) as i64)));
        }
    }
    Err(cut("varint too long"))
}

/// The xerial framing the Java client wraps snappy in.
pub(super) const XERIAL_MAGIC: [u8; 8] = [0x82, b'S', b'N', b'A', b'P', b'P', b'Y', 0];
const XERIAL_HEADER_LEN: usize = 16;

/// Snappy as a stream: xerial-framed (magic, version, compat, then blocks of
/// `u32 length | raw snappy`) or one raw snappy block.
struct SnappyReader<'a> {
    input: &'a [u8],
    block: Vec<u8>,
    at: usize,
    framed: bool,
    started: bool,
}

impl<'a> SnappyReader<'a> {
    fn new(input: &'a [u8]) -> SnappyReader<'a> {
        let framed = input.len() >= XERIAL_HEADER_LEN && input[..8] == XERIAL_MAGIC;
        let input = if framed {
            &input[XERIAL_HEADER_LEN..]
        } else {
            input
        };
        SnappyReader {
            input,
            block: Vec::new(),
            at: 0,
            framed,
            started: false,
        }
    }

    /// Decompresses the next block into `self.block`; false at the end.
    fn next_block(&mut self) -> io::Result<bool> {
        let bad = |m: String| io::Error::new(io::ErrorKind::InvalidData, m);
        let raw: &[u8] = if self.framed {
            if self.input.is_empty() {
                return Ok(false);
            }
            if self.input.len() < 4 {
                return Err(bad("snappy block length cut".into()));
            }
            let len =
                u32::from_be_bytes([self.input[0], self.input[1], self.input[2], self.input[3]])
                    as usize;
            let block = self
                .input
                .get(4..4 + len)
                .ok_or_else(|| bad("snappy block cut".into()))?;
            self.input = &self.input[4 + len..];
            block
        } else {
            if self.started {
                return Ok(false);
            }
            self.input
        };
        self.started = true;
        let len = snap::raw::decompress_len(raw).map_err(|e| bad(e.to_string()))?;
        if len > MAX_SNAPPY_BLOCK {
            return Err(bad(format!(
                "snappy block of {len} bytes is over the limit"
            )));
        }
        self.block.resize(len, 0);
        snap::raw::Decoder::new()
            .decompress(raw, &mut self.block)
            .map_err(|e| bad(e.to_string()))?;
        self.at = 0;
        Ok(true)
    }
}

impl Read for SnappyReader<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        while self.at == self.block.len() {
            if !self.next_block()? {
                return Ok(0);
            }
        }
        let n = buf.len().min(self.block.len() - self.at);
        buf[..n].copy_from_slice(&self.block[self.at..self.at + n]);
        self.at += n;
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::replica::batch::tests::make_batch;
    use std::io::Write;

    /// Re-packs an uncompressed test batch's records with `codec`.
    fn compressed(codec: i16, values: &[&[u8]]) -> Vec<u8> {
        let plain = make_batch(values, -1, -1, 1000);
        let records = &plain[HEADER_LEN..];
        let packed: Vec<u8> = match codec {
            1 => {
                let mut e =
                    flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
                e.write_all(records).expect("gzip");
                e.finish().expect("gzip")
            }
            2 => {
                let block = snap::raw::Encoder::new()
                    .compress_vec(records)
                    .expect("snappy");
                let mut out = XERIAL_MAGIC.to_vec();
                out.extend_from_slice(&1i32.to_be_bytes());
                out.extend_from_slice(&1i32.to_be_bytes());
                out.extend_from_slice(&(block.len() as u32).to_be_bytes());
                out.extend_from_slice(&block);
                out
            }
            3 => {
                let mut e = lz4::EncoderBuilder::new().build(Vec::new()).expect("lz4");
                e.write_all(records).expect("lz4");
                let (out, r) = e.finish();
                r.expect("lz4");
                out
            }
            4 => zstd::encode_all(records, 1).expect("zstd"),
            _ => records.to_vec(),
        };
        let mut b = plain[..HEADER_LEN].to_vec();
        b.extend_from_slice(&packed);
        let len = (b.len() - 12) as i32;
        b[8..12].copy_from_slice(&len.to_be_bytes());
        b[21..23].copy_from_slice(&codec.to_be_bytes());
        let crc = crc32c::crc32c(&b[21..]);
        b[17..21].copy_from_slice(&crc.to_be_bytes());
        b
    }

    #[test]
    fn every_codec_is_walked_record_by_record() {
        for codec in 0..=4 {
            let b = compressed(codec, &[b"a", b"bb", b"ccc"]);
            let mut seen = Vec::new();
            let n = walk(&b, |r| {
                seen.push((r.offset_delta, r.timestamp_delta));
                true
            })
            .unwrap_or_else(|e| panic!("codec {codec}: {e}"));
            assert_eq!(n, 3, "codec {codec}");
            assert_eq!(seen, vec![(0, 0), (1, 10), (2, 20)], "codec {codec}");
        }
    }

    #[test]
    fn raw_snappy_without_framing_is_read_too() {
        let plain = make_batch(&[b"x", b"y"], -1, -1, 0);
        let block = snap::raw::Encoder::new()
            .compress_vec(&plain[HEADER_LEN..])
            .expect("snappy");
        let mut r = SnappyReader::new(&block);
        let mut out = Vec::new();
        r.read_to_end(&mut out).expect("read");
        assert_eq!(out, plain[HEADER_LEN..].to_vec());
    }

    #[test]
    fn garbage_in_a_compressed_batch_is_corrupt_not_a_panic() {
        for codec in 1..=4 {
            let mut b = compressed(codec, &[b"hello world hello world"]);
            let mid = HEADER_LEN + (b.len() - HEADER_LEN) / 2;
            b[mid] ^= 0x5a;
            b[HEADER_LEN] ^= 0xff;
            assert!(walk(&b, |_| true).is_err(), "codec {codec}");
        }
    }

    #[test]
    fn a_snappy_block_declaring_a_huge_length_is_refused_before_allocating() {
        // A raw snappy header is the decompressed length as a varint: 2^32-1.
        let bogus = [0xff, 0xff, 0xff, 0xff, 0x0f, 0x00];
        let mut r = SnappyReader::new(&bogus);
        assert!(r.read(&mut [0u8; 16]).is_err());
    }
}
