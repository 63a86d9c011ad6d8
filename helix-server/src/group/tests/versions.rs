//! Every response the coordinator produces encodes at every version it
//! advertises (the codec refuses fields a version lacks), and decodes back
//! to the same answer a client would read.

use bytes::BytesMut;
use kafka_protocol::messages::*;
use kafka_protocol::protocol::Decodable;

use super::harness::*;
use crate::group::{GroupRequest, GroupResponse, SUPPORTED_VERSIONS};

fn api_key(response: &GroupResponse) -> ApiKey {
    match response {
        GroupResponse::JoinGroup(_) => ApiKey::JoinGroup,
        GroupResponse::SyncGroup(_) => ApiKey::SyncGroup,
        GroupResponse::Heartbeat(_) => ApiKey::Heartbeat,
        GroupResponse::LeaveGroup(_) => ApiKey::LeaveGroup,
        GroupResponse::OffsetCommit(_) => ApiKey::OffsetCommit,
        GroupResponse::OffsetFetch(_) => ApiKey::OffsetFetch,
        GroupResponse::ListGroups(_) => ApiKey::ListGroups,
        GroupResponse::DescribeGroups(_) => ApiKey::DescribeGroups,
        GroupResponse::DeleteGroups(_) => ApiKey::DeleteGroups,
        GroupResponse::OffsetDelete(_) => ApiKey::OffsetDelete,
        GroupResponse::TxnOffsetCommit(_) => ApiKey::TxnOffsetCommit,
    }
}

/// Checks that `response` encodes at `version` (as the broker's dispatch
/// encodes it) and decodes to itself.
fn round_trip(response: &GroupResponse, version: i16) {
    let mut buf = BytesMut::new();
    let encoded = response.clone().into_kind().encode(&mut buf, version);
    if let Err(e) = encoded {
        panic!(
            "{:?} v{version} does not encode: {e}: {response:?}",
            api_key(response)
        );
    }
    let mut bytes = buf.freeze();
    let same =
        match response {
            GroupResponse::JoinGroup(r) => JoinGroupResponse::decode(&mut bytes, version)
                .is_ok_and(|d| d.error_code == r.error_code && d.members.len() == r.members.len()),
            GroupResponse::SyncGroup(r) => SyncGroupResponse::decode(&mut bytes, version)
                .is_ok_and(|d| d.assignment == r.assignment),
            GroupResponse::Heartbeat(r) => HeartbeatResponse::decode(&mut bytes, version)
                .is_ok_and(|d| d.error_code == r.error_code),
            GroupResponse::LeaveGroup(r) => LeaveGroupResponse::decode(&mut bytes, version)
                .is_ok_and(|d| d.members == r.members),
            GroupResponse::OffsetCommit(r) => OffsetCommitResponse::decode(&mut bytes, version)
                .is_ok_and(|d| d.topics == r.topics),
            GroupResponse::OffsetFetch(r) => OffsetFetchResponse::decode(&mut bytes, version)
                .is_ok_and(|d| d.topics == r.topics && d.groups == r.groups),
            GroupResponse::ListGroups(r) => {
                ListGroupsResponse::decode(&mut bytes, version).is_ok_and(|d| d.groups == r.groups)
            }
            GroupResponse::DescribeGroups(r) => DescribeGroupsResponse::decode(&mut bytes, version)
                .is_ok_and(|d| d.groups == r.groups),
            GroupResponse::DeleteGroups(r) => DeleteGroupsResponse::decode(&mut bytes, version)
                .is_ok_and(|d| d.results == r.results),
            GroupResponse::OffsetDelete(r) => OffsetDeleteResponse::decode(&mut bytes, version)
                .is_ok_and(|d| d.topics == r.topics),
            GroupResponse::TxnOffsetCommit(r) => {
                TxnOffsetCommitResponse::decode(&mut bytes, version)
                    .is_ok_and(|d| d.topics == r.topics)
            }
        };
    assert!(
        same,
        "{:?} v{version} does not decode back",
        api_key(response)
    );
    assert!(
        bytes.is_empty(),
        "{:?} v{version} left bytes",
        api_key(response)
    );
}

