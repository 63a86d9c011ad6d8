//! The ACL APIs at every version, and ACLs enforced through dispatch for
//! principals of a plaintext session (ADR 0028, slice 2).

use std::sync::Arc;

use kafka_protocol::messages::*;

use super::session::{Listener, Session};
use super::tests::answer_in;
use super::{wire_str, wire_topic};
use crate::broker::Broker;
use crate::config::{AuthorizerConfig, Config};
use crate::replica::batch::tests::make_batch;

pub(crate) fn is_acl_api(k: ApiKey) -> bool {
    matches!(
        k,
        ApiKey::DescribeAcls | ApiKey::CreateAcls | ApiKey::DeleteAcls
    )
}

const TOPIC: i8 = 2;
const GROUP: i8 = 3;
const CLUSTER: i8 = 4;
const LITERAL: i8 = 3;
const PREFIXED: i8 = 4;
const ANY: i8 = 1;
const READ: i8 = 3;
const WRITE: i8 = 4;
const ALLOW: i8 = 3;

fn creation(t: i8, name: &str, pattern: i8, who: &str, op: i8) -> create_acls_request::AclCreation {
    let mut c = create_acls_request::AclCreation::default();
    c.resource_type = t;
    c.resource_name = wire_str(name);
    c.resource_pattern_type = pattern;
    c.principal = wire_str(who);
    c.host = wire_str("*");
    c.operation = op;
    c.permission_type = ALLOW;
    c
}

/// One request of each ACL API: create a Read on topic `acl-vN` for
/// alice, describe everything, delete what names `acl-vN`.
pub(crate) fn request(key: ApiKey, version: i16) -> RequestKind {
    let name = format!("acl-v{version}");
    match key {
        ApiKey::CreateAcls => CreateAclsRequest::default()
            .with_creations(vec![creation(TOPIC, &name, LITERAL, "User:alice", READ)])
            .into(),
        ApiKey::DescribeAcls => DescribeAclsRequest::default()
            .with_resource_type_filter(ANY)
            .with_resource_name_filter(None)
            .with_principal_filter(None)
            .with_host_filter(None)
            .with_pattern_type_filter(ANY)
            .with_operation(ANY)
            .with_permission_type(ANY)
            .into(),
        _ => DeleteAclsRequest::default()
            .with_filters(vec![
                delete_acls_request::DeleteAclsFilter::default()
                    .with_resource_type_filter(TOPIC)
                    .with_resource_name_filter(Some(wire_str(&name)))
                    .with_pattern_type_filter(LITERAL)
                    .with_principal_filter(None)
                    .with_host_filter(None)
                    .with_operation(ANY)
                    .with_permission_type(ANY),
            ])
            .into(),
    }
}

async fn secured(dir: &std::path::Path) -> Arc<Broker> {
    let config = Config {
        data_dir: dir.to_path_buf(),
        authorizer: AuthorizerConfig {
            enabled: true,
            super_users: vec!["User:admin".into()],
            allow_everyone_if_no_acl_found: false,
        },
        ..Config::default()
    };
    let b = Broker::open(config).await.expect("open broker");
    for t in ["t", "orders-1", "secret"] {
        b.admin
            .create_topic(t, 1, -1, None, Default::default(), false)
            .await
            .expect("topic");
    }
    b
}

fn session(principal: &str) -> Session {
    let listener = Listener::plaintext("127.0.0.1", 9092);
    let peer = Some("10.1.1.1".parse().expect("address"));
    Session::new(listener, peer, Some(principal.to_string()))
}

