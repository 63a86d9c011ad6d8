//! DeleteRecords (moves a partition's log start offset, ordered with its
//! appends through the partition's Raft log) and OffsetForLeaderEpoch
//! (answered from the leader epochs stored in the log: epoch = Raft term).

use kafka_protocol::messages::delete_records_response::{
    DeleteRecordsPartitionResult, DeleteRecordsTopicResult,
};
use kafka_protocol::messages::offset_for_leader_epoch_response::{
    EpochEndOffset, OffsetForLeaderTopicResult,
};
use kafka_protocol::messages::{
    DeleteRecordsRequest, DeleteRecordsResponse, OffsetForLeaderEpochRequest,
    OffsetForLeaderEpochResponse,
};

use super::context::Partitions;
use crate::error::HelixError;
use crate::offset::Offset;
use crate::topics::replica;

/// DeleteRecords' "up to the high watermark" marker.
const TO_HIGH_WATERMARK: i64 = -1;

pub async fn delete_records(
    node: Partitions<'_>,
    req: DeleteRecordsRequest,
) -> DeleteRecordsResponse {
    let mut resp = DeleteRecordsResponse::default();
    for t in req.topics {
        let topic = node.topics.get(&t.name);
        let mut out = DeleteRecordsTopicResult::default();
        out.name = t.name.clone();
        // Every partition's deletion is started before any is awaited.
        let mut waits = Vec::new();
        for p in t.partitions {
            let part = replica(topic.as_ref(), p.partition_index, false).cloned();
            waits.push((
                p.partition_index,
                tokio::spawn(async move {
                    let part = part?;
                    part.check_leader(-1)?;
                    let hw = part.high_watermark();
                    let before = if p.offset == TO_HIGH_WATERMARK {
                        hw
                    } else {
                        Offset(p.offset)
                    };
                    if before < Offset(0) || before > hw {
                        return Err(HelixError::OffsetOutOfRange);
                    }
                    part.delete_records(before).await
                }),
            ));
        }
        for (index, wait) in waits {
            let mut r = DeleteRecordsPartitionResult::default();
            r.partition_index = index;
            r.low_watermark = -1;
            match wait.await {
                Ok(Ok(low)) => r.low_watermark = low.0,
                Ok(Err(e)) => r.error_code = e.kafka_code(),
                Err(_) => r.error_code = HelixError::ShuttingDown.kafka_code(),
            }
            out.partitions.push(r);
        }
        resp.topics.push(out);
    }
    resp
}

pub fn offset_for_leader_epoch(
    node: Partitions<'_>,
    req: OffsetForLeaderEpochRequest,
) -> OffsetForLeaderEpochResponse {
    let mut resp = OffsetForLeaderEpochResponse::default();
    for t in req.topics {
        let topic = node.topics.get(&t.topic);
        let mut out = OffsetForLeaderTopicResult::default();
        out.topic = t.topic.clone();
        for p in t.partitions {
            let mut r = EpochEndOffset::default();
            r.partition = p.partition;
            r.leader_epoch = -1;
            r.end_offset = -1;
            match replica(topic.as_ref(), p.partition, false) {
                Err(e) => r.error_code = e.kafka_code(),
                Ok(part) => {
                    let current = part.leader_epoch();
                    if let Err(e) = part.check_leader(p.current_leader_epoch) {
                        r.error_code = e.kafka_code();
                    } else if p.leader_epoch >= current {
                        // The current epoch ends at the log end, as Kafka
                        // answers: a client's position (at most some
                        // leader's high watermark) is never beyond it.
                        r.leader_epoch = current;
                        r.end_offset = part.log_end_offset().0;
                    } else {
                        // Acknowledged entries survive every leader change,
                        // so an epoch's end here is at or past any position a
                        // consumer read in it: no clamp to the high watermark.
                        let asked = u64::try_from(p.leader_epoch).unwrap_or(0);
                        match part.reader().end_offset_for_term(asked) {
                            Ok(Some(end)) => {
                                r.leader_epoch = i32::try_from(end.term).unwrap_or(i32::MAX);
                                r.end_offset = end.end_offset;
                            }
                            // Older than every epoch the log holds: Kafka
                            // answers the epoch asked and where the log's
                            // first epoch starts (no earlier record is left).
                            // -1 would make librdkafka reset the position by
                            // auto.offset.reset, to the log start or end.
                            Ok(None) => {
                                r.leader_epoch = p.leader_epoch;
                                r.end_offset = part.log_start_offset().0;
                            }
                            Err(e) => r.error_code = HelixError::from(e).kafka_code(),
                        }
                    }
                }
            }
            out.partitions.push(r);
        }
        resp.topics.push(out);
    }
    resp
}

#[cfg(test)]
#[path = "records_tests.rs"]
mod tests;
