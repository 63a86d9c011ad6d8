//! Legacy message sets: the magic 0 and magic 1 message formats that
//! Produce v0-v2 requests carry and Fetch v0-v3 answers must hold (Kafka's
//! `LegacyRecord` / `AbstractLegacyRecordBatch`). Helix patch, not upstream.
//!
//! A message set is a sequence of entries `offset i64, size i32, crc u32,
//! magic i8, attributes i8, [timestamp i64 if magic 1], key bytes, value
//! bytes`. The CRC is CRC-32 (IEEE) of everything after it. An entry whose
//! attributes name a codec is a wrapper: its value is a compressed message
//! set of uncompressed inner messages of the same magic. Magic 1 inner
//! offsets are relative (0, 1, ...; the wrapper carries the absolute offset
//! of the last one); magic 0 inner offsets are absolute.
//!
//! Decoding checks every length against the bytes present before taking
//! them, and bounds what the wrappers of a set may inflate to in total, so
//! hostile input costs at most the caller's limit. A partial entry at the end of a set is not
//! an error (fetch answers end that way; Kafka ignores it in produce
//! requests too): [`DecodedSet::complete_bytes`] says where the whole
//! entries end.

use std::fmt;

use bytes::{BufMut, Bytes, BytesMut};

use super::{Compression, TimestampType, IEEE, NO_TIMESTAMP};

/// Attribute bits holding the codec.
const CODEC_MASK: i8 = 0x07;
/// Attribute bit for LogAppendTime (magic 1 only).
const TIMESTAMP_TYPE_BIT: i8 = 0x08;
/// Bytes before an entry's message: offset and size.
pub const LOG_OVERHEAD: usize = 12;
/// Smallest magic 0 message (crc, magic, attributes, two null lengths).
const MIN_MESSAGE_V0: usize = 4 + 1 + 1 + 4 + 4;
/// Smallest magic 1 message (magic 0 plus the timestamp).
const MIN_MESSAGE_V1: usize = MIN_MESSAGE_V0 + 8;

/// Why a message set was refused. Kafka answers the first with
/// CORRUPT_MESSAGE and the second with INVALID_RECORD.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LegacyError {
    /// Framing or checksum damage: the bytes are not what was sent.
    Corrupt(String),
    /// Well formed but not allowed (nested compression, an unknown codec,
    /// a wrapper inflating past the limit, mixed magics).
    Invalid(String),
}

impl fmt::Display for LegacyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LegacyError::Corrupt(m) => write!(f, "corrupt message set: {m}"),
            LegacyError::Invalid(m) => write!(f, "invalid message set: {m}"),
        }
    }
}

impl std::error::Error for LegacyError {}

type Result<T> = std::result::Result<T, LegacyError>;

fn corrupt<T>(m: impl Into<String>) -> Result<T> {
    Err(LegacyError::Corrupt(m.into()))
}

fn invalid<T>(m: impl Into<String>) -> Result<T> {
    Err(LegacyError::Invalid(m.into()))
}

/// One uncompressed message, with its absolute offset.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LegacyMessage {
    /// Absolute offset (for a wrapper's inner message, resolved from the
    /// wrapper's offset when relative).
    pub offset: i64,
    /// `NO_TIMESTAMP` for magic 0.
    pub timestamp: i64,
    /// Always `Creation` for magic 0.
    pub timestamp_type: TimestampType,
    /// The key, or None for a null key.
    pub key: Option<Bytes>,
    /// The value, or None for a null value.
    pub value: Option<Bytes>,
}

/// One top-level entry of a set: a plain message, or a wrapper's messages.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LegacyEntry {
    /// 0 or 1.
    pub magic: i8,
    /// The wrapper's codec; `None` for a plain message.
    pub compression: Compression,
    /// One message for a plain entry, the inner messages for a wrapper.
    pub messages: Vec<LegacyMessage>,
}

/// The whole entries of a set, and where they end.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DecodedSet {
    /// Entries in set order.
    pub entries: Vec<LegacyEntry>,
    /// Bytes taken by whole entries; the rest is a partial last entry.
    pub complete_bytes: usize,
}

/// The magic byte of the first entry of `set`, if that much is present.
pub fn magic_of(set: &[u8]) -> Option<i8> {
    set.get(LOG_OVERHEAD + 4).map(|m| *m as i8)
}

/// Decodes a magic 0/1 message set. The inner sets of its wrappers may
/// inflate to at most `max_inflated` bytes in total (many small wrappers
/// must not add up to more than one large one).
pub fn decode_message_set(set: &Bytes, max_inflated: usize) -> Result<DecodedSet> {
    let mut entries = Vec::new();
    let mut pos = 0usize;
    let mut left = max_inflated;
    while let Some((raw, next)) = next_raw(set, pos)? {
        let (entry, inflated) = expand(raw, left)?;
        left -= inflated;
        entries.push(entry);
        pos = next;
    }
    Ok(DecodedSet {
        entries,
        complete_bytes: pos,
    })
}

