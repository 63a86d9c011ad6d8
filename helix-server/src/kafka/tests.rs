//! Every advertised (api, version): a request encoded by `kafka-protocol`'s
//! client side goes through dispatch against a real broker on a temporary
//! data directory, and the response decodes at that version.

use std::sync::Arc;

use bytes::{Buf, Bytes, BytesMut};
use kafka_protocol::messages::*;
use kafka_protocol::protocol::{Decodable, Encodable, StrBytes};

use super::api_versions::SUPPORTED;
use super::legacy::tests::one_message_set;
use super::{dispatch, wire_str, wire_topic};
use crate::broker::Broker;
use crate::config::Config;
use crate::replica::batch::tests::make_batch;

pub(crate) async fn broker(dir: &std::path::Path) -> Arc<Broker> {
    let config = Config {
        data_dir: dir.to_path_buf(),
        ..Config::default()
    };
    let b = Broker::open(config).await.expect("open broker");
    b.admin
        .create_topic("t", 1, -1, None, Default::default(), false)
        .await
        .expect("topic t");
    b.admin
        .create_topic("cp", 1, -1, None, Default::default(), false)
        .await
        .expect("topic cp");
    b
}

fn request(b: &Broker, key: ApiKey, version: i16) -> RequestKind {
    let t = b.topic("t").expect("t exists");
    match key {
        ApiKey::Produce => {
            let mut pd = produce_request::PartitionProduceData::default();
            pd.index = 0;
            // v0-v2 in the message format a client of that version writes.
            pd.records = Some(match version {
                0..=1 => one_message_set(0),
                2 => one_message_set(1),
                _ => make_batch(&[b"v"], -1, -1, 1000),
            });
            let mut td = produce_request::TopicProduceData::default();
            if version >= 13 {
                td.topic_id = t.id
            } else {
                td.name = wire_topic("t")
            }
            td.partition_data = vec![pd];
            let mut r = ProduceRequest::default();
            r.acks = -1;
            r.timeout_ms = 5000;
            r.topic_data = vec![td];
            r.into()
        }
        ApiKey::Fetch => {
            let mut fp = fetch_request::FetchPartition::default();
            fp.partition = 0;
            fp.fetch_offset = 0;
            fp.partition_max_bytes = 1 << 20;
            let mut ft = fetch_request::FetchTopic::default();
            if version >= 13 {
                ft.topic_id = t.id
            } else {
                ft.topic = wire_topic("t")
            }
            ft.partitions = vec![fp];
            let mut r = FetchRequest::default();
            r.max_bytes = 1 << 20;
            r.topics = vec![ft];
            r.into()
        }
        ApiKey::ListOffsets => {
            let mut p = list_offsets_request::ListOffsetsPartition::default();
            p.timestamp = -1;
            let mut lt = list_offsets_request::ListOffsetsTopic::default();
            lt.name = wire_topic("t");
            lt.partitions = vec![p];
            let mut r = ListOffsetsRequest::default();
            r.topics = vec![lt];
            r.into()
        }
        ApiKey::Metadata => {
            let mut mt = metadata_request::MetadataRequestTopic::default();
            mt.name = Some(wire_topic("t"));
            let mut r = MetadataRequest::default();
            r.topics = Some(vec![mt]);
            r.into()
        }
        ApiKey::ApiVersions => ApiVersionsRequest::default().into(),
        ApiKey::CreateTopics => {
            let mut ct = create_topics_request::CreatableTopic::default();
            ct.name = wire_topic(&format!("created-{version}"));
            ct.num_partitions = 2;
            ct.replication_factor = 1;
            let mut cfg = create_topics_request::CreatableTopicConfig::default();
            cfg.name = wire_str("retention.ms");
            cfg.value = Some(wire_str("60000"));
            ct.configs = vec![cfg];
            let mut r = CreateTopicsRequest::default();
            r.topics = vec![ct];
            r.into()
        }
        ApiKey::DeleteTopics => {
            let name = format!("created-{}", version + 1);
            let mut r = DeleteTopicsRequest::default();
            if version >= 6 {
                let mut s = delete_topics_request::DeleteTopicState::default();
                s.name = Some(wire_topic(&name));
                r.topics = vec![s];
            } else {
                r.topic_names = vec![wire_topic(&name)];
            }
            r.into()
        }
        ApiKey::DeleteRecords => {
            let mut p = delete_records_request::DeleteRecordsPartition::default();
            p.offset = 0;
            let mut dt = delete_records_request::DeleteRecordsTopic::default();
            dt.name = wire_topic("t");
            dt.partitions = vec![p];
            let mut r = DeleteRecordsRequest::default();
            r.topics = vec![dt];
            r.into()
        }
        ApiKey::InitProducerId => {
            let mut r = InitProducerIdRequest::default();
            r.transactional_id = None;
            r.transaction_timeout_ms = 60000;
            r.into()
        }
        ApiKey::OffsetForLeaderEpoch => {
            let mut p = offset_for_leader_epoch_request::OffsetForLeaderPartition::default();
            p.leader_epoch = 1;
            let mut ot = offset_for_leader_epoch_request::OffsetForLeaderTopic::default();
            ot.topic = wire_topic("t");
            ot.partitions = vec![p];
            let mut r = OffsetForLeaderEpochRequest::default();
            r.topics = vec![ot];
            r.into()
        }
        ApiKey::DescribeConfigs => {
            let mut res = describe_configs_request::DescribeConfigsResource::default();
            res.resource_type = 2;
            res.resource_name = wire_str("t");
            let mut r = DescribeConfigsRequest::default();
            r.resources = vec![res];
            r.into()
        }
        ApiKey::AlterConfigs => {
            let mut c = alter_configs_request::AlterableConfig::default();
            c.name = wire_str("retention.ms");
            c.value = Some(wire_str("3600000"));
            let mut res = alter_configs_request::AlterConfigsResource::default();
            res.resource_type = 2;
            res.resource_name = wire_str("t");
            res.configs = vec![c];
            let mut r = AlterConfigsRequest::default();
            r.resources = vec![res];
            r.into()
        }
        ApiKey::IncrementalAlterConfigs => {
            let mut c = incremental_alter_configs_request::AlterableConfig::default();
            c.name = wire_str("max.message.bytes");
            c.value = Some(wire_str("2000000"));
            let mut res = incremental_alter_configs_request::AlterConfigsResource::default();
            res.resource_type = 2;
            res.resource_name = wire_str("t");
            res.configs = vec![c];
            let mut r = IncrementalAlterConfigsRequest::default();
            r.resources = vec![res];
            r.into()
        }
        ApiKey::CreatePartitions => {
            let mut ct = create_partitions_request::CreatePartitionsTopic::default();
            ct.name = wire_topic("cp");
            ct.count = i32::from(version) + 2;
            let mut r = CreatePartitionsRequest::default();
            r.topics = vec![ct];
            r.into()
        }
        ApiKey::DescribeCluster => DescribeClusterRequest::default().into(),
        ApiKey::DescribeProducers => DescribeProducersRequest::default()
            .with_topics(vec![
                describe_producers_request::TopicRequest::default()
                    .with_name(wire_topic("t"))
                    .with_partition_indexes(vec![0]),
            ])
            .into(),
        // An abort marker for a producer "cp" never saw: appended, as Kafka
        // appends it ("t" keeps one record per produce version).
        ApiKey::WriteTxnMarkers => WriteTxnMarkersRequest::default()
            .with_markers(vec![
                write_txn_markers_request::WritableTxnMarker::default()
                    .with_producer_id(ProducerId(77))
                    .with_producer_epoch(version)
                    .with_transaction_result(false)
                    .with_coordinator_epoch(1)
                    .with_topics(vec![
                        write_txn_markers_request::WritableTxnMarkerTopic::default()
                            .with_name(wire_topic("cp"))
                            .with_partition_indexes(vec![0]),
                    ]),
            ])
            .into(),
        k if super::acls_tests::is_acl_api(k) => super::acls_tests::request(k, version),
        ApiKey::DescribeClientQuotas => DescribeClientQuotasRequest::default().into(),
        ApiKey::AlterClientQuotas => AlterClientQuotasRequest::default()
            .with_entries(vec![
                alter_client_quotas_request::EntryData::default()
                    .with_entity(vec![
                        alter_client_quotas_request::EntityData::default()
                            .with_entity_type(wire_str("client-id"))
                            .with_entity_name(Some(wire_str("quota-test"))),
                    ])
                    .with_ops(vec![
                        alter_client_quotas_request::OpData::default()
                            .with_key(wire_str("producer_byte_rate"))
                            .with_value(1_048_576.0),
                    ]),
            ])
            .into(),
        ApiKey::DescribeUserScramCredentials => {
            DescribeUserScramCredentialsRequest::default().into()
        }
        ApiKey::AlterUserScramCredentials => AlterUserScramCredentialsRequest::default()
            .with_upsertions(vec![
                alter_user_scram_credentials_request::ScramCredentialUpsertion::default()
                    .with_name(wire_str("u"))
                    .with_mechanism(1)
                    .with_iterations(4096)
                    .with_salt(Bytes::from_static(b"salt"))
                    .with_salted_password(Bytes::from_static(&[9; 32])),
            ])
            .into(),
        ApiKey::DescribeLogDirs => DescribeLogDirsRequest::default()
            .with_topics(Some(vec![
                describe_log_dirs_request::DescribableLogDirTopic::default()
                    .with_topic(wire_topic("t"))
                    .with_partitions(vec![0]),
            ]))
            .into(),
        ApiKey::DescribeQuorum => DescribeQuorumRequest::default()
            .with_topics(vec![
                describe_quorum_request::TopicData::default()
                    .with_topic_name(wire_topic("__cluster_metadata"))
                    .with_partitions(vec![describe_quorum_request::PartitionData::default()]),
            ])
            .into(),
        ApiKey::ListPartitionReassignments => ListPartitionReassignmentsRequest::default().into(),
        ApiKey::ElectLeaders => ElectLeadersRequest::default().into(),
        other => panic!("no test request for {other:?}"),
    }
}

