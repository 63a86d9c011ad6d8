//! Bounded inflate and deflate of legacy wrapper values (Helix patch).
//!
//! The crate's `Decompressor`s inflate without limit; a produce request is
//! untrusted, so a wrapper here may inflate to at most the caller's bound
//! (a few KiB of gzip can otherwise claim gigabytes).

use std::io::Read;

use bytes::{Bytes, BytesMut};

use super::legacy::LegacyError;
use super::Compression;
#[allow(unused_imports)]
use crate::compression::{self as cmpr, Compressor};

/// xerial snappy-java's stream header, as Kafka's Java clients write it.
const XERIAL_MAGIC: &[u8; 8] = b"\x82SNAPPY\x00";
/// Bytes of the xerial header: magic, version, compatible version.
const XERIAL_HEADER: usize = 16;

fn invalid<T>(m: impl Into<String>) -> Result<T, LegacyError> {
    Err(LegacyError::Invalid(m.into()))
}

fn corrupt<T>(m: impl Into<String>) -> Result<T, LegacyError> {
    Err(LegacyError::Corrupt(m.into()))
}

/// Reads all of `r`, refusing more than `limit` bytes.
#[allow(dead_code)]
fn read_bounded(r: impl Read, limit: usize, codec: &str) -> Result<Bytes, LegacyError> {
    let mut out = Vec::new();
    let cap = u64::try_from(limit).unwrap_or(u64::MAX).saturating_add(1);
    if let Err(e) = r.take(cap).read_to_end(&mut out) {
        return corrupt(format!("{codec}: {e}"));
    }
    if out.len() > limit {
        return invalid(format!("{codec} wrapper inflates past {limit} bytes"));
    }
    Ok(Bytes::from(out))
}

/// The inner message set of a magic `magic` wrapper compressed with `codec`.
pub(super) fn inflate(
    codec: Compression,
    magic: i8,
    data: &[u8],
    limit: usize,
) -> Result<Bytes, LegacyError> {
    // Unused when no codec feature is built.
    let _ = limit;
    match codec {
        Compression::None => Ok(Bytes::copy_from_slice(data)),
        #[cfg(feature = "gzip")]
        Compression::Gzip => read_bounded(flate2::read::MultiGzDecoder::new(data), limit, "gzip"),
        #[cfg(feature = "snappy")]
        Compression::Snappy => unsnappy(data, limit),
        #[cfg(feature = "lz4")]
        Compression::Lz4 if magic == 0 => lz4_frame_ignoring_header_checksum(data, limit),
        #[cfg(feature = "lz4")]
        Compression::Lz4 => match lz4::Decoder::new(data) {
            Ok(d) => read_bounded(d, limit, "lz4"),
            Err(e) => corrupt(format!("lz4: {e}")),
        },
        #[allow(unreachable_patterns)]
        other => invalid(format!("codec {other:?} in a legacy wrapper")),
    }
}