/// One entry as it sits in the set, CRC checked.
struct RawMessage {
    offset: i64,
    magic: i8,
    attributes: i8,
    timestamp: i64,
    key: Option<Bytes>,
    value: Option<Bytes>,
}

impl RawMessage {
    fn compression(&self) -> Result<Compression> {
        match self.attributes & CODEC_MASK {
            0 => Ok(Compression::None),
            1 => Ok(Compression::Gzip),
            2 => Ok(Compression::Snappy),
            3 => Ok(Compression::Lz4),
            c => invalid(format!("codec {c} is not allowed in magic {}", self.magic)),
        }
    }

    fn timestamp_type(&self) -> TimestampType {
        if self.magic > 0 && self.attributes & TIMESTAMP_TYPE_BIT != 0 {
            TimestampType::LogAppend
        } else {
            TimestampType::Creation
        }
    }
}

fn be_i32(b: &[u8], at: usize) -> i32 {
    i32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

fn be_i64(b: &[u8], at: usize) -> i64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[at..at + 8]);
    i64::from_be_bytes(a)
}

/// The entry at `pos`, and where the next starts; None when no whole entry
/// is left (nothing, or a partial one).
fn next_raw(set: &Bytes, pos: usize) -> Result<Option<(RawMessage, usize)>> {
    let rest = &set[pos..];
    if rest.len() < LOG_OVERHEAD {
        return Ok(None);
    }
    let offset = be_i64(rest, 0);
    let size = be_i32(rest, 8);
    let Ok(size) = usize::try_from(size) else {
        return corrupt(format!("message size {size} at offset {offset}"));
    };
    if size < MIN_MESSAGE_V0 {
        return corrupt(format!(
            "message size {size} below the minimum {MIN_MESSAGE_V0}"
        ));
    }
    if rest.len() - LOG_OVERHEAD < size {
        return Ok(None);
    }
    let start = pos + LOG_OVERHEAD;
    let msg = &set[start..start + size];
    let crc = be_i32(msg, 0) as u32;
    let magic = msg[4] as i8;
    let min = match magic {
        0 => MIN_MESSAGE_V0,
        1 => MIN_MESSAGE_V1,
        m => return corrupt(format!("magic {m} in a legacy message set")),
    };
    if size < min {
        return corrupt(format!("magic {magic} message of {size} bytes"));
    }
    let actual = IEEE.checksum(&msg[4..]);
    if actual != crc {
        return corrupt(format!("CRC {crc:#010x} != computed {actual:#010x}"));
    }
    let attributes = msg[5] as i8;
    let mut at = 6;
    let timestamp = if magic == 1 {
        at += 8;
        be_i64(msg, 6)
    } else {
        NO_TIMESTAMP
    };
    let whole = set.slice(start..start + size);
    let key = bytes_field(&whole, &mut at)?;
    let value = bytes_field(&whole, &mut at)?;
    if at != size {
        return corrupt(format!("{} bytes after the value", size - at));
    }
    Ok(Some((
        RawMessage {
            offset,
            magic,
            attributes,
            timestamp,
            key,
            value,
        },
        start + size,
    )))
}

/// A nullable `bytes` field (i32 length, -1 for null) of `msg` at `*at`.
fn bytes_field(msg: &Bytes, at: &mut usize) -> Result<Option<Bytes>> {
    if msg.len() - *at < 4 {
        return corrupt("message ends inside a length");
    }
    let len = be_i32(msg, *at);
    *at += 4;
    if len == -1 {
        return Ok(None);
    }
    let Ok(len) = usize::try_from(len) else {
        return corrupt(format!("field length {len}"));
    };
    if msg.len() - *at < len {
        return corrupt(format!("field of {len} bytes past the message end"));
    }
    let b = msg.slice(*at..*at + len);
    *at += len;
    Ok(Some(b))
}

/// A raw entry as messages: itself, or its wrapper's inner messages.
/// Also returns the bytes inflated (0 for a plain message), at most
/// `max_inflated`.
fn expand(raw: RawMessage, max_inflated: usize) -> Result<(LegacyEntry, usize)> {
    let compression = raw.compression()?;
    if compression == Compression::None {
        let entry = LegacyEntry {
            magic: raw.magic,
            compression,
            messages: vec![LegacyMessage {
                offset: raw.offset,
                timestamp: raw.timestamp,
                timestamp_type: raw.timestamp_type(),
                key: raw.key,
                value: raw.value,
            }],
        };
        return Ok((entry, 0));
    }
    let Some(value) = raw.value.as_ref() else {
        return corrupt("compressed wrapper with a null value");
    };
    let inner = super::legacy_codec::inflate(compression, raw.magic, value, max_inflated)?;
    let mut messages = Vec::new();
    let mut pos = 0usize;
    while let Some((m, next)) = next_raw(&inner, pos)? {
        if m.magic != raw.magic {
            return invalid(format!(
                "inner magic {} in a magic {} wrapper",
                m.magic, raw.magic
            ));
        }
        if m.attributes & CODEC_MASK != 0 {
            return invalid("a compressed message inside a compressed wrapper");
        }
        let (timestamp, timestamp_type) = match raw.timestamp_type() {
            // A LogAppendTime wrapper's time is every inner message's.
            TimestampType::LogAppend => (raw.timestamp, TimestampType::LogAppend),
            TimestampType::Creation => (m.timestamp, TimestampType::Creation),
        };
        messages.push(LegacyMessage {
            offset: m.offset,
            timestamp,
            timestamp_type,
            key: m.key,
            value: m.value,
        });
        pos = next;
    }
    if pos != inner.len() {
        return corrupt("a compressed wrapper ends inside a message");
    }
    if messages.is_empty() {
        return corrupt("a compressed wrapper holds no message");
    }
    if raw.magic > 0 {
        // Relative inner offsets: the wrapper holds the last one's absolute.
        let last = messages[messages.len() - 1].offset;
        for m in &mut messages {
            m.offset = raw.offset.wrapping_sub(last).wrapping_add(m.offset);
        }
    }
    let entry = LegacyEntry {
        magic: raw.magic,
        compression,
        messages,
    };
    Ok((entry, inner.len()))
}