/// Runs every API at `version` (clamped per API to its advertised range)
/// through success and error paths; returns how many responses it checked.
fn exercise(api: ApiKey, version: i16) -> usize {
    let mut h = Harness::new(config());
    let protocols = [("range", subscription(&["orders"]))];
    match api {
        ApiKey::JoinGroup => {
            let first = h.join(version, "g", "", Some("w"), &protocols);
            let id = h.join_response(first).member_id.to_string();
            if h.join_response(first).error_code != 0 {
                h.join(version, "g", &id, Some("w"), &protocols);
            }
            h.join(version, "g", "", None, &[]);
            h.join(version, "g", "ghost", Some("other"), &protocols);
        }
        ApiKey::SyncGroup | ApiKey::Heartbeat | ApiKey::LeaveGroup => {
            let (a, generation) = stable_single(&mut h, "g");
            let (b, join_b) = h.join_new("g", &protocols);
            h.join(7, "g", &a, None, &protocols);
            let generation = generation.max(h.join_response(join_b).generation_id);
            h.sync(version.min(5), "g", &b, generation, &[]);
            h.sync(
                version.min(5),
                "g",
                &a,
                generation,
                &[(&a, b"x"), (&b, b"y")],
            );
            h.sync(version.min(5), "g", "ghost", generation, &[]);
            let hb = HeartbeatRequest::default()
                .with_group_id(GroupId(s("g")))
                .with_generation_id(generation)
                .with_member_id(s(&a));
            h.send(version.min(4), GroupRequest::Heartbeat(hb.clone()));
            h.send(
                version.min(4),
                GroupRequest::Heartbeat(hb.with_generation_id(generation + 7)),
            );
            let mut leave = LeaveGroupRequest::default().with_group_id(GroupId(s("g")));
            if version >= 3 {
                leave.members = vec![
                    leave_group_request::MemberIdentity::default().with_member_id(s(&b)),
                    leave_group_request::MemberIdentity::default().with_member_id(s("ghost")),
                ];
            } else {
                leave.member_id = s(&b);
            }
            h.send(version.min(5), GroupRequest::LeaveGroup(leave.clone()));
            h.send(
                version.min(5),
                GroupRequest::LeaveGroup(leave.with_group_id(GroupId(s("unknown")))),
            );
        }
        ApiKey::OffsetCommit | ApiKey::OffsetFetch | ApiKey::OffsetDelete => {
            let (a, generation) = stable_single(&mut h, "g");
            let topic = offset_commit_request::OffsetCommitRequestTopic::default()
                .with_name(TopicName(s("orders")))
                .with_partitions(vec![
                    offset_commit_request::OffsetCommitRequestPartition::default()
                        .with_partition_index(0)
                        .with_committed_offset(5),
                ]);
            let commit = OffsetCommitRequest::default()
                .with_group_id(GroupId(s("g")))
                .with_generation_id_or_member_epoch(generation)
                .with_member_id(s(&a))
                .with_topics(vec![topic]);
            if api == ApiKey::OffsetCommit {
                h.send(version, GroupRequest::OffsetCommit(commit.clone()));
                h.send(
                    version,
                    GroupRequest::OffsetCommit(commit.with_generation_id_or_member_epoch(99)),
                );
            } else {
                h.send(8, GroupRequest::OffsetCommit(commit));
            }
            if api == ApiKey::OffsetFetch {
                for group in ["g", "unknown", ""] {
                    let mut fetch = OffsetFetchRequest::default();
                    let wanted = vec![
                        offset_fetch_request::OffsetFetchRequestTopic::default()
                            .with_name(TopicName(s("orders")))
                            .with_partition_indexes(vec![0, 1]),
                    ];
                    if version >= 8 {
                        fetch.groups = vec![
                            offset_fetch_request::OffsetFetchRequestGroup::default()
                                .with_group_id(GroupId(s(group)))
                                .with_topics(None),
                            offset_fetch_request::OffsetFetchRequestGroup::default()
                                .with_group_id(GroupId(s(group)))
                                .with_topics(Some(vec![
                                    offset_fetch_request::OffsetFetchRequestTopics::default()
                                        .with_name(TopicName(s("orders")))
                                        .with_partition_indexes(vec![0, 1]),
                                ])),
                        ];
                    } else {
                        fetch.group_id = GroupId(s(group));
                        fetch.topics = if version >= 2 && group == "g" {
                            None
                        } else {
                            Some(wanted)
                        };
                    }
                    h.send(version, GroupRequest::OffsetFetch(fetch));
                }
            }
            if api == ApiKey::OffsetDelete {
                for (group, topic) in [("g", "orders"), ("g", "other"), ("missing", "orders")] {
                    let request = OffsetDeleteRequest::default()
                        .with_group_id(GroupId(s(group)))
                        .with_topics(vec![
                            offset_delete_request::OffsetDeleteRequestTopic::default()
                                .with_name(TopicName(s(topic)))
                                .with_partitions(vec![
                                    offset_delete_request::OffsetDeleteRequestPartition::default()
                                        .with_partition_index(0),
                                ]),
                        ]);
                    h.send(version, GroupRequest::OffsetDelete(request));
                }
            }
        }
        ApiKey::ListGroups | ApiKey::DescribeGroups | ApiKey::DeleteGroups => {
            stable_single(&mut h, "g");
            h.commit("idle", "", -1, "t", 0, 1);
            let mut list = ListGroupsRequest::default();
            if version >= 4 {
                list.states_filter = vec![s("Stable"), s("Empty")];
            }
            if version >= 5 {
                list.types_filter = vec![s("classic")];
            }
            h.send(version.min(5), GroupRequest::ListGroups(list));
            h.send(
                version.min(5),
                GroupRequest::ListGroups(ListGroupsRequest::default()),
            );
            let mut describe = DescribeGroupsRequest::default().with_groups(vec![
                GroupId(s("g")),
                GroupId(s("idle")),
                GroupId(s("unknown")),
                GroupId(s("")),
            ]);
            if version >= 3 {
                describe.include_authorized_operations = true;
            }
            h.send(
                version.min(6),
                GroupRequest::DescribeGroups(describe.clone()),
            );
            h.send(
                version.min(6),
                GroupRequest::DescribeGroups(describe.with_include_authorized_operations(false)),
            );
            let delete = DeleteGroupsRequest::default().with_groups_names(vec![
                GroupId(s("g")),
                GroupId(s("idle")),
                GroupId(s("unknown")),
            ]);
            h.send(version.min(2), GroupRequest::DeleteGroups(delete.clone()));
            h.send(version.min(2), GroupRequest::DeleteGroups(delete));
        }
        ApiKey::TxnOffsetCommit => {
            let (a, generation) = stable_single(&mut h, "g");
            h.txn_commit(version, "g", 7, &a, generation, "orders", 0, 5);
            h.txn_commit(version, "g", 7, "ghost", generation, "orders", 0, 5);
            h.txn_commit(version, "fresh", 7, "", -1, "orders", 0, 5);
        }
        other => panic!("{other:?} is not a group API"),
    }
    let mut checked = 0;
    for (reply_version, response) in h.replies.values() {
        if api_key(response) == api {
            round_trip(response, *reply_version);
            checked += 1;
        }
    }
    checked
}

