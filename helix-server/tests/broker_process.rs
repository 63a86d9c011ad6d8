//! Black-box tests of the real binary: framing and version negotiation
//! with raw requests, bad input, restart after kill -9, the data-directory
//! lock and graceful shutdown.

mod common;

use std::time::Duration;

use bytes::Bytes;
use common::{BrokerProcess, batch};
use kafka_protocol::messages::*;
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::records::RecordBatchDecoder;

fn topic_name(s: &str) -> TopicName {
    TopicName(StrBytes::from_string(s.to_string()))
}

fn produce(c: &mut common::Client, topic: &str, partition: i32, records: Bytes) -> (i16, i64) {
    let mut pd = produce_request::PartitionProduceData::default();
    pd.index = partition;
    pd.records = Some(records);
    let mut td = produce_request::TopicProduceData::default();
    td.name = topic_name(topic);
    td.partition_data = vec![pd];
    let mut req = ProduceRequest::default();
    req.acks = -1;
    req.timeout_ms = 5000;
    req.topic_data = vec![td];
    let ResponseKind::Produce(resp) = c.call(ApiKey::Produce, 9, req.into()) else {
        panic!("kind")
    };
    let p = &resp.responses[0].partition_responses[0];
    (p.error_code, p.base_offset)
}

/// (error, high watermark, values) of a fetch from `offset`.
fn fetch(
    c: &mut common::Client,
    topic: &str,
    partition: i32,
    offset: i64,
) -> (i16, i64, Vec<String>) {
    let mut fp = fetch_request::FetchPartition::default();
    fp.partition = partition;
    fp.fetch_offset = offset;
    fp.partition_max_bytes = 1 << 20;
    let mut ft = fetch_request::FetchTopic::default();
    ft.topic = topic_name(topic);
    ft.partitions = vec![fp];
    let mut req = FetchRequest::default();
    req.max_bytes = 1 << 20;
    req.max_wait_ms = 10;
    req.topics = vec![ft];
    let ResponseKind::Fetch(resp) = c.call(ApiKey::Fetch, 11, req.into()) else {
        panic!("kind")
    };
    let p = &resp.responses[0].partitions[0];
    let mut values = Vec::new();
    if let Some(mut records) = p.records.clone() {
        for set in RecordBatchDecoder::decode_all(&mut records).expect("stored batches decode") {
            for r in set.records {
                values.push(String::from_utf8(r.value.expect("value").to_vec()).expect("utf8"));
            }
        }
    }
    (p.error_code, p.high_watermark, values)
}

#[test]
fn api_versions_advertises_what_is_served_and_bad_frames_close_only_their_connection() {
    let dir = tempfile::tempdir().expect("tempdir");
    let broker = BrokerProcess::start(dir.path());
    let mut c = broker.connect();
    let ResponseKind::ApiVersions(v) =
        c.call(ApiKey::ApiVersions, 3, ApiVersionsRequest::default().into())
    else {
        panic!("kind")
    };
    assert_eq!(v.error_code, 0);
    let produce = v
        .api_keys
        .iter()
        .find(|k| k.api_key == 0)
        .expect("produce advertised");
    assert_eq!(
        (produce.min_version, produce.max_version),
        (0, 13),
        "KIP-896: min 0 for librdkafka"
    );
    let join = v
        .api_keys
        .iter()
        .find(|k| k.api_key == ApiKey::JoinGroup as i16)
        .expect("the group coordinator's APIs are advertised");
    assert_eq!((join.min_version, join.max_version), (0, 9));

    // Negative length, a length of 2^31-1, and an unknown API key each close
    // their own connection and nothing else.
    let mut neg = broker.connect();
    neg.send_raw(&(-1i32).to_be_bytes());
    assert!(neg.is_closed());
    let mut huge = broker.connect();
    huge.send_raw(&i32::MAX.to_be_bytes());
    assert!(huge.is_closed());
    let mut unknown = broker.connect();
    unknown.send_frame(&[0x7f, 0x7f, 0, 0, 0, 0, 0, 1, 0, 0]);
    assert!(unknown.is_closed());
    // Metadata v0 declaring 2^31-1 topics in an 18-byte frame: refused before
    // anything is allocated for them (the decoder would otherwise try to
    // reserve tens of GiB and abort the process).
    let mut huge_array = broker.connect();
    let mut frame = vec![0, 3, 0, 0, 0, 0, 0, 9, 0, 0];
    frame.extend_from_slice(&i32::MAX.to_be_bytes());
    frame.extend_from_slice(&[0, 1, b'x', 0]);
    huge_array.send_frame(&frame);
    assert!(huge_array.is_closed());
    let mut truncated = broker.connect();
    truncated.send_raw(&100i32.to_be_bytes());
    truncated.send_raw(&[0, 18, 0, 3]);
    drop(truncated);

    let ResponseKind::ApiVersions(again) =
        c.call(ApiKey::ApiVersions, 0, ApiVersionsRequest::default().into())
    else {
        panic!("kind")
    };
    assert_eq!(again.error_code, 0, "the first connection still works");
}

