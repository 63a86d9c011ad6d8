//! Commits and fetches, retention, deletion, listing and describing, and
//! bad input answered with its code and no state change.

use bytes::Bytes;
use kafka_protocol::messages::join_group_request::JoinGroupRequestProtocol;
use kafka_protocol::messages::offset_delete_request::{
    OffsetDeleteRequestPartition, OffsetDeleteRequestTopic,
};
use kafka_protocol::messages::*;

use super::harness::*;
use crate::group::{GroupConfig, GroupRequest, GroupResponse};

const ILLEGAL_GENERATION: i16 = 22;
const UNKNOWN_MEMBER_ID: i16 = 25;
const INVALID_GROUP_ID: i16 = 24;
const INVALID_REQUEST: i16 = 42;
const INVALID_SESSION_TIMEOUT: i16 = 26;
const INCONSISTENT_GROUP_PROTOCOL: i16 = 23;
const NON_EMPTY_GROUP: i16 = 68;
const GROUP_ID_NOT_FOUND: i16 = 69;
const GROUP_SUBSCRIBED_TO_TOPIC: i16 = 86;
const OFFSET_METADATA_TOO_LARGE: i16 = 12;
const NOT_COORDINATOR: i16 = 16;

#[test]
fn member_commit_is_answered_after_acknowledgement_and_fetched_with_metadata() {
    let mut h = Harness::new(config());
    let (member, generation) = stable_single(&mut h, "g");
    h.hold = true;
    let token = h.commit("g", &member, generation, "orders", 0, 42);
    assert!(
        !h.answered(token),
        "no answer before the record is acknowledged"
    );
    assert_eq!(
        h.fetch("g", "orders", &[0]).1[0].0,
        -1,
        "the view has only acknowledged offsets"
    );
    h.release();
    assert_eq!(h.commit_codes(token), vec![0]);
    let (error, partitions) = h.fetch("g", "orders", &[0, 1]);
    assert_eq!(error, 0);
    assert_eq!(partitions[0], (42, 3, "note".to_string(), 0));
    assert_eq!(
        partitions[1],
        (-1, -1, String::new(), 0),
        "never committed: -1"
    );
}

#[test]
fn failed_proposal_answers_not_coordinator_and_changes_nothing() {
    let mut h = Harness::new(config());
    let (member, generation) = stable_single(&mut h, "g");
    h.hold = true;
    let token = h.commit("g", &member, generation, "orders", 0, 42);
    let proposal = h.held.pop().expect("a proposal");
    h.coordinator.on_proposal_failed(proposal.id, h.now);
    h.pump();
    assert_eq!(h.commit_codes(token), vec![NOT_COORDINATOR]);
    assert_eq!(h.fetch("g", "orders", &[0]).1[0].0, -1);
}

#[test]
fn commits_from_stale_generations_and_strangers_are_refused() {
    let mut h = Harness::new(config());
    let (member, generation) = stable_single(&mut h, "g");
    let entries = h.log.len();
    let stale = h.commit("g", &member, generation + 1, "orders", 0, 5);
    assert_eq!(h.commit_codes(stale), vec![ILLEGAL_GENERATION]);
    let stranger = h.commit("g", "nobody", generation, "orders", 0, 5);
    assert_eq!(h.commit_codes(stranger), vec![UNKNOWN_MEMBER_ID]);
    let admin_on_active = h.commit("g", "", -1, "orders", 0, 5);
    assert_eq!(h.commit_codes(admin_on_active), vec![UNKNOWN_MEMBER_ID]);
    let unknown_group = h.commit("nope", "m", 3, "orders", 0, 5);
    assert_eq!(h.commit_codes(unknown_group), vec![ILLEGAL_GENERATION]);
    assert_eq!(h.log.len(), entries, "nothing proposed");
    assert_eq!(h.fetch("g", "orders", &[0]).1[0].0, -1);
    assert!(h.list(&[]).iter().all(|(g, _)| g != "nope"));
}

#[test]
fn oversize_commit_metadata_fails_only_that_partition() {
    let mut h = Harness::new(config());
    let long = "m".repeat(5_000);
    let parts = vec![
        offset_commit_request::OffsetCommitRequestPartition::default()
            .with_partition_index(0)
            .with_committed_offset(1),
        offset_commit_request::OffsetCommitRequestPartition::default()
            .with_partition_index(1)
            .with_committed_offset(2)
            .with_committed_metadata(Some(s(&long))),
    ];
    let topic = offset_commit_request::OffsetCommitRequestTopic::default()
        .with_name(TopicName(s("t")))
        .with_partitions(parts);
    let request = OffsetCommitRequest::default()
        .with_group_id(GroupId(s("simple")))
        .with_generation_id_or_member_epoch(-1)
        .with_topics(vec![topic]);
    let token = h.send(8, GroupRequest::OffsetCommit(request));
    assert_eq!(h.commit_codes(token), vec![0, OFFSET_METADATA_TOO_LARGE]);
    let fetched = h.fetch("simple", "t", &[0, 1]).1;
    assert_eq!((fetched[0].0, fetched[1].0), (1, -1));
}

