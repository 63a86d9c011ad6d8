//! Compact binary encoding of the messages one node sends another in one
//! batch (the server carries it as bytes on its peer streams).
//!
//! ```text
//! batch   := version:u8 from:varint to:varint count:varint message*
//! message := tag:u8 group_delta:zigzag-varint term:varint body
//! ```
//! Integers are LEB128 varints; a message's group id is the (zigzag) delta
//! from the previous message's, so a batch sorted by group spends one byte on
//! it. Append entries carry no index (they are
//! contiguous from `prev_index + 1`). A heartbeat is `tag group term commit
//! (commit - acknowledged)`: about 6 bytes for a caught-up group, which is
//! what makes thousands of coalesced heartbeats per tick cheap.
//!
//! Decoding is input-driven: every declared count and length is checked
//! against the bytes actually left before anything is allocated; any
//! inconsistency is `RaftError::Codec`, never a panic.

use bytes::{BufMut, Bytes, BytesMut};

use crate::error::RaftError;
use crate::message::{Message, MessageBody};
use crate::types::{Entry, EntryKind, GroupId, LogIndex, NodeId, Term};

const VERSION: u8 = 1;
/// Smallest encoding of one message (tag, group, term): bounds `count`.
const MIN_MESSAGE_BYTES: usize = 3;
/// Smallest encoding of one entry (term, kind, length).
const MIN_ENTRY_BYTES: usize = 3;

const TAG_PRE_VOTE: u8 = 1;
const TAG_PRE_VOTE_RESPONSE: u8 = 2;
const TAG_VOTE: u8 = 3;
const TAG_VOTE_RESPONSE: u8 = 4;
const TAG_APPEND: u8 = 5;
const TAG_APPEND_RESPONSE: u8 = 6;
const TAG_HEARTBEAT: u8 = 7;
const TAG_HEARTBEAT_RESPONSE: u8 = 8;
const TAG_COMMIT: u8 = 9;
const TAG_TIMEOUT_NOW: u8 = 10;

/// All messages from one node to another produced by one `ready` round.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MessageBatch {
    pub from: NodeId,
    pub to: NodeId,
    pub messages: Vec<Message>,
}

impl MessageBatch {
    /// Splits the batch for the two peer channels (docs/design.md): appends that
    /// carry entries go on the data channel; everything else (votes,
    /// heartbeats, responses, commit notices, empty probes) on the control
    /// channel, so a large append never delays a heartbeat. Order within
    /// each channel is kept.
    #[must_use]
    pub fn split_by_channel(self) -> (MessageBatch, MessageBatch) {
        let (data, control): (Vec<Message>, Vec<Message>) = self
            .messages
            .into_iter()
            .partition(|m| m.body.carries_entries());
        (
            MessageBatch {
                from: self.from,
                to: self.to,
                messages: control,
            },
            MessageBatch {
                from: self.from,
                to: self.to,
                messages: data,
            },
        )
    }
}

fn put_varint(out: &mut BytesMut, mut v: u64) {
    while v >= 0x80 {
        out.put_u8((v as u8) | 0x80);
        v >>= 7;
    }
    out.put_u8(v as u8);
}

/// Encodes a batch. Every message must be `from -> to` of the batch (the
/// per-message addresses are not repeated on the wire).
#[must_use]
pub fn encode_batch(batch: &MessageBatch) -> Bytes {
    let mut out = BytesMut::with_capacity(16 + batch.messages.len() * 8);
    out.put_u8(VERSION);
    put_varint(&mut out, batch.from.0);
    put_varint(&mut out, batch.to.0);
    put_varint(&mut out, batch.messages.len() as u64);
    let mut prev_group = 0u64;
    for m in &batch.messages {
        encode_message(&mut out, m, prev_group);
        prev_group = m.group.0;
    }
    out.freeze()
}

fn zigzag(delta: u64) -> u64 {
    let d = delta as i64;
    ((d << 1) ^ (d >> 63)) as u64
}

fn unzigzag(z: u64) -> u64 {
    ((z >> 1) as i64 ^ -((z & 1) as i64)) as u64
}