pub(crate) fn frame(key: ApiKey, version: i16, body: &RequestKind) -> Bytes {
    let mut buf = BytesMut::new();
    let header = RequestHeader::default()
        .with_request_api_key(key as i16)
        .with_request_api_version(version)
        .with_correlation_id(i32::from(version) * 100 + key as i32)
        .with_client_id(Some(StrBytes::from_static_str("test")));
    header
        .encode(&mut buf, key.request_header_version(version))
        .expect("header");
    body.encode(&mut buf, version).expect("request body");
    buf.freeze()
}

/// Runs one request through dispatch; returns the response body bytes.
pub(crate) async fn roundtrip(
    b: &Arc<Broker>,
    key: ApiKey,
    version: i16,
    body: &RequestKind,
) -> Bytes {
    answer_on(b, key, version, body, &mut false)
        .await
        .expect("dispatched")
}

/// A plaintext connection's session, `told` as given.
pub(crate) fn test_session(told: bool) -> crate::kafka::session::Session {
    let listener = crate::kafka::session::Listener::plaintext("127.0.0.1", 9092);
    let mut session = crate::kafka::session::Session::new(listener, None, None);
    session.told_member = told;
    session
}

/// Dispatches `body` as the next request of a connection in state `told`
/// (`dispatch::check_reachable`) and returns the answer after its header,
/// or None when the connection is closed instead.
pub(crate) async fn answer_on(
    b: &Arc<Broker>,
    key: ApiKey,
    version: i16,
    body: &RequestKind,
    told: &mut bool,
) -> Option<Bytes> {
    let mut session = test_session(*told);
    let answer = answer_in(b, key, version, body, &mut session).await;
    *told = session.told_member;
    answer
}

