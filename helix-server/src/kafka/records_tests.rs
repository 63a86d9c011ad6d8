//! OffsetForLeaderEpoch answers as Kafka's leader epoch cache does
//! (`LeaderEpochFileCache.endOffsetFor`).

use bytes::Buf;
use kafka_protocol::messages::*;
use kafka_protocol::protocol::Decodable;

use crate::kafka::tests::{broker, roundtrip};
use crate::kafka::wire_topic;
use crate::replica::batch::tests::make_batch;

async fn produce_one(b: &std::sync::Arc<crate::broker::Broker>) {
    let mut pd = produce_request::PartitionProduceData::default();
    pd.index = 0;
    pd.records = Some(make_batch(&[b"v"], -1, -1, 1000));
    let mut td = produce_request::TopicProduceData::default();
    td.name = wire_topic("t");
    td.partition_data = vec![pd];
    let mut r = ProduceRequest::default();
    r.acks = -1;
    r.timeout_ms = 5000;
    r.topic_data = vec![td];
    let mut out = roundtrip(b, ApiKey::Produce, 9, &r.into()).await;
    let resp = ProduceResponse::decode(&mut out, 9).expect("decodes");
    assert_eq!(resp.responses[0].partition_responses[0].error_code, 0);
}

/// (error, leader epoch, end offset) for `epoch` of partition 0 of "t".
async fn end_of(b: &std::sync::Arc<crate::broker::Broker>, epoch: i32) -> (i16, i32, i64) {
    let mut p = offset_for_leader_epoch_request::OffsetForLeaderPartition::default();
    p.leader_epoch = epoch;
    p.current_leader_epoch = -1;
    let mut t = offset_for_leader_epoch_request::OffsetForLeaderTopic::default();
    t.topic = wire_topic("t");
    t.partitions = vec![p];
    let mut r = OffsetForLeaderEpochRequest::default();
    r.replica_id = (-1).into();
    r.topics = vec![t];
    let mut out = roundtrip(b, ApiKey::OffsetForLeaderEpoch, 4, &r.into()).await;
    let resp = OffsetForLeaderEpochResponse::decode(&mut out, 4).expect("decodes");
    assert_eq!(out.remaining(), 0);
    let e = &resp.topics[0].partitions[0];
    (e.error_code, e.leader_epoch, e.end_offset)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_epoch_older_than_the_log_ends_where_the_log_starts_not_undefined() {
    let dir = tempfile::tempdir().expect("tempdir");
    let b = broker(dir.path()).await;
    produce_one(&b).await;
    produce_one(&b).await;
    let current = b
        .topic("t")
        .expect("t")
        .local(0)
        .expect("local")
        .leader_epoch();
    assert!(current >= 1, "a leader has an epoch of at least 1");
    // The current epoch ends at the log end.
    assert_eq!(end_of(&b, current).await, (0, current, 2));
    // An epoch before every entry: Kafka answers the epoch asked and the
    // first epoch's start; -1/-1 makes librdkafka reset the position.
    assert_eq!(end_of(&b, 0).await, (0, 0, 0));
}
