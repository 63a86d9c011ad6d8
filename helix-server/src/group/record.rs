//! The coordinator's durable records and their binary encoding.
//!
//! One Raft entry of a coordinator partition carries one [`encode_entry`]
//! batch: `version u8 | count u32 | crc32c u32 | records`, each record
//! `kind u8 | length u32 | body`. Integers are big-endian, strings are
//! `u16` length + UTF-8 (`0xFFFF` = null), blobs `u32` length + bytes.
//! Decoding checks every declared length against what is left before it
//! allocates, verifies the checksum, rejects unknown versions and kinds, and
//! never panics: an entry is either decoded whole or refused.
//!
//! Replaying these records in log order rebuilds a partition's view
//! (committed offsets, each group's last stored generation and assignment).

use bytes::{Buf, BufMut, Bytes, BytesMut};

use super::error::GroupError;

/// Format version written by this code. Decoding refuses any other.
pub const ENTRY_FORMAT_VERSION: u8 = 1;
const ENTRY_HEADER_BYTES: usize = 1 + 4 + 4;
const RECORD_HEADER_BYTES: usize = 1 + 4;
const NULL_STRING: u16 = u16::MAX;

const KIND_OFFSET: u8 = 1;
const KIND_OFFSET_TOMBSTONE: u8 = 2;
const KIND_GROUP: u8 = 3;
const KIND_GROUP_TOMBSTONE: u8 = 4;

/// One committed offset of a group for a topic partition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OffsetRecord {
    pub group: String,
    pub topic: String,
    pub partition: i32,
    pub offset: i64,
    pub leader_epoch: i32,
    pub metadata: Option<String>,
    pub commit_timestamp_ms: u64,
    /// Explicit expiry asked by OffsetCommit v2–v4 `retention_time_ms`;
    /// `None` uses the group-level retention rule.
    pub expire_timestamp_ms: Option<u64>,
}

/// One member as stored with its group's generation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemberRecord {
    pub member_id: String,
    pub instance_id: Option<String>,
    pub client_id: String,
    pub client_host: String,
    pub rebalance_timeout_ms: i32,
    pub session_timeout_ms: i32,
    /// The member's metadata for the group's selected protocol.
    pub subscription: Bytes,
    pub assignment: Bytes,
}

/// A group's stored generation: written when the leader's assignment is
/// accepted, when a static member is replaced, and when the group empties.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupRecord {
    pub group: String,
    pub protocol_type: String,
    pub generation: i32,
    pub protocol: Option<String>,
    pub leader: Option<String>,
    pub timestamp_ms: u64,
    pub members: Vec<MemberRecord>,
}

/// A durable change to a coordinator partition's view.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Record {
    Offset(OffsetRecord),
    OffsetTombstone {
        group: String,
        topic: String,
        partition: i32,
    },
    Group(GroupRecord),
    GroupTombstone {
        group: String,
    },
}

impl Record {
    /// The group the record belongs to (every record belongs to one).
    pub fn group(&self) -> &str {
        match self {
            Record::Offset(offset) => &offset.group,
            Record::OffsetTombstone { group, .. } | Record::GroupTombstone { group } => group,
            Record::Group(group) => &group.group,
        }
    }
}

