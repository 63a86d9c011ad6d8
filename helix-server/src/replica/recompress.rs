//! A topic's `compression.type` (KIP-390 levels included): batches whose
//! codec differs from the topic's are recompressed by the leader before it
//! proposes them, as Kafka's `LogValidator` rebuilds them. Offsets (assigned
//! later, at apply), timestamps, producer fields and the record count are
//! kept; only the records section, the codec bits, the length and the CRC
//! change. A batch already in the topic's codec is stored as sent (Kafka
//! does not recompress for a different level either).
//!
//! The records are streamed from the decoder into the encoder; the output
//! is bounded by the topic's `max.message.bytes` (larger: MESSAGE_TOO_LARGE,
//! as Kafka refuses a rebuilt batch that grew past it), so a small batch
//! that decompresses to gigabytes is refused without holding them.

use std::io::{self, Read, Write};

use bytes::Bytes;

use super::batch::parse_header;
use super::records::{XERIAL_MAGIC, records_reader};
use crate::error::{HelixError, Result};

/// What a topic stores, from `compression.type` and its level.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TopicCompression {
    /// `producer`: as the producer sent it.
    Producer,
    Uncompressed,
    /// Level 1-9, or -1 for the codec's default (6).
    Gzip(i32),
    Snappy,
    /// Level 1-17; 9 (the default) uses LZ4's fast compressor, others LZ4 HC.
    Lz4(i32),
    /// Level -131072 to 22.
    Zstd(i32),
}

impl TopicCompression {
    /// The codec id in a batch's attributes; None for `producer`.
    fn codec(self) -> Option<i16> {
        match self {
            TopicCompression::Producer => None,
            TopicCompression::Uncompressed => Some(0),
            TopicCompression::Gzip(_) => Some(1),
            TopicCompression::Snappy => Some(2),
            TopicCompression::Lz4(_) => Some(3),
            TopicCompression::Zstd(_) => Some(4),
        }
    }
}

/// Kafka's default LZ4 level: its fast compressor.
const LZ4_DEFAULT_LEVEL: i32 = 9;
/// Input bytes per xerial snappy block (the Java client's default).
const SNAPPY_BLOCK: usize = 32 << 10;

/// `batch` (one whole, validated batch) in the topic's codec: the same
/// bytes when nothing changes, else a rebuilt batch of at most `max_bytes`.
pub fn recompress(batch: &Bytes, target: TopicCompression, max_bytes: usize) -> Result<Bytes> {
    let h = parse_header(batch)?;
    let Some(codec) = target.codec().filter(|c| *c != h.compression()) else {
        return Ok(batch.clone());
    };
    let mut reader = records_reader(batch)?;
    let limit = max_bytes.saturating_sub(super::batch::HEADER_LEN);
    let out = Bounded::new(limit);
    let io_err = |e: io::Error| match e.kind() {
        io::ErrorKind::WriteZero => HelixError::MessageTooLarge(
            max_bytes.saturating_add(1),
            i32::try_from(max_bytes).unwrap_or(i32::MAX),
        ),
        _ => HelixError::CorruptBatch(format!("recompressing: {e}")),
    };
    let records = match target {
        TopicCompression::Producer | TopicCompression::Uncompressed => {
            let mut out = out;
            io::copy(&mut reader, &mut out).map_err(io_err)?;
            out.bytes
        }
        TopicCompression::Gzip(level) => {
            let level = if level < 0 { 6 } else { level as u32 };
            let mut e = flate2::write::GzEncoder::new(out, flate2::Compression::new(level));
            io::copy(&mut reader, &mut e).map_err(io_err)?;
            e.finish().map_err(io_err)?.bytes
        }
        TopicCompression::Snappy => snappy_xerial(&mut reader, out).map_err(io_err)?.bytes,
        TopicCompression::Lz4(level) => {
            let mut e = lz4::EncoderBuilder::new()
                .level(if level == LZ4_DEFAULT_LEVEL {
                    0
                } else {
                    level as u32
                })
                .block_size(lz4::BlockSize::Max64KB)
                .block_mode(lz4::BlockMode::Independent)
                .checksum(lz4::ContentChecksum::NoChecksum)
                .build(out)
                .map_err(io_err)?;
            io::copy(&mut reader, &mut e).map_err(io_err)?;
            let (out, done) = e.finish();
            done.map_err(io_err)?;
            out.bytes
        }
        TopicCompression::Zstd(level) => {
            let mut e = zstd::stream::write::Encoder::new(out, level).map_err(io_err)?;
            io::copy(&mut reader, &mut e).map_err(io_err)?;
            e.finish().map_err(io_err)?.bytes
        }
    };
    let rebuilt = helix_wal::batch::with_records(batch, codec, &records)
        .map_err(|e| HelixError::CorruptBatch(e.to_string()))?;
    Ok(Bytes::from(rebuilt))
}

/// Snappy in the xerial framing Kafka's brokers and the Java client write
/// (magic, version 1, compatible version 1, then `u32 length | block`).
fn snappy_xerial(reader: &mut dyn Read, mut out: Bounded) -> io::Result<Bounded> {
    out.write_all(&XERIAL_MAGIC)?;
    out.write_all(&1i32.to_be_bytes())?;
    out.write_all(&1i32.to_be_bytes())?;
    let mut encoder = snap::raw::Encoder::new();
    let mut block = vec![0u8; SNAPPY_BLOCK];
    loop {
        let mut filled = 0;
        while filled < block.len() {
            let n = reader.read(&mut block[filled..])?;
            if n == 0 {
                break;
            }
            filled += n;
        }
        if filled == 0 {
            return Ok(out);
        }
        let compressed = encoder
            .compress_vec(&block[..filled])
            .map_err(io::Error::other)?;
        let len = u32::try_from(compressed.len()).map_err(io::Error::other)?;
        out.write_all(&len.to_be_bytes())?;
        out.write_all(&compressed)?;
    }
}

/// A buffer that refuses to grow past its limit (WriteZero).
struct Bounded {
    bytes: Vec<u8>,
    limit: usize,
}

impl Bounded {
    fn new(limit: usize) -> Bounded {
        Bounded {
            bytes: Vec::new(),
            limit,
        }
    }
}

impl Write for Bounded {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        if self.bytes.len() + buf.len() > self.limit {
            return Err(io::Error::new(
                io::ErrorKind::WriteZero,
                "recompressed batch larger than max.message.bytes",
            ));
        }
        self.bytes.extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests;
