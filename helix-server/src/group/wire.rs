//! Between the broker's Kafka dispatch and the coordinator: which decoded
//! requests are group calls, responses back into the dispatch's enum,
//! FindCoordinator (every group is coordinated by this node while it runs
//! every coordinator partition), and the version ranges ApiVersions adds.

use kafka_protocol::messages::find_coordinator_response::Coordinator as KeyCoordinator;
use kafka_protocol::messages::{
    ApiKey, BrokerId, FindCoordinatorRequest, FindCoordinatorResponse, RequestKind, ResponseKind,
};
use kafka_protocol::protocol::StrBytes;

use super::coordinator::GroupRequest;
use super::error::{GroupError, NONE};
use super::response::{GroupResponse, str_bytes};
use super::versions::SUPPORTED_VERSIONS;

/// FindCoordinator versions served: v4+ carry batched coordinator keys.
pub const FIND_COORDINATOR_VERSIONS: (i16, i16) = (0, 6);
/// FindCoordinator's key type for consumer groups.
const KEY_TYPE_GROUP: i8 = 0;
/// FindCoordinator's key type for transactional ids (`txn::wire` answers it).
pub const KEY_TYPE_TRANSACTION: i8 = 1;

/// A request the group service answers.
#[derive(Debug)]
pub enum GroupCall {
    Coordinator(GroupRequest),
    FindCoordinator(FindCoordinatorRequest),
}

/// Every (api, min, max) the group service adds to ApiVersions.
pub fn advertised() -> impl Iterator<Item = (ApiKey, i16, i16)> {
    let (min, max) = FIND_COORDINATOR_VERSIONS;
    SUPPORTED_VERSIONS
        .iter()
        .copied()
        .chain([(ApiKey::FindCoordinator, min, max)])
}

/// A client's address as Kafka shows it in DescribeGroups' `client_host`
/// (Java's `InetAddress.toString()` without a host name: "/127.0.0.1",
/// IPv6 uncompressed "/0:0:0:0:0:0:0:1"); empty when unknown.
pub fn client_host(peer: Option<std::net::IpAddr>) -> String {
    match peer {
        None => String::new(),
        Some(std::net::IpAddr::V4(ip)) => format!("/{ip}"),
        Some(std::net::IpAddr::V6(ip)) => {
            let segments: Vec<String> = ip.segments().iter().map(|s| format!("{s:x}")).collect();
            format!("/{}", segments.join(":"))
        }
    }
}

/// The advertised range of `key`, if the group service serves it.
pub fn range(key: ApiKey) -> Option<(i16, i16)> {
    advertised()
        .find(|(k, _, _)| *k == key)
        .map(|(_, min, max)| (min, max))
}

/// A TxnOffsetCommit as a group call (the dispatch checks its topics and
/// its transaction first).
pub fn txn_offset_commit(request: kafka_protocol::messages::TxnOffsetCommitRequest) -> GroupCall {
    GroupCall::Coordinator(GroupRequest::TxnOffsetCommit(request))
}

/// Sorts a decoded request: a group call, or back to the caller.
pub fn classify(kind: RequestKind) -> Result<GroupCall, Box<RequestKind>> {
    let request = match kind {
        RequestKind::JoinGroup(r) => GroupRequest::JoinGroup(r),
        RequestKind::SyncGroup(r) => GroupRequest::SyncGroup(r),
        RequestKind::Heartbeat(r) => GroupRequest::Heartbeat(r),
        RequestKind::LeaveGroup(r) => GroupRequest::LeaveGroup(r),
        RequestKind::OffsetCommit(r) => GroupRequest::OffsetCommit(r),
        RequestKind::OffsetFetch(r) => GroupRequest::OffsetFetch(r),
        RequestKind::ListGroups(r) => GroupRequest::ListGroups(r),
        RequestKind::DescribeGroups(r) => GroupRequest::DescribeGroups(r),
        RequestKind::DeleteGroups(r) => GroupRequest::DeleteGroups(r),
        RequestKind::OffsetDelete(r) => GroupRequest::OffsetDelete(r),
        RequestKind::TxnOffsetCommit(r) => GroupRequest::TxnOffsetCommit(r),
        RequestKind::FindCoordinator(r) => return Ok(GroupCall::FindCoordinator(r)),
        other => return Err(Box::new(other)),
    };
    Ok(GroupCall::Coordinator(request))
}

impl GroupResponse {
    pub fn into_kind(self) -> ResponseKind {
        match self {
            GroupResponse::JoinGroup(r) => ResponseKind::JoinGroup(r),
            GroupResponse::SyncGroup(r) => ResponseKind::SyncGroup(r),
            GroupResponse::Heartbeat(r) => ResponseKind::Heartbeat(r),
            GroupResponse::LeaveGroup(r) => ResponseKind::LeaveGroup(r),
            GroupResponse::OffsetCommit(r) => ResponseKind::OffsetCommit(r),
            GroupResponse::OffsetFetch(r) => ResponseKind::OffsetFetch(r),
            GroupResponse::ListGroups(r) => ResponseKind::ListGroups(r),
            GroupResponse::DescribeGroups(r) => ResponseKind::DescribeGroups(r),
            GroupResponse::DeleteGroups(r) => ResponseKind::DeleteGroups(r),
            GroupResponse::OffsetDelete(r) => ResponseKind::OffsetDelete(r),
            GroupResponse::TxnOffsetCommit(r) => ResponseKind::TxnOffsetCommit(r),
        }
    }
}