/// Encodes records as one entry. Strings longer than `u16::MAX - 1` bytes
/// cannot reach here: request validation bounds every string first.
pub fn encode_entry(records: &[Record]) -> Bytes {
    let mut body = BytesMut::new();
    for record in records {
        let mut one = BytesMut::new();
        let kind = match record {
            Record::Offset(offset) => {
                put_str(&mut one, &offset.group);
                put_str(&mut one, &offset.topic);
                one.put_i32(offset.partition);
                one.put_i64(offset.offset);
                one.put_i32(offset.leader_epoch);
                put_opt_str(&mut one, offset.metadata.as_deref());
                one.put_u64(offset.commit_timestamp_ms);
                one.put_u64(offset.expire_timestamp_ms.unwrap_or(u64::MAX));
                KIND_OFFSET
            }
            Record::OffsetTombstone {
                group,
                topic,
                partition,
            } => {
                put_str(&mut one, group);
                put_str(&mut one, topic);
                one.put_i32(*partition);
                KIND_OFFSET_TOMBSTONE
            }
            Record::Group(group) => {
                encode_group(&mut one, group);
                KIND_GROUP
            }
            Record::GroupTombstone { group } => {
                put_str(&mut one, group);
                KIND_GROUP_TOMBSTONE
            }
        };
        body.put_u8(kind);
        body.put_u32(one.len() as u32);
        body.put_slice(&one);
    }
    let mut entry = BytesMut::with_capacity(ENTRY_HEADER_BYTES + body.len());
    entry.put_u8(ENTRY_FORMAT_VERSION);
    entry.put_u32(records.len() as u32);
    entry.put_u32(crc32c::crc32c(&body));
    entry.put_slice(&body);
    entry.freeze()
}

fn encode_group(out: &mut BytesMut, group: &GroupRecord) {
    put_str(out, &group.group);
    put_str(out, &group.protocol_type);
    out.put_i32(group.generation);
    put_opt_str(out, group.protocol.as_deref());
    put_opt_str(out, group.leader.as_deref());
    out.put_u64(group.timestamp_ms);
    out.put_u32(group.members.len() as u32);
    for member in &group.members {
        put_str(out, &member.member_id);
        put_opt_str(out, member.instance_id.as_deref());
        put_str(out, &member.client_id);
        put_str(out, &member.client_host);
        out.put_i32(member.rebalance_timeout_ms);
        out.put_i32(member.session_timeout_ms);
        out.put_u32(member.subscription.len() as u32);
        out.put_slice(&member.subscription);
        out.put_u32(member.assignment.len() as u32);
        out.put_slice(&member.assignment);
    }
}

fn put_str(out: &mut BytesMut, value: &str) {
    put_opt_str(out, Some(value));
}

fn put_opt_str(out: &mut BytesMut, value: Option<&str>) {
    match value {
        Some(text) => {
            debug_assert!(
                text.len() < usize::from(NULL_STRING),
                "validated before encoding"
            );
            out.put_u16(text.len() as u16);
            out.put_slice(text.as_bytes());
        }
        None => out.put_u16(NULL_STRING),
    }
}

/// Decodes one entry written by [`encode_entry`], or says why it cannot.
pub fn decode_entry(entry: &[u8]) -> Result<Vec<Record>, GroupError> {
    let mut input = Input(entry);
    let version = input.u8()?;
    if version != ENTRY_FORMAT_VERSION {
        return Err(GroupError::RecordVersion(version));
    }
    let count = input.u32()? as usize;
    let checksum = input.u32()?;
    if crc32c::crc32c(input.0) != checksum {
        return Err(GroupError::RecordChecksum);
    }
    // Every record takes at least its header: bound the allocation by input.
    input.need(count.saturating_mul(RECORD_HEADER_BYTES))?;
    let mut records = Vec::with_capacity(count);
    for _ in 0..count {
        let kind = input.u8()?;
        let length = input.u32()? as usize;
        let mut body = Input(input.take(length)?);
        let record = match kind {
            KIND_OFFSET => Record::Offset(OffsetRecord {
                group: body.string()?,
                topic: body.string()?,
                partition: body.i32()?,
                offset: body.i64()?,
                leader_epoch: body.i32()?,
                metadata: body.opt_string()?,
                commit_timestamp_ms: body.u64()?,
                expire_timestamp_ms: Some(body.u64()?).filter(|&at| at != u64::MAX),
            }),
            KIND_OFFSET_TOMBSTONE => Record::OffsetTombstone {
                group: body.string()?,
                topic: body.string()?,
                partition: body.i32()?,
            },
            KIND_GROUP => Record::Group(decode_group(&mut body)?),
            KIND_GROUP_TOMBSTONE => Record::GroupTombstone {
                group: body.string()?,
            },
            other => return Err(GroupError::RecordKind(other)),
        };
        body.finish()?;
        records.push(record);
    }
    input.finish()?;
    Ok(records)
}