#[test]
fn bad_join_requests_get_their_codes_and_create_nothing() {
    let mut h = Harness::new(config());
    let before = h.list(&[]);
    let empty_protocols = h.join(7, "g", "", None, &[]);
    assert_eq!(
        h.join_response(empty_protocols).error_code,
        INCONSISTENT_GROUP_PROTOCOL
    );
    let huge = Bytes::from(vec![
        7u8;
        GroupConfig::default().max_member_metadata_bytes + 1
    ]);
    let oversize = h.join(7, "g", "", None, &[("range", huge)]);
    assert_eq!(h.join_response(oversize).error_code, INVALID_REQUEST);
    let long_id = "x".repeat(10_000);
    let long = h.join(7, &long_id, "", None, &[("range", Bytes::new())]);
    assert_eq!(h.join_response(long).error_code, INVALID_GROUP_ID);
    let empty_id = h.join(7, "", "", None, &[("range", Bytes::new())]);
    assert_eq!(h.join_response(empty_id).error_code, INVALID_GROUP_ID);
    let request = JoinGroupRequest::default()
        .with_group_id(GroupId(s("g")))
        .with_session_timeout_ms(10)
        .with_rebalance_timeout_ms(1000)
        .with_protocol_type(s("consumer"))
        .with_protocols(vec![
            JoinGroupRequestProtocol::default().with_name(s("range")),
        ]);
    let short_session = h.send(7, GroupRequest::JoinGroup(request));
    assert_eq!(
        h.join_response(short_session).error_code,
        INVALID_SESSION_TIMEOUT
    );
    let unknown_member = h.join(7, "g", "ghost", None, &[("range", Bytes::new())]);
    assert_eq!(
        h.join_response(unknown_member).error_code,
        UNKNOWN_MEMBER_ID
    );
    assert_eq!(h.list(&[]), before);
    assert!(h.log.is_empty(), "nothing proposed");
    // The coordinator keeps serving.
    stable_single(&mut h, "g");
}

#[test]
fn simple_commits_on_an_empty_group_expire_after_retention() {
    let retention = 60_000;
    let mut h = Harness::new(GroupConfig {
        offsets_retention_ms: retention,
        offsets_retention_check_interval_ms: 1_000,
        ..config()
    });
    let token = h.commit("simple", "", -1, "orders", 2, 9);
    assert_eq!(h.commit_codes(token), vec![0]);
    assert_eq!(
        h.list(&[]),
        vec![("simple".to_string(), "Empty".to_string())]
    );
    h.advance(retention / 2);
    assert_eq!(
        h.fetch("simple", "orders", &[2]).1[0].0,
        9,
        "kept within retention"
    );
    h.advance(retention);
    assert_eq!(h.fetch("simple", "orders", &[2]).1[0].0, -1, "expired");
    assert!(
        h.list(&[]).is_empty(),
        "the empty group went with its offsets"
    );
}

#[test]
fn offsets_of_an_active_group_are_kept_past_retention() {
    let retention = 60_000;
    let mut h = Harness::new(GroupConfig {
        offsets_retention_ms: retention,
        offsets_retention_check_interval_ms: 1_000,
        ..config()
    });
    let (member, generation) = stable_single(&mut h, "g");
    h.commit("g", &member, generation, "orders", 0, 7);
    for _ in 0..20 {
        h.advance(5_000);
        assert_eq!(h.heartbeat("g", &member, generation), 0);
    }
    assert_eq!(h.fetch("g", "orders", &[0]).1[0].0, 7);
}

#[test]
fn delete_groups_refuses_active_and_unknown_groups_and_deletes_empty_ones() {
    let mut h = Harness::new(config());
    stable_single(&mut h, "active");
    h.commit("idle", "", -1, "orders", 0, 3);
    let token = h.delete_groups(&["active", "idle", "unknown", ""]);
    assert_eq!(
        h.delete_codes(token),
        vec![NON_EMPTY_GROUP, 0, GROUP_ID_NOT_FOUND, INVALID_GROUP_ID]
    );
    assert_eq!(h.fetch("idle", "orders", &[0]).1[0].0, -1);
    let names: Vec<String> = h.list(&[]).into_iter().map(|(g, _)| g).collect();
    assert_eq!(names, vec!["active".to_string()]);
    let again = h.delete_groups(&["idle"]);
    assert_eq!(h.delete_codes(again), vec![GROUP_ID_NOT_FOUND]);
}

#[test]
fn delete_groups_waits_for_acknowledgement() {
    let mut h = Harness::new(config());
    h.commit("idle", "", -1, "orders", 0, 3);
    h.hold = true;
    let token = h.delete_groups(&["idle"]);
    assert!(!h.answered(token));
    h.release();
    assert_eq!(h.delete_codes(token), vec![0]);
}