#[test]
fn every_response_encodes_at_every_advertised_version() {
    for &(api, min, max) in SUPPORTED_VERSIONS {
        for version in min..=max {
            let checked = exercise(api, version);
            assert!(
                checked >= 2,
                "{api:?} v{version}: only {checked} responses checked"
            );
        }
    }
}

#[test]
fn advertised_ranges_stay_within_what_the_codec_decodes() {
    use kafka_protocol::protocol::Message;
    let codec = |api: ApiKey| match api {
        ApiKey::OffsetCommit => OffsetCommitRequest::VERSIONS,
        ApiKey::OffsetFetch => OffsetFetchRequest::VERSIONS,
        ApiKey::JoinGroup => JoinGroupRequest::VERSIONS,
        ApiKey::Heartbeat => HeartbeatRequest::VERSIONS,
        ApiKey::LeaveGroup => LeaveGroupRequest::VERSIONS,
        ApiKey::SyncGroup => SyncGroupRequest::VERSIONS,
        ApiKey::DescribeGroups => DescribeGroupsRequest::VERSIONS,
        ApiKey::ListGroups => ListGroupsRequest::VERSIONS,
        ApiKey::DeleteGroups => DeleteGroupsRequest::VERSIONS,
        ApiKey::OffsetDelete => OffsetDeleteRequest::VERSIONS,
        ApiKey::TxnOffsetCommit => TxnOffsetCommitRequest::VERSIONS,
        other => panic!("{other:?}"),
    };
    for &(api, min, max) in SUPPORTED_VERSIONS {
        let range = codec(api);
        assert!(
            range.min <= min && max <= range.max,
            "{api:?} {min}..={max} outside {range:?}"
        );
    }
}

#[test]
fn client_host_is_formatted_as_kafka_shows_it() {
    use crate::group::wire::client_host;
    use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
    assert_eq!(
        client_host(Some(IpAddr::V4(Ipv4Addr::LOCALHOST))),
        "/127.0.0.1"
    );
    assert_eq!(
        client_host(Some(IpAddr::V6(Ipv6Addr::LOCALHOST))),
        "/0:0:0:0:0:0:0:1"
    );
    assert_eq!(client_host(None), "");
}