#[test]
fn acknowledged_records_and_topics_survive_kill_9_and_offsets_continue() {
    let dir = tempfile::tempdir().expect("tempdir");
    let broker = BrokerProcess::start(dir.path());
    let mut c = broker.connect();
    common::create_topic(&mut c, "durable", 2);
    assert_eq!(
        produce(&mut c, "durable", 1, batch(&["a", "b", "c"], 1000)),
        (0, 0)
    );
    assert_eq!(produce(&mut c, "durable", 1, batch(&["d"], 2000)), (0, 3));
    let mut bad = batch(&["x"], 0).to_vec();
    let last = bad.len() - 1;
    bad[last] ^= 0xff;
    assert_eq!(
        produce(&mut c, "durable", 0, Bytes::from(bad)).0,
        2,
        "CORRUPT_MESSAGE"
    );
    let port = broker.addr.port();
    broker.kill();

    let broker = BrokerProcess::start_on(dir.path(), port);
    let mut c = broker.connect();
    let (err, hw, values) = fetch(&mut c, "durable", 1, 0);
    assert_eq!((err, hw), (0, 4));
    assert_eq!(values, vec!["a", "b", "c", "d"]);
    assert_eq!(
        produce(&mut c, "durable", 1, batch(&["e"], 3000)),
        (0, 4),
        "no gap, no repeat"
    );
    let (_, hw, values) = fetch(&mut c, "durable", 1, 4);
    assert_eq!((hw, values), (5, vec!["e".to_string()]));
    let (err, _, _) = fetch(&mut c, "durable", 1, 99);
    assert_eq!(err, 1, "OFFSET_OUT_OF_RANGE");
}

#[test]
fn a_second_broker_on_the_same_data_dir_is_refused_and_sigterm_exits_cleanly() {
    let dir = tempfile::tempdir().expect("tempdir");
    let broker = BrokerProcess::start(dir.path());
    let out = common::output_within(
        std::process::Command::new(env!("CARGO_BIN_EXE_helix-server"))
            .args([
                "--listen",
                &format!("127.0.0.1:{}", common::free_port()),
                "--data-dir",
            ])
            .arg(dir.path()),
        Duration::from_secs(60),
    );
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("in use by another broker"), "{stderr}");
    let status = broker.terminate();
    assert!(status.success(), "exit status {status:?}");
}

/// (error, epoch, end offset) for `epoch` of partition 0.
fn end_of_epoch(c: &mut common::Client, topic: &str, epoch: i32) -> (i16, i32, i64) {
    let mut p = offset_for_leader_epoch_request::OffsetForLeaderPartition::default();
    p.partition = 0;
    p.current_leader_epoch = -1;
    p.leader_epoch = epoch;
    let mut t = offset_for_leader_epoch_request::OffsetForLeaderTopic::default();
    t.topic = topic_name(topic);
    t.partitions = vec![p];
    let mut req = OffsetForLeaderEpochRequest::default();
    req.replica_id = BrokerId(-1);
    req.topics = vec![t];
    let ResponseKind::OffsetForLeaderEpoch(resp) =
        c.call(ApiKey::OffsetForLeaderEpoch, 4, req.into())
    else {
        panic!("kind")
    };
    let r = &resp.topics[0].partitions[0];
    (r.error_code, r.leader_epoch, r.end_offset)
}

/// The leader epoch in Metadata for partition 0.
fn leader_epoch(c: &mut common::Client, topic: &str) -> i32 {
    let mut t = metadata_request::MetadataRequestTopic::default();
    t.name = Some(topic_name(topic));
    let mut req = MetadataRequest::default();
    req.topics = Some(vec![t]);
    let ResponseKind::Metadata(resp) = c.call(ApiKey::Metadata, 12, req.into()) else {
        panic!("kind")
    };
    resp.topics[0].partitions[0].leader_epoch
}

#[test]
fn every_restart_is_a_new_leader_epoch_and_old_epochs_end_where_the_next_began() {
    let dir = tempfile::tempdir().expect("tempdir");
    let broker = BrokerProcess::start(dir.path());
    let mut c = broker.connect();
    common::create_topic(&mut c, "epochs", 1);
    let first = leader_epoch(&mut c, "epochs");
    assert_eq!(produce(&mut c, "epochs", 0, batch(&["a", "b"], 1)), (0, 0));
    let port = broker.addr.port();
    broker.kill();

    let broker = BrokerProcess::start_on(dir.path(), port);
    let mut c = broker.connect();
    let second = leader_epoch(&mut c, "epochs");
    assert!(second > first, "epoch {second} after {first}");
    assert_eq!(produce(&mut c, "epochs", 0, batch(&["c"], 2)), (0, 2));
    assert_eq!(
        end_of_epoch(&mut c, "epochs", first),
        (0, first, 2),
        "the first epoch ends at 2"
    );
    assert_eq!(
        end_of_epoch(&mut c, "epochs", second),
        (0, second, 3),
        "the current epoch ends at the end"
    );
}