async fn call(
    b: &Arc<Broker>,
    who: &mut Session,
    key: ApiKey,
    version: i16,
    body: RequestKind,
) -> ResponseKind {
    let mut out = answer_in(b, key, version, &body, who)
        .await
        .expect("answered");
    ResponseKind::decode(key, &mut out, version).expect("decodes")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acl_apis_answer_security_disabled_without_an_authorizer() {
    let dir = tempfile::tempdir().expect("tempdir");
    let b = super::tests::broker(dir.path()).await;
    let mut anyone = session("User:ANONYMOUS");
    for v in 1..=3 {
        let k = ApiKey::DescribeAcls;
        let ResponseKind::DescribeAcls(r) = call(&b, &mut anyone, k, v, request(k, v)).await else {
            panic!("not a DescribeAcls answer");
        };
        assert_eq!(r.error_code, 54);
        let k = ApiKey::CreateAcls;
        let ResponseKind::CreateAcls(r) = call(&b, &mut anyone, k, v, request(k, v)).await else {
            panic!("not a CreateAcls answer");
        };
        assert_eq!(
            r.results.iter().map(|r| r.error_code).collect::<Vec<_>>(),
            [54]
        );
        let k = ApiKey::DeleteAcls;
        let ResponseKind::DeleteAcls(r) = call(&b, &mut anyone, k, v, request(k, v)).await else {
            panic!("not a DeleteAcls answer");
        };
        assert_eq!(
            r.filter_results
                .iter()
                .map(|r| r.error_code)
                .collect::<Vec<_>>(),
            [54]
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acl_apis_create_describe_and_delete_at_every_version() {
    let dir = tempfile::tempdir().expect("tempdir");
    let b = secured(dir.path()).await;
    let mut admin = session("User:admin");
    for v in 1..=3 {
        let k = ApiKey::CreateAcls;
        let ResponseKind::CreateAcls(r) = call(&b, &mut admin, k, v, request(k, v)).await else {
            panic!("not a CreateAcls answer");
        };
        assert_eq!(
            r.results.iter().map(|r| r.error_code).collect::<Vec<_>>(),
            [0]
        );
        let k = ApiKey::DescribeAcls;
        let ResponseKind::DescribeAcls(r) = call(&b, &mut admin, k, v, request(k, v)).await else {
            panic!("not a DescribeAcls answer");
        };
        assert_eq!(r.error_code, 0);
        let names: Vec<_> = r
            .resources
            .iter()
            .map(|r| r.resource_name.to_string())
            .collect();
        assert_eq!(names, [format!("acl-v{v}")]);
        assert_eq!(r.resources[0].acls[0].principal.as_str(), "User:alice");
        let k = ApiKey::DeleteAcls;
        let ResponseKind::DeleteAcls(r) = call(&b, &mut admin, k, v, request(k, v)).await else {
            panic!("not a DeleteAcls answer");
        };
        assert_eq!(r.filter_results[0].error_code, 0);
        assert_eq!(r.filter_results[0].matching_acls.len(), 1);
    }
    assert_eq!(b.controller.view().view.acls.iter().count(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_bindings_and_filters_get_invalid_request_and_non_admins_cluster_errors() {
    let dir = tempfile::tempdir().expect("tempdir");
    let b = secured(dir.path()).await;
    let mut admin = session("User:admin");
    let body = CreateAclsRequest::default()
        .with_creations(vec![
            creation(CLUSTER, "my-cluster", LITERAL, "User:alice", 7),
            creation(TOPIC, "ok", LITERAL, "User:alice", READ),
            creation(TOPIC, "x", 2, "User:alice", READ),
            creation(TOPIC, "x", LITERAL, "alice", READ),
        ])
        .into();
    let ResponseKind::CreateAcls(r) = call(&b, &mut admin, ApiKey::CreateAcls, 3, body).await
    else {
        panic!("not a CreateAcls answer");
    };
    let codes: Vec<_> = r.results.iter().map(|r| r.error_code).collect();
    assert_eq!(codes, [42, 0, 42, 42]);
    let body = DescribeAclsRequest::default()
        .with_resource_type_filter(0)
        .with_pattern_type_filter(ANY)
        .with_operation(ANY)
        .with_permission_type(ANY)
        .into();
    let ResponseKind::DescribeAcls(r) = call(&b, &mut admin, ApiKey::DescribeAcls, 3, body).await
    else {
        panic!("not a DescribeAcls answer");
    };
    assert_eq!(r.error_code, 42);
    let mut alice = session("User:alice");
    let k = ApiKey::CreateAcls;
    let ResponseKind::CreateAcls(r) = call(&b, &mut alice, k, 3, request(k, 3)).await else {
        panic!("not a CreateAcls answer");
    };
    assert_eq!(r.results[0].error_code, 31);
    let k = ApiKey::DescribeAcls;
    let ResponseKind::DescribeAcls(r) = call(&b, &mut alice, k, 3, request(k, 3)).await else {
        panic!("not a DescribeAcls answer");
    };
    assert_eq!(r.error_code, 31);
}

fn produce_to(topic: &str) -> RequestKind {
    let mut pd = produce_request::PartitionProduceData::default();
    pd.records = Some(make_batch(&[b"v"], -1, -1, 1000));
    let mut td = produce_request::TopicProduceData::default();
    td.name = wire_topic(topic);
    td.partition_data = vec![pd];
    ProduceRequest::default()
        .with_acks(-1)
        .with_timeout_ms(5000)
        .with_topic_data(vec![td])
        .into()
}

fn produce_codes(r: &ResponseKind) -> Vec<(String, i16)> {
    let ResponseKind::Produce(r) = r else {
        panic!("not a Produce answer");
    };
    r.responses
        .iter()
        .flat_map(|t| {
            t.partition_responses
                .iter()
                .map(|p| (t.name.0.to_string(), p.error_code))
        })
        .collect()
}

fn metadata_topics(r: &ResponseKind) -> Vec<(String, i16)> {
    let ResponseKind::Metadata(r) = r else {
        panic!("not a Metadata answer");
    };
    let mut out: Vec<_> = r
        .topics
        .iter()
        .map(|t| {
            (
                t.name.as_ref().map(|n| n.0.to_string()).unwrap_or_default(),
                t.error_code,
            )
        })
        .collect();
    out.sort();
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_principal_may_do_what_its_acls_allow_and_nothing_else() {
    let dir = tempfile::tempdir().expect("tempdir");
    let b = secured(dir.path()).await;
    let mut admin = session("User:admin");
    let grants = CreateAclsRequest::default()
        .with_creations(vec![
            creation(TOPIC, "orders", PREFIXED, "User:alice", WRITE),
            creation(GROUP, "g1", LITERAL, "User:alice", READ),
        ])
        .into();
    call(&b, &mut admin, ApiKey::CreateAcls, 3, grants).await;
    let mut alice = session("User:alice");
    let both = {
        let RequestKind::Produce(mut a) = produce_to("orders-1") else {
            unreachable!()
        };
        let RequestKind::Produce(s) = produce_to("secret") else {
            unreachable!()
        };
        a.topic_data.extend(s.topic_data);
        RequestKind::Produce(a)
    };
    let r = call(&b, &mut alice, ApiKey::Produce, 9, both).await;
    assert_eq!(
        produce_codes(&r),
        [("orders-1".to_string(), 0), ("secret".to_string(), 29)]
    );
    // Every topic: only what alice may Describe (Write implies it).
    let all = MetadataRequest::default().with_topics(None).into();
    let r = call(&b, &mut alice, ApiKey::Metadata, 12, all).await;
    assert_eq!(metadata_topics(&r), [("orders-1".to_string(), 0)]);
    // Named: TOPIC_AUTHORIZATION_FAILED, and no auto-creation without
    // Create.
    let named = MetadataRequest::default()
        .with_topics(Some(
            ["secret", "orders-new"]
                .iter()
                .map(|n| {
                    metadata_request::MetadataRequestTopic::default().with_name(Some(wire_topic(n)))
                })
                .collect(),
        ))
        .with_allow_auto_topic_creation(true)
        .into();
    let r = call(&b, &mut alice, ApiKey::Metadata, 12, named).await;
    assert_eq!(
        metadata_topics(&r),
        [("orders-new".to_string(), 29), ("secret".to_string(), 29)]
    );
    assert!(b.topic("orders-new").is_none(), "not auto-created");
    // An idempotent producer with Write on some topic gets an id; one
    // without any grant gets CLUSTER_AUTHORIZATION_FAILED.
    let init = || {
        InitProducerIdRequest::default()
            .with_transactional_id(None)
            .with_transaction_timeout_ms(60_000)
            .with_producer_id(ProducerId(-1))
            .with_producer_epoch(-1)
            .into()
    };
    let ResponseKind::InitProducerId(r) =
        call(&b, &mut alice, ApiKey::InitProducerId, 4, init()).await
    else {
        panic!("not an InitProducerId answer");
    };
    assert_eq!(r.error_code, 0);
    let mut bob = session("User:bob");
    let ResponseKind::InitProducerId(r) =
        call(&b, &mut bob, ApiKey::InitProducerId, 4, init()).await
    else {
        panic!("not an InitProducerId answer");
    };
    assert_eq!(r.error_code, 31);
    let ResponseKind::DescribeCluster(r) = call(
        &b,
        &mut alice,
        ApiKey::DescribeCluster,
        1,
        DescribeClusterRequest::default().into(),
    )
    .await
    else {
        panic!("not a DescribeCluster answer");
    };
    assert_eq!(r.error_code, 31);
    let join = |group: &str| {
        JoinGroupRequest::default()
            .with_group_id(GroupId(wire_str(group)))
            .with_session_timeout_ms(10_000)
            .with_rebalance_timeout_ms(10_000)
            .with_protocol_type(wire_str("consumer"))
            .into()
    };
    let ResponseKind::JoinGroup(r) = call(&b, &mut alice, ApiKey::JoinGroup, 9, join("g2")).await
    else {
        panic!("not a JoinGroup answer");
    };
    assert_eq!(r.error_code, 30);
    let ResponseKind::JoinGroup(r) = call(&b, &mut alice, ApiKey::JoinGroup, 9, join("g1")).await
    else {
        panic!("not a JoinGroup answer");
    };
    assert_ne!(r.error_code, 30, "Read on g1 lets alice join");
    let denied = b.controller.view().view.acls.iter().count();
    assert_eq!(denied, 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn credentials_and_quotas_need_their_cluster_operations() {
    let dir = tempfile::tempdir().expect("tempdir");
    let b = secured(dir.path()).await;
    let alter_scram = || -> RequestKind {
        AlterUserScramCredentialsRequest::default()
            .with_upsertions(vec![
                alter_user_scram_credentials_request::ScramCredentialUpsertion::default()
                    .with_name(wire_str("bob"))
                    .with_mechanism(1)
                    .with_iterations(4096)
                    .with_salt(bytes::Bytes::from_static(b"salt"))
                    .with_salted_password(bytes::Bytes::from_static(&[9; 32])),
            ])
            .into()
    };
    let alter_quota = || -> RequestKind {
        AlterClientQuotasRequest::default()
            .with_entries(vec![
                alter_client_quotas_request::EntryData::default()
                    .with_entity(vec![
                        alter_client_quotas_request::EntityData::default()
                            .with_entity_type(wire_str("client-id"))
                            .with_entity_name(Some(wire_str("c"))),
                    ])
                    .with_ops(vec![
                        alter_client_quotas_request::OpData::default()
                            .with_key(wire_str("producer_byte_rate"))
                            .with_value(1_048_576.0),
                    ]),
            ])
            .into()
    };
    let codes = |r: &ResponseKind| -> Vec<i16> {
        match r {
            ResponseKind::DescribeUserScramCredentials(r) => vec![r.error_code],
            ResponseKind::AlterUserScramCredentials(r) => {
                r.results.iter().map(|x| x.error_code).collect()
            }
            ResponseKind::DescribeClientQuotas(r) => vec![r.error_code],
            ResponseKind::AlterClientQuotas(r) => r.entries.iter().map(|x| x.error_code).collect(),
            other => panic!("unexpected answer {other:?}"),
        }
    };
    let mut alice = session("User:alice");
    let mut admin = session("User:admin");
    let cases = [
        (
            ApiKey::DescribeUserScramCredentials,
            DescribeUserScramCredentialsRequest::default().into(),
        ),
        (ApiKey::AlterUserScramCredentials, alter_scram()),
        (
            ApiKey::DescribeClientQuotas,
            DescribeClientQuotasRequest::default().into(),
        ),
        (ApiKey::AlterClientQuotas, alter_quota()),
    ];
    for (key, body) in cases {
        let version = if key == ApiKey::DescribeClientQuotas || key == ApiKey::AlterClientQuotas {
            1
        } else {
            0
        };
        let denied = call(&b, &mut alice, key, version, body.clone()).await;
        assert_eq!(codes(&denied), [31], "{key:?} as alice");
        let allowed = call(&b, &mut admin, key, version, body).await;
        assert!(codes(&allowed).iter().all(|&c| c != 31), "{key:?} as admin");
    }
}

/// AddPartitionsToTxn v4+ comes from brokers: ClusterAction on the cluster,
/// else the top-level CLUSTER_AUTHORIZATION_FAILED and no results (Kafka's
/// `authorizeClusterOperation`); Write on the transactional id is not asked.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_brokers_add_partitions_to_txn_needs_cluster_action() {
    let dir = tempfile::tempdir().expect("tempdir");
    let b = secured(dir.path()).await;
    let verify = AddPartitionsToTxnRequest::default().with_transactions(vec![
        add_partitions_to_txn_request::AddPartitionsToTxnTransaction::default()
            .with_transactional_id(TransactionalId(wire_str("x")))
            .with_producer_id(ProducerId(7))
            .with_verify_only(true)
            .with_topics(vec![
                add_partitions_to_txn_request::AddPartitionsToTxnTopic::default()
                    .with_name(wire_topic("t"))
                    .with_partitions(vec![0]),
            ]),
    ]);
    let answer = |r: ResponseKind| match r {
        ResponseKind::AddPartitionsToTxn(r) => (
            r.error_code,
            r.results_by_transaction
                .iter()
                .flat_map(|t| &t.topic_results)
                .flat_map(|t| &t.results_by_partition)
                .map(|p| p.partition_error_code)
                .collect::<Vec<_>>(),
        ),
        other => panic!("unexpected answer {other:?}"),
    };
    for version in [4, 5] {
        let body: RequestKind = verify.clone().into();
        let mut alice = session("User:alice");
        let denied = call(&b, &mut alice, ApiKey::AddPartitionsToTxn, version, body).await;
        assert_eq!(answer(denied), (31, vec![]), "v{version} as alice");
        let body: RequestKind = verify.clone().into();
        let mut admin = session("User:admin");
        let allowed = call(&b, &mut admin, ApiKey::AddPartitionsToTxn, version, body).await;
        // Passed to the coordinator: "x" was never initialised.
        assert_eq!(answer(allowed), (0, vec![49]), "v{version} as admin");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_operator_tools_need_describe_or_alter_on_the_cluster() {
    let dir = tempfile::tempdir().expect("tempdir");
    let b = secured(dir.path()).await;
    let codes = |r: &ResponseKind| -> Vec<i16> {
        match r {
            ResponseKind::DescribeLogDirs(r) => vec![r.error_code],
            ResponseKind::DescribeQuorum(r) => vec![r.error_code],
            ResponseKind::ListPartitionReassignments(r) => vec![r.error_code],
            ResponseKind::ElectLeaders(r) => std::iter::once(r.error_code)
                .chain(
                    r.replica_election_results
                        .iter()
                        .flat_map(|t| t.partition_result.iter().map(|p| p.error_code)),
                )
                .collect(),
            other => panic!("unexpected answer {other:?}"),
        }
    };
    let elect: RequestKind = ElectLeadersRequest::default()
        .with_topic_partitions(Some(vec![
            elect_leaders_request::TopicPartitions::default()
                .with_topic(TopicName(wire_str("t")))
                .with_partitions(vec![0]),
        ]))
        .into();
    let cases = [
        (
            ApiKey::DescribeLogDirs,
            4,
            DescribeLogDirsRequest::default().into(),
        ),
        (
            ApiKey::DescribeQuorum,
            2,
            DescribeQuorumRequest::default().into(),
        ),
        (
            ApiKey::ListPartitionReassignments,
            0,
            ListPartitionReassignmentsRequest::default().into(),
        ),
        (ApiKey::ElectLeaders, 2, elect),
    ];
    let mut alice = session("User:alice");
    let mut admin = session("User:admin");
    for (key, version, body) in cases {
        let denied = call(&b, &mut alice, key, version, body.clone()).await;
        let denied = codes(&denied);
        assert!(
            !denied.is_empty() && denied.iter().all(|&c| c == 31),
            "{key:?} as alice: {denied:?}"
        );
        let allowed = call(&b, &mut admin, key, version, body).await;
        assert!(codes(&allowed).iter().all(|&c| c != 31), "{key:?} as admin");
    }
}