fn offset_delete(h: &mut Harness, group: &str, topic: &str) -> OffsetDeleteResponse {
    let request = OffsetDeleteRequest::default()
        .with_group_id(GroupId(s(group)))
        .with_topics(vec![
            OffsetDeleteRequestTopic::default()
                .with_name(TopicName(s(topic)))
                .with_partitions(vec![
                    OffsetDeleteRequestPartition::default().with_partition_index(0),
                ]),
        ]);
    let token = h.send(0, GroupRequest::OffsetDelete(request));
    match h.response(token) {
        GroupResponse::OffsetDelete(r) => r,
        other => panic!("{other:?}"),
    }
}

#[test]
fn offset_delete_refuses_subscribed_topics_of_an_active_group() {
    let mut h = Harness::new(config());
    let (member, generation) = stable_single(&mut h, "g");
    h.commit("g", &member, generation, "orders", 0, 5);
    h.commit("g", &member, generation, "old", 0, 6);
    let subscribed = offset_delete(&mut h, "g", "orders");
    assert_eq!(
        subscribed.topics[0].partitions[0].error_code,
        GROUP_SUBSCRIBED_TO_TOPIC
    );
    assert_eq!(h.fetch("g", "orders", &[0]).1[0].0, 5);
    let unsubscribed = offset_delete(&mut h, "g", "old");
    assert_eq!(unsubscribed.error_code, 0);
    assert_eq!(unsubscribed.topics[0].partitions[0].error_code, 0);
    assert_eq!(h.fetch("g", "old", &[0]).1[0].0, -1);
    assert_eq!(
        offset_delete(&mut h, "missing", "old").error_code,
        GROUP_ID_NOT_FOUND
    );
}

#[test]
fn list_groups_filters_by_state_and_describe_reports_unknown_groups() {
    let mut h = Harness::new(config());
    stable_single(&mut h, "stable-group");
    h.commit("empty-group", "", -1, "orders", 0, 1);
    let mut all = h.list(&[]);
    all.sort();
    assert_eq!(
        all,
        vec![
            ("empty-group".into(), "Empty".into()),
            ("stable-group".into(), "Stable".into())
        ]
    );
    assert_eq!(
        h.list(&["stable"]),
        vec![("stable-group".into(), "Stable".into())]
    );
    assert_eq!(
        h.list(&["Empty"]),
        vec![("empty-group".into(), "Empty".into())]
    );
    let unknown = h.describe("unknown");
    assert_eq!(
        (unknown.error_code, unknown.group_state.as_str()),
        (0, "Dead"),
        "v5 answers Dead"
    );
    let request = DescribeGroupsRequest::default().with_groups(vec![GroupId(s("unknown"))]);
    let token = h.send(6, GroupRequest::DescribeGroups(request));
    match h.response(token) {
        GroupResponse::DescribeGroups(r) => assert_eq!(r.groups[0].error_code, GROUP_ID_NOT_FOUND),
        other => panic!("{other:?}"),
    }
}

#[test]
fn offset_fetch_of_all_topics_and_many_groups_at_v8() {
    let mut h = Harness::new(config());
    h.commit("a", "", -1, "t1", 0, 10);
    h.commit("a", "", -1, "t2", 1, 11);
    h.commit("b", "", -1, "t1", 0, 20);
    let request = OffsetFetchRequest::default().with_groups(vec![
        offset_fetch_request::OffsetFetchRequestGroup::default()
            .with_group_id(GroupId(s("a")))
            .with_topics(None),
        offset_fetch_request::OffsetFetchRequestGroup::default()
            .with_group_id(GroupId(s("b")))
            .with_topics(Some(vec![
                offset_fetch_request::OffsetFetchRequestTopics::default()
                    .with_name(TopicName(s("t1")))
                    .with_partition_indexes(vec![0, 1]),
            ])),
        offset_fetch_request::OffsetFetchRequestGroup::default().with_group_id(GroupId(s(""))),
    ]);
    let token = h.send(8, GroupRequest::OffsetFetch(request));
    let GroupResponse::OffsetFetch(response) = h.response(token) else {
        panic!("not OffsetFetch")
    };
    let offsets = |g: usize| -> Vec<(String, i32, i64)> {
        response.groups[g]
            .topics
            .iter()
            .flat_map(|t| {
                t.partitions
                    .iter()
                    .map(|p| (t.name.0.to_string(), p.partition_index, p.committed_offset))
            })
            .collect()
    };
    assert_eq!(offsets(0), vec![("t1".into(), 0, 10), ("t2".into(), 1, 11)]);
    assert_eq!(offsets(1), vec![("t1".into(), 0, 20), ("t1".into(), 1, -1)]);
    assert_eq!(response.groups[2].error_code, INVALID_GROUP_ID);
}