fn decode_group(body: &mut Input<'_>) -> Result<GroupRecord, GroupError> {
    let group = body.string()?;
    let protocol_type = body.string()?;
    let generation = body.i32()?;
    let protocol = body.opt_string()?;
    let leader = body.opt_string()?;
    let timestamp_ms = body.u64()?;
    let count = body.u32()? as usize;
    // A member takes at least 2+2+2+2+4+4+4+4 bytes.
    body.need(count.saturating_mul(24))?;
    let mut members = Vec::with_capacity(count);
    for _ in 0..count {
        members.push(MemberRecord {
            member_id: body.string()?,
            instance_id: body.opt_string()?,
            client_id: body.string()?,
            client_host: body.string()?,
            rebalance_timeout_ms: body.i32()?,
            session_timeout_ms: body.i32()?,
            subscription: body.blob()?,
            assignment: body.blob()?,
        });
    }
    Ok(GroupRecord {
        group,
        protocol_type,
        generation,
        protocol,
        leader,
        timestamp_ms,
        members,
    })
}

/// A cursor over untrusted bytes: every read checks what is left first.
struct Input<'a>(&'a [u8]);

impl<'a> Input<'a> {
    fn need(&self, needed: usize) -> Result<(), GroupError> {
        if self.0.len() < needed {
            return Err(GroupError::RecordTruncated {
                needed,
                left: self.0.len(),
            });
        }
        Ok(())
    }

