//! ListOffsets: earliest, latest, by timestamp, max timestamp. Latest is the
//! high watermark, or for isolation_level 1 (read_committed) the last
//! stable offset (ADR 0026), which also bounds the lookups by time; the
//! two are equal without open transactions.
//!
//! v0 (clients of Kafka 0.9 and earlier, served as Kafka 3.9 serves them)
//! answers a list of offsets instead of one offset and timestamp. Kafka
//! lists segment start offsets for it; here the list holds the one offset
//! the same lookup finds for v1+ (latest: the high watermark; earliest: the
//! log start), which is all that clients of that era ask for.

use kafka_protocol::messages::list_offsets_response::{
    ListOffsetsPartitionResponse, ListOffsetsTopicResponse,
};
use kafka_protocol::messages::{ListOffsetsRequest, ListOffsetsResponse};

use super::context::Partitions;
use crate::error::HelixError;
use crate::offset::Offset;
use crate::replica::Partition;
use crate::replica::batch::{BatchHeader, first_offset_at_or_after};
use crate::topics::replica;

const LATEST: i64 = -1;
const EARLIEST: i64 = -2;
const MAX_TIMESTAMP: i64 = -3;
const EARLIEST_LOCAL: i64 = -4;
const LATEST_TIERED: i64 = -5;

/// ListOffsets' `isolation_level` for read_committed (v2+).
const READ_COMMITTED: i8 = 1;

pub fn handle(node: Partitions<'_>, req: ListOffsetsRequest, version: i16) -> ListOffsetsResponse {
    let mut resp = ListOffsetsResponse::default();
    for t in req.topics {
        let topic = node.topics.get(&t.name);
        let mut out = ListOffsetsTopicResponse::default();
        out.name = t.name.clone();
        for p in t.partitions {
            let mut r = ListOffsetsPartitionResponse::default();
            r.partition_index = p.partition_index;
            match replica(topic.as_ref(), p.partition_index, false) {
                Err(e) => r.error_code = e.kafka_code(),
                Ok(part) => match part
                    .check_leader(p.current_leader_epoch)
                    .and_then(|()| lookup(part, p.timestamp, req.isolation_level))
                {
                    Ok((offset, _)) if version == 0 => {
                        if offset >= 0 && p.max_num_offsets > 0 {
                            r.old_style_offsets = vec![offset];
                        }
                    }
                    Ok((offset, timestamp)) => {
                        r.offset = offset;
                        r.timestamp = timestamp;
                        if version >= 4 {
                            r.leader_epoch = part.leader_epoch();
                        }
                    }
                    Err(e) => r.error_code = e.kafka_code(),
                },
            }
            out.partitions.push(r);
        }
        resp.topics.push(out);
    }
    resp
}

/// (offset, timestamp) for one partition; offset -1 when no record matches.
/// Only offsets below the last fetchable one are answered: the high
/// watermark, or for read_committed the last stable offset (Kafka's
/// `lastFetchableOffset`).
fn lookup(p: &Partition, timestamp: i64, isolation: i8) -> Result<(i64, i64), HelixError> {
    let hw = if isolation == READ_COMMITTED {
        p.last_stable_offset().0
    } else {
        p.high_watermark().0
    };
    match timestamp {
        LATEST | LATEST_TIERED => Ok((hw, -1)),
        EARLIEST | EARLIEST_LOCAL => Ok((p.log_start_offset().0, -1)),
        MAX_TIMESTAMP => {
            let Some((base, max_ts)) = p.max_timestamp().filter(|(o, _)| *o < hw) else {
                return Ok((-1, -1));
            };
            // The record holding it: the first at or after the maximum.
            let batch = p.read(Offset(base), 1)?;
            Ok(first_offset_at_or_after(&batch, max_ts).unwrap_or((base, max_ts)))
        }
        ts if ts >= 0 => {
            let Some(base) = p.reader().offset_for_timestamp(ts)? else {
                return Ok((-1, -1));
            };
            if base >= hw {
                return Ok((-1, -1));
            }
            // The batch may start before the first matching record: look
            // inside it for the exact record. A compressed batch answers
            // with the batch (clients skip the earlier records it holds).
            let batch = p.read(Offset(base), 1)?;
            let found = first_offset_at_or_after(&batch, ts).or_else(|| {
                BatchHeader::parse(&batch)
                    .ok()
                    .map(|h| (h.base_offset, h.max_timestamp))
            });
            Ok(found.filter(|(o, _)| *o < hw).unwrap_or((-1, -1)))
        }
        _ => Err(HelixError::InvalidRequest(format!("timestamp {timestamp}"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::replica::txn_tests::replica_with_scenario;

    #[test]
    fn latest_for_read_committed_is_the_last_stable_offset() {
        let dir = tempfile::tempdir().expect("tempdir");
        let r = replica_with_scenario(dir.path());
        let lookup = |isolation| lookup(&r.partition, LATEST, isolation).expect("lookup");
        assert_eq!(lookup(READ_COMMITTED), (8, -1), "A's open transaction at 8");
        assert_eq!(lookup(0), (10, -1), "the high watermark");
        // A's open transaction holds its record (at 8, time 1400) back
        // from read_committed lookups by time.
        let by_time = |isolation| super::lookup(&r.partition, 1_400, isolation).expect("lookup");
        assert_eq!(by_time(READ_COMMITTED), (-1, -1));
        assert_eq!(by_time(0), (8, 1_400));
    }
}