/// An LZ4 frame read without checking its header checksum, as Kafka reads
/// magic 0 wrappers: clients of that era (Kafka 0.8/0.9, librdkafka for
/// MsgVersion 0) compute it over the wrong bytes (KAFKA-3160). Block and
/// content checksums are skipped as well.
#[cfg(feature = "lz4")]
fn lz4_frame_ignoring_header_checksum(data: &[u8], limit: usize) -> Result<Bytes, LegacyError> {
    const FRAME_MAGIC: u32 = 0x184D_2204;
    const BLOCK_CHECKSUM: u8 = 0x10;
    const CONTENT_SIZE: u8 = 0x08;
    const CONTENT_CHECKSUM: u8 = 0x04;
    const DICT_ID: u8 = 0x01;
    const UNCOMPRESSED_BLOCK: u32 = 0x8000_0000;
    let mut rest = data;
    let mut take = |n: usize| -> Result<&[u8], LegacyError> {
        if rest.len() < n {
            return corrupt("lz4: frame ends early");
        }
        let (head, tail) = rest.split_at(n);
        rest = tail;
        Ok(head)
    };
    let le32 = |b: &[u8]| u32::from_le_bytes([b[0], b[1], b[2], b[3]]);
    if le32(take(4)?) != FRAME_MAGIC {
        return corrupt("lz4: not an LZ4 frame");
    }
    let flags = take(2)?;
    let (flg, bd) = (flags[0], flags[1]);
    let max_block = match (bd >> 4) & 0x07 {
        4 => 64 << 10,
        5 => 256 << 10,
        6 => 1 << 20,
        7 => 4 << 20,
        other => return corrupt(format!("lz4: block size code {other}")),
    };
    let optional = usize::from(flg & CONTENT_SIZE != 0) * 8 + usize::from(flg & DICT_ID != 0) * 4;
    take(optional + 1)?; // the optional fields and the header checksum
    let mut out = Vec::new();
    loop {
        let size = le32(take(4)?);
        if size == 0 {
            break;
        }
        let len = (size & !UNCOMPRESSED_BLOCK) as usize;
        if len > max_block {
            return corrupt(format!("lz4: block of {len} bytes"));
        }
        let block = take(len)?;
        let room = limit - out.len();
        if size & UNCOMPRESSED_BLOCK != 0 {
            if len > room {
                return invalid(format!("lz4 wrapper inflates past {limit} bytes"));
            }
            out.extend_from_slice(block);
        } else {
            let cap = i32::try_from(max_block.min(room)).unwrap_or(i32::MAX);
            match lz4::block::decompress(block, Some(cap)) {
                Ok(b) => out.extend(b),
                Err(e) => return corrupt(format!("lz4 block (or past {limit} bytes): {e}")),
            }
        }
        if flg & BLOCK_CHECKSUM != 0 {
            take(4)?;
        }
    }
    if flg & CONTENT_CHECKSUM != 0 {
        take(4)?;
    }
    Ok(Bytes::from(out))
}

/// Snappy as Kafka's clients write it: xerial-framed blocks, or (librdkafka)
/// one raw snappy block.
#[cfg(feature = "snappy")]
fn unsnappy(data: &[u8], limit: usize) -> Result<Bytes, LegacyError> {
    let raw_block = |block: &[u8], room: usize| -> Result<Vec<u8>, LegacyError> {
        let len = match snap::raw::decompress_len(block) {
            Ok(n) => n,
            Err(e) => return corrupt(format!("snappy: {e}")),
        };
        if len > room {
            return invalid(format!("snappy wrapper inflates past {limit} bytes"));
        }
        snap::raw::Decoder::new()
            .decompress_vec(block)
            .or_else(|e| corrupt(format!("snappy: {e}")))
    };
    if !data.starts_with(XERIAL_MAGIC) {
        return raw_block(data, limit).map(Bytes::from);
    }
    if data.len() < XERIAL_HEADER {
        return corrupt("snappy: truncated xerial header");
    }
    let mut out = Vec::new();
    let mut rest = &data[XERIAL_HEADER..];
    while !rest.is_empty() {
        if rest.len() < 4 {
            return corrupt("snappy: truncated block length");
        }
        let len = u32::from_be_bytes([rest[0], rest[1], rest[2], rest[3]]) as usize;
        rest = &rest[4..];
        if rest.len() < len {
            return corrupt("snappy: block past the end of the wrapper");
        }
        out.extend(raw_block(&rest[..len], limit - out.len())?);
        rest = &rest[len..];
    }
    Ok(Bytes::from(out))
}

/// `inner` compressed with `codec` as Kafka's Java clients write it.
pub(super) fn deflate(codec: Compression, inner: &[u8]) -> Result<Bytes, LegacyError> {
    let mut out = BytesMut::new();
    let fill = |b: &mut BytesMut| -> anyhow::Result<()> {
        b.extend_from_slice(inner);
        Ok(())
    };
    let done: anyhow::Result<()> = match codec {
        Compression::None => {
            out.extend_from_slice(inner);
            Ok(())
        }
        #[cfg(feature = "gzip")]
        Compression::Gzip => cmpr::Gzip::compress(&mut out, fill),
        #[cfg(feature = "snappy")]
        Compression::Snappy => cmpr::Snappy::compress(&mut out, fill),
        #[cfg(feature = "lz4")]
        Compression::Lz4 => cmpr::Lz4::compress(&mut out, fill),
        #[allow(unreachable_patterns)]
        other => return invalid(format!("codec {other:?} in a legacy wrapper")),
    };
    match done {
        Ok(()) => Ok(out.freeze()),
        Err(e) => invalid(format!("compressing a wrapper: {e}")),
    }
}