fn encode_message(out: &mut BytesMut, m: &Message, prev_group: u64) {
    let tag = match &m.body {
        MessageBody::PreVote { .. } => TAG_PRE_VOTE,
        MessageBody::PreVoteResponse { .. } => TAG_PRE_VOTE_RESPONSE,
        MessageBody::Vote { .. } => TAG_VOTE,
        MessageBody::VoteResponse { .. } => TAG_VOTE_RESPONSE,
        MessageBody::Append { .. } => TAG_APPEND,
        MessageBody::AppendResponse { .. } => TAG_APPEND_RESPONSE,
        MessageBody::Heartbeat { .. } => TAG_HEARTBEAT,
        MessageBody::HeartbeatResponse { .. } => TAG_HEARTBEAT_RESPONSE,
        MessageBody::Commit { .. } => TAG_COMMIT,
        MessageBody::TimeoutNow => TAG_TIMEOUT_NOW,
    };
    out.put_u8(tag);
    put_varint(out, zigzag(m.group.0.wrapping_sub(prev_group)));
    put_varint(out, m.term.0);
    match &m.body {
        MessageBody::PreVote {
            last_index,
            last_term,
        } => {
            put_varint(out, last_index.0);
            put_varint(out, last_term.0);
        }
        MessageBody::Vote {
            last_index,
            last_term,
            transfer,
        } => {
            put_varint(out, last_index.0);
            put_varint(out, last_term.0);
            out.put_u8(u8::from(*transfer));
        }
        MessageBody::PreVoteResponse { reject } | MessageBody::VoteResponse { reject } => {
            out.put_u8(u8::from(*reject))
        }
        MessageBody::Append {
            prev_index,
            prev_term,
            entries,
            commit,
            acknowledged,
        } => {
            put_varint(out, prev_index.0);
            put_varint(out, prev_term.0);
            put_varint(out, commit.0);
            put_varint(out, commit.0.wrapping_sub(acknowledged.0));
            put_varint(out, entries.len() as u64);
            for e in entries {
                put_varint(out, e.term.0);
                out.put_u8(match e.kind {
                    EntryKind::Noop => 0,
                    EntryKind::Normal => 1,
                });
                put_varint(out, e.data.len() as u64);
                out.put_slice(&e.data);
            }
        }
        MessageBody::AppendResponse {
            reject,
            index,
            hint_index,
            hint_term,
            last_index,
            durable,
        } => {
            out.put_u8(u8::from(*reject));
            put_varint(out, index.0);
            put_varint(out, hint_index.0);
            put_varint(out, hint_term.0);
            put_varint(out, last_index.0);
            put_varint(out, durable.0);
        }
        MessageBody::Heartbeat {
            commit,
            acknowledged,
        }
        | MessageBody::Commit {
            commit,
            acknowledged,
        } => {
            put_varint(out, commit.0);
            put_varint(out, commit.0.wrapping_sub(acknowledged.0));
        }
        MessageBody::HeartbeatResponse { matched, durable } => {
            put_varint(out, matched.0);
            put_varint(out, matched.0.wrapping_sub(durable.0));
        }
        MessageBody::TimeoutNow => {}
    }
}

/// A cursor over untrusted input.
struct Reader {
    buf: Bytes,
    pos: usize,
}

impl Reader {
    fn remaining(&self) -> usize {
        self.buf.len() - self.pos
    }

    fn u8(&mut self) -> Result<u8, RaftError> {
        let b = *self
            .buf
            .get(self.pos)
            .ok_or(RaftError::Codec("truncated"))?;
        self.pos += 1;
        Ok(b)
    }

    fn flag(&mut self) -> Result<bool, RaftError> {
        match self.u8()? {
            0 => Ok(false),
            1 => Ok(true),
            _ => Err(RaftError::Codec("flag not 0 or 1")),
        }
    }

    fn varint(&mut self) -> Result<u64, RaftError> {
        let mut v: u64 = 0;
        for shift in (0..64).step_by(7) {
            let b = self.u8()?;
            let bits = u64::from(b & 0x7f);
            if shift == 63 && bits > 1 {
                return Err(RaftError::Codec("varint overflows u64"));
            }
            v |= bits << shift;
            if b & 0x80 == 0 {
                return Ok(v);
            }
        }
        Err(RaftError::Codec("varint longer than 10 bytes"))
    }

    fn bytes(&mut self, len: usize) -> Result<Bytes, RaftError> {
        if len > self.remaining() {
            return Err(RaftError::Codec("length beyond the batch"));
        }
        let b = self.buf.slice(self.pos..self.pos + len);
        self.pos += len;
        Ok(b)
    }

    /// A declared count, checked against the bytes left.
    fn count(&mut self, min_item_bytes: usize) -> Result<usize, RaftError> {
        let n = self.varint()?;
        if n > (self.remaining() / min_item_bytes) as u64 {
            return Err(RaftError::Codec("count larger than the bytes left"));
        }
        Ok(n as usize)
    }
}