    fn take(&mut self, length: usize) -> Result<&'a [u8], GroupError> {
        self.need(length)?;
        let (head, tail) = self.0.split_at(length);
        self.0 = tail;
        Ok(head)
    }

    fn u8(&mut self) -> Result<u8, GroupError> {
        self.need(1)?;
        Ok(self.0.get_u8())
    }

    fn u16(&mut self) -> Result<u16, GroupError> {
        self.need(2)?;
        Ok(self.0.get_u16())
    }

    fn u32(&mut self) -> Result<u32, GroupError> {
        self.need(4)?;
        Ok(self.0.get_u32())
    }

    fn i32(&mut self) -> Result<i32, GroupError> {
        self.need(4)?;
        Ok(self.0.get_i32())
    }

    fn u64(&mut self) -> Result<u64, GroupError> {
        self.need(8)?;
        Ok(self.0.get_u64())
    }

    fn i64(&mut self) -> Result<i64, GroupError> {
        self.need(8)?;
        Ok(self.0.get_i64())
    }

    fn opt_string(&mut self) -> Result<Option<String>, GroupError> {
        let length = self.u16()?;
        if length == NULL_STRING {
            return Ok(None);
        }
        let raw = self.take(usize::from(length))?;
        let text = std::str::from_utf8(raw).map_err(|_| GroupError::RecordUtf8)?;
        Ok(Some(text.to_owned()))
    }

    fn string(&mut self) -> Result<String, GroupError> {
        self.opt_string()?.ok_or(GroupError::RecordUtf8)
    }

    fn blob(&mut self) -> Result<Bytes, GroupError> {
        let length = self.u32()? as usize;
        Ok(Bytes::copy_from_slice(self.take(length)?))
    }

    fn finish(&self) -> Result<(), GroupError> {
        match self.0.len() {
            0 => Ok(()),
            left => Err(GroupError::RecordTrailing(left)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Vec<Record> {
        vec![
            Record::Offset(OffsetRecord {
                group: "g".into(),
                topic: "orders".into(),
                partition: 3,
                offset: 42,
                leader_epoch: -1,
                metadata: Some("meta".into()),
                commit_timestamp_ms: 1_000,
                expire_timestamp_ms: None,
            }),
            Record::Offset(OffsetRecord {
                group: "g".into(),
                topic: "orders".into(),
                partition: 4,
                offset: 7,
                leader_epoch: 5,
                metadata: None,
                commit_timestamp_ms: 2_000,
                expire_timestamp_ms: Some(9_000),
            }),
            Record::OffsetTombstone {
                group: "g".into(),
                topic: "t".into(),
                partition: 0,
            },
            Record::Group(GroupRecord {
                group: "g".into(),
                protocol_type: "consumer".into(),
                generation: 3,
                protocol: Some("range".into()),
                leader: Some("m-1".into()),
                timestamp_ms: 77,
                members: vec![MemberRecord {
                    member_id: "m-1".into(),
                    instance_id: Some("i-1".into()),
                    client_id: "c".into(),
                    client_host: "/127.0.0.1".into(),
                    rebalance_timeout_ms: 300_000,
                    session_timeout_ms: 45_000,
                    subscription: Bytes::from_static(b"sub"),
                    assignment: Bytes::from_static(b"asg"),
                }],
            }),
            Record::GroupTombstone {
                group: "old".into(),
            },
        ]
    }

    #[test]
    fn entry_round_trips_every_kind() {
        let records = sample();
        assert_eq!(decode_entry(&encode_entry(&records)).unwrap(), records);
        assert_eq!(decode_entry(&encode_entry(&[])).unwrap(), vec![]);
    }

    #[test]
    fn every_truncation_is_refused() {
        let entry = encode_entry(&sample());
        for cut in 0..entry.len() {
            assert!(decode_entry(&entry[..cut]).is_err(), "cut at {cut} decoded");
        }
    }

    #[test]
    fn every_bit_flip_is_refused() {
        let entry = encode_entry(&sample());
        for bit in 0..entry.len() * 8 {
            let mut bad = entry.to_vec();
            bad[bit / 8] ^= 1 << (bit % 8);
            assert!(decode_entry(&bad).is_err(), "flip of bit {bit} decoded");
        }
    }

    #[test]
    fn huge_declared_counts_fail_without_allocating() {
        let mut entry = BytesMut::new();
        entry.put_u8(ENTRY_FORMAT_VERSION);
        entry.put_u32(u32::MAX);
        entry.put_u32(crc32c::crc32c(&[]));
        assert!(matches!(
            decode_entry(&entry),
            Err(GroupError::RecordTruncated { .. })
        ));
    }

    #[test]
    fn unknown_version_and_kind_are_refused() {
        let mut entry = encode_entry(&sample()).to_vec();
        entry[0] = 9;
        assert_eq!(decode_entry(&entry), Err(GroupError::RecordVersion(9)));

        let mut body = BytesMut::new();
        body.put_u8(200);
        body.put_u32(0);
        let mut entry = BytesMut::new();
        entry.put_u8(ENTRY_FORMAT_VERSION);
        entry.put_u32(1);
        entry.put_u32(crc32c::crc32c(&body));
        entry.put_slice(&body);
        assert_eq!(decode_entry(&entry), Err(GroupError::RecordKind(200)));
    }

    #[test]
    fn pseudo_random_garbage_is_refused() {
        let mut state: u64 = 0x9E37_79B9_7F4A_7C15;
        for round in 0..5_000 {
            let length = round % 97;
            let garbage: Vec<u8> = (0..length)
                .map(|_| {
                    state ^= state << 13;
                    state ^= state >> 7;
                    state ^= state << 17;
                    state as u8
                })
                .collect();
            // Garbage with a valid version byte reaches the checksum check.
            let mut with_version = garbage.clone();
            if let Some(first) = with_version.first_mut() {
                *first = ENTRY_FORMAT_VERSION;
            }
            assert!(
                decode_entry(&garbage).is_err(),
                "garbage round {round} decoded"
            );
            assert!(
                decode_entry(&with_version).is_err(),
                "garbage round {round} decoded"
            );
        }
    }
}