/// Where a node is reached (its advertised address).
#[derive(Debug, Clone)]
pub struct NodeAddress {
    pub node_id: i32,
    pub host: String,
    pub port: i32,
}

/// FindCoordinator: for each group key, the node `locate` names (the
/// leader of the key's coordinator partition), or COORDINATOR_NOT_AVAILABLE
/// while it has none; other key types are not the group service's (the
/// dispatch sends transactional ids to `txn::wire`; share groups do not
/// exist here).
pub fn find_coordinator(
    request: &FindCoordinatorRequest,
    version: i16,
    locate: impl Fn(&str) -> Option<NodeAddress>,
) -> FindCoordinatorResponse {
    find_coordinator_of(
        request,
        version,
        KEY_TYPE_GROUP,
        GroupError::InvalidGroupId.code(),
        locate,
    )
}

/// FindCoordinator for the coordinators of `key_type`: each key's node as
/// `locate` names it; an empty key is answered `empty_key_code`, another
/// key type COORDINATOR_NOT_AVAILABLE.
pub fn find_coordinator_of(
    request: &FindCoordinatorRequest,
    version: i16,
    key_type: i8,
    empty_key_code: i16,
    locate: impl Fn(&str) -> Option<NodeAddress>,
) -> FindCoordinatorResponse {
    let answer = |key: &str| -> std::result::Result<NodeAddress, (i16, &'static str)> {
        if request.key_type != key_type {
            Err((
                GroupError::CoordinatorNotAvailable.code(),
                "no coordinator of this key type here",
            ))
        } else if key.is_empty() {
            Err((empty_key_code, "empty key"))
        } else {
            locate(key).ok_or((
                GroupError::CoordinatorNotAvailable.code(),
                "the key's coordinator partition has no leader yet",
            ))
        }
    };
    let split = |a: std::result::Result<NodeAddress, (i16, &'static str)>| match a {
        Ok(n) => (NONE, None, n.node_id, n.host, n.port),
        Err((code, message)) => (code, Some(message), -1, String::new(), -1),
    };
    let mut response = FindCoordinatorResponse::default();
    if version >= 4 {
        response.coordinators = request
            .coordinator_keys
            .iter()
            .map(|key| {
                let (code, message, node_id, host, port) = split(answer(key));
                KeyCoordinator::default()
                    .with_key(key.clone())
                    .with_node_id(BrokerId(node_id))
                    .with_host(str_bytes(&host))
                    .with_port(port)
                    .with_error_code(code)
                    .with_error_message(message.map(StrBytes::from_static_str))
            })
            .collect();
        return response;
    }
    let (code, message, node_id, host, port) = split(answer(&request.key));
    response.error_code = code;
    response.node_id = BrokerId(node_id);
    response.host = str_bytes(&host);
    response.port = port;
    if version >= 1 {
        response.error_message = message.map(StrBytes::from_static_str);
    }
    response
}

#[cfg(test)]
mod tests {
    use bytes::BytesMut;
    use kafka_protocol::protocol::{Decodable, Encodable};

    use super::*;

    #[test]
    fn find_coordinator_answers_this_node_at_every_version() {
        let node = NodeAddress {
            node_id: 7,
            host: "127.0.0.1".into(),
            port: 9092,
        };
        let (min, max) = FIND_COORDINATOR_VERSIONS;
        for version in min..=max {
            let mut request = FindCoordinatorRequest::default();
            if version >= 4 {
                request.coordinator_keys = vec![str_bytes("a"), str_bytes("b")];
            } else {
                request.key = str_bytes("a");
            }
            let response = find_coordinator(&request, version, |_| Some(node.clone()));
            let mut buf = BytesMut::new();
            response.encode(&mut buf, version).expect("encodes");
            let decoded =
                FindCoordinatorResponse::decode(&mut buf.freeze(), version).expect("decodes");
            if version >= 4 {
                assert_eq!(decoded.coordinators.len(), 2);
                assert!(
                    decoded
                        .coordinators
                        .iter()
                        .all(|c| c.node_id.0 == 7 && c.port == 9092 && c.error_code == 0)
                );
            } else {
                assert_eq!(
                    (decoded.node_id.0, decoded.host.as_str(), decoded.port),
                    (7, "127.0.0.1", 9092)
                );
            }
        }
        let transactions = FindCoordinatorRequest::default()
            .with_key(str_bytes("tx"))
            .with_key_type(1);
        assert_eq!(
            find_coordinator(&transactions, 3, |_| Some(node.clone())).error_code,
            15
        );
        let leaderless = find_coordinator(
            &FindCoordinatorRequest::default().with_key(str_bytes("g")),
            3,
            |_| None,
        );
        assert_eq!(leaderless.error_code, 15);
        assert_eq!(leaderless.node_id.0, -1);
    }
}
