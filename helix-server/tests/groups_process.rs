//! Black-box tests of the group coordinator in the real binary, spoken to
//! with raw `kafka-protocol` requests: a member's generation and commits
//! survive kill -9; bad group input is answered with its code and changes
//! nothing; FindCoordinator points at this broker; the group settings given
//! as flags reach the coordinator; DescribeGroups names the member's host.

mod common;

use bytes::Bytes;
use common::BrokerProcess;
use kafka_protocol::messages::*;
use kafka_protocol::protocol::StrBytes;

fn s(text: &str) -> StrBytes {
    StrBytes::from_string(text.to_string())
}

fn join(
    c: &mut common::Client,
    group: &str,
    member: &str,
    protocols: Vec<(&str, Bytes)>,
) -> JoinGroupResponse {
    let protocols = protocols
        .into_iter()
        .map(|(name, metadata)| {
            join_group_request::JoinGroupRequestProtocol::default()
                .with_name(s(name))
                .with_metadata(metadata)
        })
        .collect();
    let request = JoinGroupRequest::default()
        .with_group_id(GroupId(s(group)))
        .with_session_timeout_ms(30_000)
        .with_rebalance_timeout_ms(30_000)
        .with_member_id(s(member))
        .with_protocol_type(s("consumer"))
        .with_protocols(protocols);
    let ResponseKind::JoinGroup(response) = c.call(ApiKey::JoinGroup, 9, request.into()) else {
        panic!("kind")
    };
    response
}

fn commit(c: &mut common::Client, group: &str, member: &str, generation: i32, offset: i64) -> i16 {
    let partition = offset_commit_request::OffsetCommitRequestPartition::default()
        .with_partition_index(0)
        .with_committed_offset(offset)
        .with_committed_metadata(Some(s("meta")));
    let topic = offset_commit_request::OffsetCommitRequestTopic::default()
        .with_name(TopicName(s("orders")))
        .with_partitions(vec![partition]);
    let request = OffsetCommitRequest::default()
        .with_group_id(GroupId(s(group)))
        .with_generation_id_or_member_epoch(generation)
        .with_member_id(s(member))
        .with_topics(vec![topic]);
    let ResponseKind::OffsetCommit(response) = c.call(ApiKey::OffsetCommit, 8, request.into())
    else {
        panic!("kind")
    };
    response.topics[0].partitions[0].error_code
}

fn fetch(c: &mut common::Client, group: &str) -> (i64, String) {
    let topic = offset_fetch_request::OffsetFetchRequestTopic::default()
        .with_name(TopicName(s("orders")))
        .with_partition_indexes(vec![0]);
    let request = OffsetFetchRequest::default()
        .with_group_id(GroupId(s(group)))
        .with_topics(Some(vec![topic]));
    let ResponseKind::OffsetFetch(response) = c.call(ApiKey::OffsetFetch, 7, request.into()) else {
        panic!("kind")
    };
    let p = &response.topics[0].partitions[0];
    (
        p.committed_offset,
        p.metadata.as_deref().unwrap_or_default().to_string(),
    )
}

fn heartbeat(c: &mut common::Client, group: &str, member: &str, generation: i32) -> i16 {
    let request = HeartbeatRequest::default()
        .with_group_id(GroupId(s(group)))
        .with_generation_id(generation)
        .with_member_id(s(member));
    let ResponseKind::Heartbeat(response) = c.call(ApiKey::Heartbeat, 4, request.into()) else {
        panic!("kind")
    };
    response.error_code
}

#[test]
fn a_group_and_its_commits_survive_kill_9_and_the_member_continues() {
    let dir = tempfile::tempdir().expect("tempdir");
    let broker = BrokerProcess::start(dir.path());
    let port = broker.addr.port();
    let mut c = broker.connect();
    let request = FindCoordinatorRequest::default()
        .with_key_type(0)
        .with_coordinator_keys(vec![s("g")]);
    let ResponseKind::FindCoordinator(found) = c.call(ApiKey::FindCoordinator, 4, request.into())
    else {
        panic!("kind")
    };
    assert_eq!(
        (found.coordinators[0].error_code, found.coordinators[0].port),
        (0, i32::from(port))
    );

    // Kafka answers a commit for a topic it does not have
    // UNKNOWN_TOPIC_OR_PARTITION (issue 30 item 3): the topic exists.
    common::create_topic(&mut c, "orders", 1);
    let first = join(&mut c, "g", "", vec![("range", Bytes::from_static(b"sub"))]);
    assert_eq!(first.error_code, 79, "MEMBER_ID_REQUIRED");
    let member = first.member_id.to_string();
    let joined = join(
        &mut c,
        "g",
        &member,
        vec![("range", Bytes::from_static(b"sub"))],
    );
    assert_eq!((joined.error_code, joined.generation_id), (0, 1));
    let assignment = sync_group_request::SyncGroupRequestAssignment::default()
        .with_member_id(s(&member))
        .with_assignment(Bytes::from_static(b"orders-0"));
    let sync = SyncGroupRequest::default()
        .with_group_id(GroupId(s("g")))
        .with_generation_id(1)
        .with_member_id(s(&member))
        .with_assignments(vec![assignment]);
    let ResponseKind::SyncGroup(synced) = c.call(ApiKey::SyncGroup, 5, sync.into()) else {
        panic!("kind")
    };
    assert_eq!(
        (synced.error_code, synced.assignment.as_ref()),
        (0, b"orders-0".as_ref())
    );
    for offset in 1..=20 {
        assert_eq!(commit(&mut c, "g", &member, 1, offset), 0);
    }
    drop(c);
    broker.kill();

    let broker = BrokerProcess::start_on(dir.path(), port);
    let mut c = broker.connect();
    assert_eq!(
        fetch(&mut c, "g"),
        (20, "meta".to_string()),
        "every acknowledged commit is back"
    );
    assert_eq!(
        heartbeat(&mut c, "g", &member, 1),
        0,
        "the member continues in its generation"
    );
    assert_eq!(commit(&mut c, "g", &member, 1, 21), 0);
    assert_eq!(
        commit(&mut c, "g", &member, 7, 22),
        22,
        "ILLEGAL_GENERATION"
    );
    assert_eq!(fetch(&mut c, "g").0, 21);
}

