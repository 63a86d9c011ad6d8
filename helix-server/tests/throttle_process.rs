//! Black-box test of `--backpressure-mode throttle` (ADR 0011): an
//! overloaded Produce is answered with a non-zero `throttle_time_ms`, and
//! every record sent is still acknowledged.

mod common;

use common::{BrokerProcess, batch};
use kafka_protocol::messages::*;
use kafka_protocol::protocol::StrBytes;

fn topic_name(s: &str) -> TopicName {
    TopicName(StrBytes::from_string(s.to_string()))
}

#[test]
fn overloaded_produce_is_throttled_and_every_record_is_acknowledged() {
    let dir = tempfile::tempdir().expect("tempdir");
    // One pending request is the whole budget: each Produce, while it
    // holds its room, finds the node full and is throttled.
    let broker = BrokerProcess::start_with(
        dir.path(),
        common::free_port(),
        &[
            "--backpressure-mode",
            "throttle",
            "--max-pending-requests",
            "1",
            "--max-pending-bytes",
            "1048576",
        ],
    );
    let mut c = broker.connect();
    common::create_topic(&mut c, "throttled", 1);

    let requests = 3;
    let mut next_offset = 0;
    for i in 0..requests {
        let mut pd = produce_request::PartitionProduceData::default();
        pd.index = 0;
        pd.records = Some(batch(&["a", "b", "c"], 1_000 + i));
        let mut td = produce_request::TopicProduceData::default();
        td.name = topic_name("throttled");
        td.partition_data = vec![pd];
        let mut req = ProduceRequest::default();
        req.acks = -1;
        req.timeout_ms = 5000;
        req.topic_data = vec![td];
        let ResponseKind::Produce(resp) = c.call(ApiKey::Produce, 9, req.into()) else {
            panic!("kind")
        };
        assert!(resp.throttle_time_ms > 0, "request {i}: {resp:?}");
        assert!(resp.throttle_time_ms <= 1000, "bounded: {resp:?}");
        let p = &resp.responses[0].partition_responses[0];
        assert_eq!(p.error_code, 0, "request {i}: {resp:?}");
        assert_eq!(
            p.base_offset, next_offset,
            "every record acknowledged in order"
        );
        next_offset += 3;
    }
}