/// Writes one message (offset, size, crc, body) to `out`.
fn put_message(
    out: &mut BytesMut,
    offset: i64,
    magic: i8,
    attributes: i8,
    timestamp: i64,
    key: Option<&[u8]>,
    value: Option<&[u8]>,
) -> Result<()> {
    let field = |b: Option<&[u8]>| 4 + b.map_or(0, <[u8]>::len);
    let size = MIN_MESSAGE_V0 - 8 + usize::from(magic > 0) * 8 + field(key) + field(value);
    let Ok(size32) = i32::try_from(size) else {
        return invalid(format!("message of {size} bytes"));
    };
    out.reserve(LOG_OVERHEAD + size);
    out.put_i64(offset);
    out.put_i32(size32);
    let crc_at = out.len();
    out.put_u32(0);
    let body_at = out.len();
    out.put_i8(magic);
    out.put_i8(attributes);
    if magic > 0 {
        out.put_i64(timestamp);
    }
    for b in [key, value] {
        match b {
            None => out.put_i32(-1),
            Some(b) => {
                // Fits: the whole message's size did.
                out.put_i32(b.len() as i32);
                out.put_slice(b);
            }
        }
    }
    let crc = IEEE.checksum(&out[body_at..]);
    out[crc_at..crc_at + 4].copy_from_slice(&crc.to_be_bytes());
    Ok(())
}

/// How [`encode_message_set`] writes a run of messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LegacyEncodeOptions {
    /// 0 or 1.
    pub magic: i8,
    /// `None` writes one entry per message; a codec writes one wrapper.
    pub compression: Compression,
    /// For magic 1: LogAppendTime sets the attribute bit and replaces every
    /// timestamp by `log_append_time`.
    pub timestamp_type: TimestampType,
    /// The append time of a LogAppendTime run.
    pub log_append_time: i64,
}

/// Appends `messages` (absolute offsets, ascending) to `out` as Kafka's
/// `MemoryRecordsBuilder` writes them: for magic 0 timestamps are dropped;
/// a compressed run is one wrapper whose offset is the last message's, with
/// relative inner offsets for magic 1, and whose timestamp is the largest
/// (or the append time).
pub fn encode_message_set(
    out: &mut BytesMut,
    messages: &[LegacyMessage],
    options: &LegacyEncodeOptions,
) -> Result<()> {
    let magic = options.magic;
    if !(0..=1).contains(&magic) {
        return invalid(format!("magic {magic} is not a legacy format"));
    }
    let Some(last) = messages.last() else {
        return Ok(());
    };
    let log_append = magic > 0 && options.timestamp_type == TimestampType::LogAppend;
    let ts_bit = if log_append { TIMESTAMP_TYPE_BIT } else { 0 };
    let stamp = |m: &LegacyMessage| {
        if log_append {
            options.log_append_time
        } else {
            m.timestamp
        }
    };
    if options.compression == Compression::None {
        for m in messages {
            put_message(
                out,
                m.offset,
                magic,
                ts_bit,
                stamp(m),
                m.key.as_deref(),
                m.value.as_deref(),
            )?;
        }
        return Ok(());
    }
    let base = messages[0].offset;
    let mut inner = BytesMut::new();
    for m in messages {
        let offset = if magic > 0 { m.offset - base } else { m.offset };
        put_message(
            &mut inner,
            offset,
            magic,
            ts_bit,
            stamp(m),
            m.key.as_deref(),
            m.value.as_deref(),
        )?;
    }
    let compressed = super::legacy_codec::deflate(options.compression, &inner)?;
    let wrapper_ts = if log_append {
        options.log_append_time
    } else {
        messages
            .iter()
            .map(|m| m.timestamp)
            .max()
            .unwrap_or(NO_TIMESTAMP)
    };
    put_message(
        out,
        last.offset,
        magic,
        options.compression as i8 | ts_bit,
        wrapper_ts,
        None,
        Some(&compressed),
    )
}