#[test]
fn bad_group_input_gets_its_code_and_the_broker_keeps_serving() {
    let dir = tempfile::tempdir().expect("tempdir");
    let broker = BrokerProcess::start(dir.path());
    let mut c = broker.connect();
    common::create_topic(&mut c, "orders", 1);
    let long = "g".repeat(10_000);
    assert_eq!(
        join(&mut c, &long, "", vec![("range", Bytes::new())]).error_code,
        24,
        "INVALID_GROUP_ID"
    );
    assert_eq!(
        join(&mut c, "g", "", vec![]).error_code,
        23,
        "INCONSISTENT_GROUP_PROTOCOL"
    );
    let huge = Bytes::from(vec![1u8; 2 << 20]);
    assert_eq!(
        join(&mut c, "g", "", vec![("range", huge)]).error_code,
        42,
        "INVALID_REQUEST"
    );
    assert_eq!(
        commit(&mut c, "g", "ghost", 3, 1),
        22,
        "ILLEGAL_GENERATION for an unknown group"
    );
    let sync = SyncGroupRequest::default()
        .with_group_id(GroupId(s("g")))
        .with_generation_id(1)
        .with_member_id(s("ghost"));
    let ResponseKind::SyncGroup(synced) = c.call(ApiKey::SyncGroup, 5, sync.into()) else {
        panic!("kind")
    };
    assert_eq!(synced.error_code, 25, "UNKNOWN_MEMBER_ID");
    let ResponseKind::ListGroups(listed) =
        c.call(ApiKey::ListGroups, 5, ListGroupsRequest::default().into())
    else {
        panic!("kind")
    };
    assert!(listed.groups.is_empty(), "nothing was created: {listed:?}");
    assert_eq!(fetch(&mut c, "g").0, -1);
    let first = join(&mut c, "g", "", vec![("range", Bytes::new())]);
    assert_eq!(
        join(&mut c, "g", &first.member_id, vec![("range", Bytes::new())]).error_code,
        0
    );
}

#[test]
fn group_flags_reach_the_coordinator_and_describe_names_the_host() {
    let dir = tempfile::tempdir().expect("tempdir");
    let broker = BrokerProcess::start_with(
        dir.path(),
        common::free_port(),
        &[
            "--group-max-size",
            "1",
            "--group-max-session-timeout-ms",
            "20000",
        ],
    );
    let mut c = broker.connect();
    // The join helper asks for a 30 s session: above the configured maximum.
    assert_eq!(
        join(&mut c, "g", "", vec![("range", Bytes::new())]).error_code,
        26,
        "INVALID_SESSION_TIMEOUT"
    );
    let protocols = || vec![("range", Bytes::new())];
    let short = |member: &str| {
        JoinGroupRequest::default()
            .with_group_id(GroupId(s("g")))
            .with_session_timeout_ms(10_000)
            .with_rebalance_timeout_ms(10_000)
            .with_member_id(s(member))
            .with_protocol_type(s("consumer"))
            .with_protocols(
                protocols()
                    .into_iter()
                    .map(|(name, metadata)| {
                        join_group_request::JoinGroupRequestProtocol::default()
                            .with_name(s(name))
                            .with_metadata(metadata)
                    })
                    .collect(),
            )
    };
    let call = |c: &mut common::Client, r: JoinGroupRequest| {
        let ResponseKind::JoinGroup(response) = c.call(ApiKey::JoinGroup, 9, r.into()) else {
            panic!("kind")
        };
        response
    };
    let first = call(&mut c, short(""));
    assert_eq!(first.error_code, 79, "MEMBER_ID_REQUIRED");
    let joined = call(&mut c, short(&first.member_id));
    assert_eq!((joined.error_code, joined.generation_id), (0, 1));
    assert_eq!(
        call(&mut c, short("")).error_code,
        81,
        "GROUP_MAX_SIZE_REACHED with --group-max-size 1"
    );

    let describe = DescribeGroupsRequest::default().with_groups(vec![GroupId(s("g"))]);
    let ResponseKind::DescribeGroups(described) =
        c.call(ApiKey::DescribeGroups, 5, describe.into())
    else {
        panic!("kind")
    };
    let members = &described.groups[0].members;
    assert_eq!(members.len(), 1, "{described:?}");
    assert_eq!(members[0].member_id, first.member_id);
    assert_eq!(members[0].client_host.as_str(), "/127.0.0.1");
}