/// Decodes a batch produced by `encode_batch`. Entry payloads are zero-copy
/// slices of `buf`.
pub fn decode_batch(buf: Bytes) -> Result<MessageBatch, RaftError> {
    let mut r = Reader { buf, pos: 0 };
    if r.u8()? != VERSION {
        return Err(RaftError::Codec("unknown version"));
    }
    let from = NodeId(r.varint()?);
    let to = NodeId(r.varint()?);
    let count = r.count(MIN_MESSAGE_BYTES)?;
    let mut messages = Vec::with_capacity(count);
    let mut prev_group = 0u64;
    for _ in 0..count {
        let m = decode_message(&mut r, from, to, prev_group)?;
        prev_group = m.group.0;
        messages.push(m);
    }
    if r.remaining() != 0 {
        return Err(RaftError::Codec("trailing bytes"));
    }
    Ok(MessageBatch { from, to, messages })
}

fn decode_message(
    r: &mut Reader,
    from: NodeId,
    to: NodeId,
    prev_group: u64,
) -> Result<Message, RaftError> {
    let tag = r.u8()?;
    let group = GroupId(prev_group.wrapping_add(unzigzag(r.varint()?)));
    let term = Term(r.varint()?);
    let body = match tag {
        TAG_PRE_VOTE => MessageBody::PreVote {
            last_index: LogIndex(r.varint()?),
            last_term: Term(r.varint()?),
        },
        TAG_VOTE => MessageBody::Vote {
            last_index: LogIndex(r.varint()?),
            last_term: Term(r.varint()?),
            transfer: r.flag()?,
        },
        TAG_PRE_VOTE_RESPONSE => MessageBody::PreVoteResponse { reject: r.flag()? },
        TAG_VOTE_RESPONSE => MessageBody::VoteResponse { reject: r.flag()? },
        TAG_APPEND => decode_append(r)?,
        TAG_APPEND_RESPONSE => MessageBody::AppendResponse {
            reject: r.flag()?,
            index: LogIndex(r.varint()?),
            hint_index: LogIndex(r.varint()?),
            hint_term: Term(r.varint()?),
            last_index: LogIndex(r.varint()?),
            durable: LogIndex(r.varint()?),
        },
        TAG_HEARTBEAT | TAG_COMMIT => {
            let commit = r.varint()?;
            let acknowledged = LogIndex(commit.wrapping_sub(r.varint()?));
            let commit = LogIndex(commit);
            if tag == TAG_HEARTBEAT {
                MessageBody::Heartbeat {
                    commit,
                    acknowledged,
                }
            } else {
                MessageBody::Commit {
                    commit,
                    acknowledged,
                }
            }
        }
        TAG_HEARTBEAT_RESPONSE => {
            let matched = r.varint()?;
            let durable = LogIndex(matched.wrapping_sub(r.varint()?));
            MessageBody::HeartbeatResponse {
                matched: LogIndex(matched),
                durable,
            }
        }
        TAG_TIMEOUT_NOW => MessageBody::TimeoutNow,
        _ => return Err(RaftError::Codec("unknown message tag")),
    };
    Ok(Message {
        group,
        from,
        to,
        term,
        body,
    })
}

fn decode_append(r: &mut Reader) -> Result<MessageBody, RaftError> {
    let prev_index = LogIndex(r.varint()?);
    let prev_term = Term(r.varint()?);
    let commit = r.varint()?;
    let acknowledged = LogIndex(commit.wrapping_sub(r.varint()?));
    let n = r.count(MIN_ENTRY_BYTES)?;
    if prev_index.0.checked_add(n as u64).is_none() {
        return Err(RaftError::Codec("entry index overflows"));
    }
    let mut entries = Vec::with_capacity(n);
    for k in 0..n {
        let term = Term(r.varint()?);
        let kind = match r.u8()? {
            0 => EntryKind::Noop,
            1 => EntryKind::Normal,
            _ => return Err(RaftError::Codec("unknown entry kind")),
        };
        let len = usize::try_from(r.varint()?).map_err(|_| RaftError::Codec("entry length"))?;
        let data = r.bytes(len)?;
        entries.push(Entry {
            term,
            index: LogIndex(prev_index.0 + 1 + k as u64),
            kind,
            data,
        });
    }
    Ok(MessageBody::Append {
        prev_index,
        prev_term,
        entries,
        commit: LogIndex(commit),
        acknowledged,
    })
}