/// Dispatches `body` as the next request of `session`'s connection and
/// returns the answer after its header, or None when it is closed instead.
pub(crate) async fn answer_in(
    b: &Arc<Broker>,
    key: ApiKey,
    version: i16,
    body: &RequestKind,
    session: &mut crate::kafka::session::Session,
) -> Option<Bytes> {
    let pending = dispatch::start_from(b, frame(key, version, body), session)
        .await
        .ok()?;
    let mut out = pending
        .await
        .expect("encoded")
        .expect("a response")
        .into_bytes();
    let len = out.get_i32();
    assert_eq!(len as usize, out.remaining());
    let header =
        ResponseHeader::decode(&mut out, key.response_header_version(version)).expect("header");
    assert_eq!(header.correlation_id, i32::from(version) * 100 + key as i32);
    Some(out)
}

fn error_codes(r: &ResponseKind) -> Vec<i16> {
    match r {
        ResponseKind::Produce(r) => r
            .responses
            .iter()
            .flat_map(|t| t.partition_responses.iter().map(|p| p.error_code))
            .collect(),
        ResponseKind::Fetch(r) => r
            .responses
            .iter()
            .flat_map(|t| t.partitions.iter().map(|p| p.error_code))
            .collect(),
        ResponseKind::ListOffsets(r) => r
            .topics
            .iter()
            .flat_map(|t| t.partitions.iter().map(|p| p.error_code))
            .collect(),
        ResponseKind::Metadata(r) => r.topics.iter().map(|t| t.error_code).collect(),
        ResponseKind::ApiVersions(r) => vec![r.error_code],
        ResponseKind::CreateTopics(r) => r.topics.iter().map(|t| t.error_code).collect(),
        ResponseKind::DeleteTopics(r) => r.responses.iter().map(|t| t.error_code).collect(),
        ResponseKind::DeleteRecords(r) => r
            .topics
            .iter()
            .flat_map(|t| t.partitions.iter().map(|p| p.error_code))
            .collect(),
        ResponseKind::InitProducerId(r) => vec![r.error_code],
        ResponseKind::OffsetForLeaderEpoch(r) => r
            .topics
            .iter()
            .flat_map(|t| t.partitions.iter().map(|p| p.error_code))
            .collect(),
        ResponseKind::DescribeConfigs(r) => r.results.iter().map(|t| t.error_code).collect(),
        ResponseKind::AlterConfigs(r) => r.responses.iter().map(|t| t.error_code).collect(),
        ResponseKind::IncrementalAlterConfigs(r) => {
            r.responses.iter().map(|t| t.error_code).collect()
        }
        ResponseKind::CreatePartitions(r) => r.results.iter().map(|t| t.error_code).collect(),
        ResponseKind::DescribeCluster(r) => vec![r.error_code],
        ResponseKind::DescribeClientQuotas(r) => vec![r.error_code],
        ResponseKind::AlterClientQuotas(r) => r.entries.iter().map(|e| e.error_code).collect(),
        ResponseKind::DescribeUserScramCredentials(r) => std::iter::once(r.error_code)
            .chain(r.results.iter().map(|u| u.error_code))
            .collect(),
        ResponseKind::AlterUserScramCredentials(r) => {
            r.results.iter().map(|u| u.error_code).collect()
        }
        ResponseKind::DescribeProducers(r) => r
            .topics
            .iter()
            .flat_map(|t| t.partitions.iter().map(|p| p.error_code))
            .collect(),
        ResponseKind::WriteTxnMarkers(r) => r
            .markers
            .iter()
            .flat_map(|m| &m.topics)
            .flat_map(|t| t.partitions.iter().map(|p| p.error_code))
            .collect(),
        ResponseKind::DescribeLogDirs(r) => std::iter::once(r.error_code)
            .chain(r.results.iter().map(|d| d.error_code))
            .collect(),
        ResponseKind::DescribeQuorum(r) => std::iter::once(r.error_code)
            .chain(
                r.topics
                    .iter()
                    .flat_map(|t| t.partitions.iter().map(|p| p.error_code)),
            )
            .collect(),
        ResponseKind::ListPartitionReassignments(r) => vec![r.error_code],
        ResponseKind::ElectLeaders(r) => std::iter::once(r.error_code)
            .chain(
                r.replica_election_results
                    .iter()
                    .flat_map(|t| t.partition_result.iter().map(|p| p.error_code)),
            )
            .collect(),
        other => panic!("unexpected response {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_advertised_version_is_served_and_answers_without_error() {
    let dir = tempfile::tempdir().expect("tempdir");
    let b = broker(dir.path()).await;
    // Creates first so the later deletes find their topics.
    // The ACL APIs answer SECURITY_DISABLED without an authorizer: their
    // versions are run with one (`acls_tests`).
    let mut order: Vec<(ApiKey, i16, i16)> = SUPPORTED
        .iter()
        .filter(|(k, _, _)| !super::acls_tests::is_acl_api(*k))
        .copied()
        .collect();
    order.sort_by_key(|(k, _, _)| (*k == ApiKey::DeleteTopics) as u8);
    // DescribeQuorum answers from what the controller's replica published
    // at its last tick.
    while b.controller.partition().quorum_progress().is_none() {
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    for (key, lo, hi) in order {
        for version in lo..=hi {
            let body = request(&b, key, version);
            let mut out = roundtrip(&b, key, version, &body).await;
            let resp = ResponseKind::decode(key, &mut out, version)
                .unwrap_or_else(|e| panic!("{key:?} v{version} response does not decode: {e:#}"));
            let codes = error_codes(&resp);
            assert!(
                !codes.is_empty(),
                "{key:?} v{version}: empty response {resp:?}"
            );
            assert!(
                codes.iter().all(|c| *c == 0),
                "{key:?} v{version}: errors {codes:?} in {resp:?}"
            );
        }
    }
    // The produces above landed: one record per produce version.
    let produced = 14;
    assert_eq!(
        b.topic("t")
            .expect("t")
            .local(0)
            .expect("local")
            .high_watermark()
            .0,
        produced
    );
    assert_eq!(b.topic("cp").expect("cp").partitions.len(), 5);
    assert_eq!(
        b.topic("t").expect("t").effective.max_message_bytes,
        2_000_000
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_too_new_api_versions_gets_the_kip_511_fallback() {
    let dir = tempfile::tempdir().expect("tempdir");
    let b = broker(dir.path()).await;
    let mut buf = BytesMut::new();
    let header = RequestHeader::default()
        .with_request_api_key(ApiKey::ApiVersions as i16)
        .with_request_api_version(99)
        .with_correlation_id(7);
    header.encode(&mut buf, 2).expect("header");
    buf.extend_from_slice(&[0, 0, 0]); // whatever a future body holds
    let pending = dispatch::start(&b, buf.freeze())
        .await
        .expect("answered, not closed");
    let mut out = pending
        .await
        .expect("encoded")
        .expect("a response")
        .into_bytes();
    out.advance(4);
    let h = ResponseHeader::decode(&mut out, 0).expect("v0 header");
    assert_eq!(h.correlation_id, 7);
    let r = ApiVersionsResponse::decode(&mut out, 0).expect("v0 body");
    assert_eq!(r.error_code, 35);
    assert!(
        r.api_keys
            .iter()
            .any(|k| k.api_key == 0 && k.min_version == 0 && k.max_version == 13)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_api_key_and_undecodable_produce_version_close_the_connection() {
    let dir = tempfile::tempdir().expect("tempdir");
    let b = broker(dir.path()).await;
    let unknown = Bytes::from_static(&[0x7f, 0x00, 0, 0, 0, 0, 0, 1, 0, 0]);
    assert!(dispatch::start(&b, unknown).await.is_err());
    let produce_v2 = Bytes::from_static(&[0, 0, 0, 2, 0, 0, 0, 1, 0, 0, 0, 1]);
    assert!(dispatch::start(&b, produce_v2).await.is_err());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_batch_fails_its_partition_only_and_fetch_returns_the_good_one() {
    let dir = tempfile::tempdir().expect("tempdir");
    let b = broker(dir.path()).await;
    b.admin
        .create_topic("two", 2, -1, None, Default::default(), false)
        .await
        .expect("topic");
    let good = make_batch(&[b"good"], -1, -1, 5);
    let mut bad = make_batch(&[b"bad"], -1, -1, 5).to_vec();
    bad[30] ^= 0xff; // inside the CRC-covered part
    let mut td = produce_request::TopicProduceData::default();
    td.name = wire_topic("two");
    for (i, records) in [(0, good.clone()), (1, Bytes::from(bad))] {
        let mut pd = produce_request::PartitionProduceData::default();
        pd.index = i;
        pd.records = Some(records);
        td.partition_data.push(pd);
    }
    let mut r = ProduceRequest::default();
    r.acks = -1;
    r.timeout_ms = 5000;
    r.topic_data = vec![td];
    let mut out = roundtrip(&b, ApiKey::Produce, 9, &r.into()).await;
    let resp = ProduceResponse::decode(&mut out, 9).expect("decode");
    let parts = &resp.responses[0].partition_responses;
    assert_eq!((parts[0].error_code, parts[0].base_offset), (0, 0));
    assert_eq!(parts[1].error_code, 2, "CORRUPT_MESSAGE");
    let fetch = request(&b, ApiKey::Fetch, 11);
    let RequestKind::Fetch(mut f) = fetch else {
        panic!("fetch")
    };
    f.topics[0].topic = wire_topic("two");
    let mut out = roundtrip(&b, ApiKey::Fetch, 11, &f.into()).await;
    let resp = FetchResponse::decode(&mut out, 11).expect("decode");
    let p = &resp.responses[0].partitions[0];
    assert_eq!(p.high_watermark, 1);
    let records = p.records.clone().expect("records");
    assert_eq!(records.len(), good.len());
    assert_eq!(
        &records[61..],
        &good[61..],
        "stored as sent, apart from the patched header"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acks_zero_gets_no_answer_and_a_failure_closes_the_connection() {
    let dir = tempfile::tempdir().expect("tempdir");
    let b = broker(dir.path()).await;
    let RequestKind::Produce(mut good) = request(&b, ApiKey::Produce, 9) else {
        panic!("produce")
    };
    good.acks = 0;
    let mut bad = good.clone();
    let pending = dispatch::start(&b, frame(ApiKey::Produce, 9, &good.into()))
        .await
        .expect("started");
    assert!(
        pending.await.expect("no error").is_none(),
        "acks=0 is never answered"
    );
    bad.topic_data[0].partition_data[0].records = Some(Bytes::from_static(&[0u8; 70]));
    let pending = dispatch::start(&b, frame(ApiKey::Produce, 9, &bad.into()))
        .await
        .expect("started");
    assert!(
        pending.await.is_err(),
        "a failed acks=0 produce closes the connection"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fetch_waiting_at_the_end_is_woken_by_a_produce() {
    let dir = tempfile::tempdir().expect("tempdir");
    let b = broker(dir.path()).await;
    let RequestKind::Fetch(mut f) = request(&b, ApiKey::Fetch, 12) else {
        panic!("fetch")
    };
    f.max_wait_ms = 30_000;
    f.min_bytes = 1;
    let waiting = dispatch::start(&b, frame(ApiKey::Fetch, 12, &f.into()))
        .await
        .expect("started");
    let waiting = tokio::spawn(waiting);
    tokio::task::yield_now().await;
    assert!(!waiting.is_finished(), "nothing to read yet");
    let produce = request(&b, ApiKey::Produce, 9);
    let _ = roundtrip(&b, ApiKey::Produce, 9, &produce).await;
    let mut out = waiting
        .await
        .expect("joined")
        .expect("encoded")
        .expect("a response")
        .into_bytes();
    out.advance(4);
    ResponseHeader::decode(&mut out, ApiKey::Fetch.response_header_version(12)).expect("header");
    let resp = FetchResponse::decode(&mut out, 12).expect("decode");
    let p = &resp.responses[0].partitions[0];
    assert_eq!(p.high_watermark, 1);
    assert!(
        p.records.as_ref().is_some_and(|r| !r.is_empty()),
        "woken with the new batch"
    );
}

/// A small deterministic generator (no clock, no OS randomness).
fn next_rand(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn random_request_bodies_never_panic_the_broker() {
    let dir = tempfile::tempdir().expect("tempdir");
    let b = broker(dir.path()).await;
    let mut seed = 42u64;
    for (key, lo, hi) in SUPPORTED {
        for version in *lo..=*hi {
            // Valid requests with their tails cut or bytes flipped, and pure
            // garbage after a valid header.
            let valid = frame(*key, version, &request(&b, *key, version));
            for round in 0..40 {
                let mut bytes = valid.to_vec();
                let r = next_rand(&mut seed);
                match round % 3 {
                    0 => bytes.truncate(4 + (r as usize % bytes.len().max(5))),
                    1 => {
                        let at = 8 + (r as usize % (bytes.len().saturating_sub(8)).max(1));
                        if at < bytes.len() {
                            bytes[at] ^= (r >> 32) as u8 | 1;
                        }
                    }
                    _ => {
                        bytes.truncate(10);
                        bytes.extend((0..(r % 64)).map(|_| next_rand(&mut seed) as u8));
                    }
                }
                let started = tokio::spawn({
                    let b = b.clone();
                    async move {
                        if let Ok(pending) = dispatch::start(&b, Bytes::from(bytes)).await {
                            let _ = pending.await;
                        }
                    }
                });
                tokio::time::timeout(std::time::Duration::from_secs(10), started)
                    .await
                    .expect("answered or refused in time")
                    .unwrap_or_else(|e| panic!("{key:?} v{version} round {round} panicked: {e}"));
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metadata_v0_with_no_topics_lists_every_topic_and_v1_lists_none() {
    let dir = tempfile::tempdir().expect("tempdir");
    let b = broker(dir.path()).await;
    // v0: both topics and the internal __consumer_offsets and
    // __transaction_state.
    for (version, want) in [(0i16, 4usize), (1, 0)] {
        let mut req = MetadataRequest::default();
        req.topics = Some(Vec::new());
        let mut out = roundtrip(&b, ApiKey::Metadata, version, &req.into()).await;
        let resp = MetadataResponse::decode(&mut out, version).expect("decode");
        assert_eq!(resp.topics.len(), want, "v{version}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fetch_frames_carry_the_wal_slices_themselves() {
    let dir = tempfile::tempdir().expect("tempdir");
    let b = broker(dir.path()).await;
    b.admin
        .create_topic("z", 2, -1, None, Default::default(), false)
        .await
        .expect("topic");
    let mut td = produce_request::TopicProduceData::default();
    td.name = wire_topic("z");
    for i in 0..2 {
        let mut pd = produce_request::PartitionProduceData::default();
        pd.index = i;
        pd.records = Some(make_batch(&[b"zero", b"copy"], -1, -1, 5));
        td.partition_data.push(pd);
    }
    let mut r = ProduceRequest::default();
    r.acks = -1;
    r.timeout_ms = 5000;
    r.topic_data = vec![td];
    let _ = roundtrip(&b, ApiKey::Produce, 9, &r.into()).await;
    let topic = b.topic("z").expect("z");
    for version in [11, 12] {
        let RequestKind::Fetch(mut f) = request(&b, ApiKey::Fetch, version) else {
            panic!("fetch")
        };
        let mut second = f.topics[0].partitions[0].clone();
        second.partition = 1;
        f.topics[0].topic = wire_topic("z");
        f.topics[0].partitions.push(second);
        let resp = super::fetch::handle(super::context::Partitions::of(&b), f, version).await;
        let mut wal = Vec::new();
        for (i, p) in resp.responses[0].partitions.iter().enumerate() {
            let records = p.records.clone().expect("records");
            let slice = topic
                .local(i as i32)
                .expect("partition")
                .read(crate::offset::Offset(0), 1 << 20)
                .expect("wal read");
            assert!(!records.is_empty() && records == slice);
            assert_eq!(
                records.as_ptr(),
                slice.as_ptr(),
                "fetch reads the WAL's memory"
            );
            wal.push(records);
        }
        let expected = super::segmented::encode(ApiKey::Fetch, version, 1, &resp.clone().into())
            .expect("plain encode");
        let frame = super::segmented::encode_fetch(version, 1, resp).expect("segmented");
        for records in &wal {
            assert!(
                frame
                    .segments()
                    .iter()
                    .any(|s| s.as_ptr() == records.as_ptr() && s.len() == records.len()),
                "v{version}: the frame holds the fetched slice, not a copy"
            );
        }
        assert!(frame.into_bytes() == expected, "v{version}: same bytes");
    }
}

/// One node serves transactional ids (issue 32 step 3): FindCoordinator key
/// type 1 names it, InitProducerId with a transactional id hands out epoch
/// 0 and then the next epoch of the same producer id, and EndTxn with no
/// transaction is INVALID_TXN_STATE.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_single_node_coordinates_transactional_ids() {
    let dir = tempfile::tempdir().expect("tempdir");
    let b = broker(dir.path()).await;
    let find = FindCoordinatorRequest::default()
        .with_key(StrBytes::from_static_str("tx-1"))
        .with_key_type(1);
    let mut out = roundtrip(&b, ApiKey::FindCoordinator, 3, &find.into()).await;
    let resp = FindCoordinatorResponse::decode(&mut out, 3).expect("decode");
    assert_eq!((resp.error_code, resp.node_id.0), (0, 1));
    let init = InitProducerIdRequest::default()
        .with_transactional_id(Some(TransactionalId(StrBytes::from_static_str("tx-1"))))
        .with_transaction_timeout_ms(60_000)
        .with_producer_id(ProducerId(-1))
        .with_producer_epoch(-1);
    let mut out = roundtrip(&b, ApiKey::InitProducerId, 4, &init.clone().into()).await;
    let first = InitProducerIdResponse::decode(&mut out, 4).expect("decode");
    assert_eq!((first.error_code, first.producer_epoch), (0, 0));
    assert!(first.producer_id.0 >= 0);
    let mut out = roundtrip(&b, ApiKey::InitProducerId, 4, &init.into()).await;
    let second = InitProducerIdResponse::decode(&mut out, 4).expect("decode");
    assert_eq!(
        (second.error_code, second.producer_id, second.producer_epoch),
        (0, first.producer_id, 1)
    );
    let end = EndTxnRequest::default()
        .with_transactional_id(TransactionalId(StrBytes::from_static_str("tx-1")))
        .with_producer_id(second.producer_id)
        .with_producer_epoch(1)
        .with_committed(true);
    let mut out = roundtrip(&b, ApiKey::EndTxn, 3, &end.into()).await;
    let resp = EndTxnResponse::decode(&mut out, 3).expect("decode");
    assert_eq!(resp.error_code, 48);
}
