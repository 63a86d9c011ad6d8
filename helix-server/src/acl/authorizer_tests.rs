use super::*;
use Operation::*;
use PatternType::*;
use Permission::*;
use ResourceType::*;

fn acl(t: ResourceType, name: &str, pattern: PatternType, who: &str) -> AclBinding {
    AclBinding {
        resource_type: t,
        name: name.into(),
        pattern,
        principal: who.into(),
        host: "*".into(),
        operation: Read,
        permission: Allow,
    }
}

fn with(mut b: AclBinding, op: Operation, permission: Permission) -> AclBinding {
    b.operation = op;
    b.permission = permission;
    b
}

fn table(bindings: &[AclBinding]) -> AclTable {
    let mut t = AclTable::default();
    t.create(bindings).expect("valid bindings");
    t
}

fn authorizer(super_users: &[&str], allow_if_none: bool) -> Authorizer {
    Authorizer::from_config(&AuthorizerConfig {
        enabled: true,
        super_users: super_users.iter().map(|s| s.to_string()).collect(),
        allow_everyone_if_no_acl_found: allow_if_none,
    })
    .expect("enabled")
}

const ALICE: Requester<'static> = Requester {
    principal: "User:alice",
    host: "10.0.0.1",
};
const BOB: Requester<'static> = Requester {
    principal: "User:bob",
    host: "10.0.0.2",
};

#[test]
fn deny_wins_over_allow_from_any_pattern() {
    let a = authorizer(&[], false);
    let acls = table(&[
        with(acl(Topic, "orders", Prefixed, "User:alice"), Write, Allow),
        with(acl(Topic, "orders-secret", Literal, "User:*"), Write, Deny),
    ]);
    assert!(a.authorize(&acls, &ALICE, Write, Topic, "orders-eu"));
    assert!(!a.authorize(&acls, &ALICE, Write, Topic, "orders-secret"));
    assert!(!a.authorize(&acls, &ALICE, Write, Topic, "other"));
    // A DENY of All denies every operation.
    let acls = table(&[
        with(acl(Topic, "*", Literal, "User:alice"), All, Allow),
        with(acl(Topic, "pay", Prefixed, "User:alice"), All, Deny),
    ]);
    assert!(a.authorize(&acls, &ALICE, Read, Topic, "anything"));
    assert!(!a.authorize(&acls, &ALICE, Describe, Topic, "payments"));
}

#[test]
fn wildcards_match_every_resource_and_every_principal() {
    let a = authorizer(&[], false);
    let acls = table(&[acl(Group, "*", Literal, "User:*")]);
    assert!(a.authorize(&acls, &ALICE, Read, Group, "g1"));
    assert!(a.authorize(&acls, &BOB, Read, Group, "g2"));
    assert!(!a.authorize(&acls, &BOB, Read, Topic, "g2"), "other type");
    // A prefixed `*` is a prefix like any other: only names starting with it.
    let acls = table(&[acl(Group, "*", Prefixed, "User:alice")]);
    assert!(!a.authorize(&acls, &ALICE, Read, Group, "g1"));
    assert!(a.authorize(&acls, &ALICE, Read, Group, "*g1"));
}

#[test]
fn hosts_must_match_unless_the_binding_says_any() {
    let a = authorizer(&[], false);
    let mut b = acl(Topic, "t", Literal, "User:alice");
    b.host = "10.0.0.1".into();
    let acls = table(&[b]);
    assert!(a.authorize(&acls, &ALICE, Read, Topic, "t"));
    let elsewhere = Requester {
        host: "10.0.0.9",
        ..ALICE
    };
    assert!(!a.authorize(&acls, &elsewhere, Read, Topic, "t"));
}

#[test]
fn allows_imply_describe_but_denies_only_deny_their_operation() {
    let a = authorizer(&[], false);
    for op in [Read, Write, Delete, Alter] {
        let acls = table(&[with(acl(Topic, "t", Literal, "User:alice"), op, Allow)]);
        assert!(a.authorize(&acls, &ALICE, Describe, Topic, "t"), "{op:?}");
        assert!(!a.authorize(&acls, &ALICE, Create, Topic, "t"), "{op:?}");
    }
    let acls = table(&[with(
        acl(Topic, "t", Literal, "User:alice"),
        AlterConfigs,
        Allow,
    )]);
    assert!(a.authorize(&acls, &ALICE, DescribeConfigs, Topic, "t"));
    assert!(!a.authorize(&acls, &ALICE, Describe, Topic, "t"));
    let acls = table(&[
        with(acl(Topic, "t", Literal, "User:alice"), Describe, Allow),
        with(acl(Topic, "t", Literal, "User:alice"), Read, Deny),
    ]);
    assert!(a.authorize(&acls, &ALICE, Describe, Topic, "t"));
    assert!(!a.authorize(&acls, &ALICE, Read, Topic, "t"));
}

#[test]
fn super_users_pass_every_check_even_a_deny() {
    let a = authorizer(&["User:admin", "User:CN=ops"], false);
    let acls = table(&[with(
        acl(Cluster, "kafka-cluster", Literal, "User:*"),
        All,
        Deny,
    )]);
    let admin = Requester {
        principal: "User:admin",
        host: "1.2.3.4",
    };
    assert!(a.authorize(&acls, &admin, Alter, Cluster, "kafka-cluster"));
    assert!(a.authorize(&AclTable::default(), &admin, Write, Topic, "t"));
    assert!(!a.authorize(&acls, &ALICE, Alter, Cluster, "kafka-cluster"));
}

#[test]
fn a_resource_without_bindings_is_open_only_when_configured() {
    let empty = AclTable::default();
    assert!(!authorizer(&[], false).authorize(&empty, &ALICE, Read, Topic, "t"));
    let open = authorizer(&[], true);
    assert!(open.authorize(&empty, &ALICE, Read, Topic, "t"));
    // Any binding covering the resource, even for someone else, closes it.
    let acls = table(&[acl(Topic, "t", Prefixed, "User:bob")]);
    assert!(!open.authorize(&acls, &ALICE, Read, Topic, "t1"));
    assert!(open.authorize(&acls, &ALICE, Read, Topic, "u"));
}

#[test]
fn by_resource_type_needs_an_allow_no_deny_dominates() {
    let a = authorizer(&[], false);
    let who = &ALICE;
    let allow = |name: &str, p| with(acl(Topic, name, p, "User:alice"), Write, Allow);
    let deny = |name: &str, p| with(acl(Topic, name, p, "User:alice"), Write, Deny);
    let check =
        |bindings: &[AclBinding]| a.authorize_by_resource_type(&table(bindings), who, Write, Topic);
    assert!(!check(&[]));
    assert!(check(&[allow("orders", Prefixed)]));
    assert!(!check(&[allow("orders", Prefixed), deny("ord", Prefixed)]));
    assert!(check(&[
        allow("orders", Literal),
        deny("orders-eu", Literal)
    ]));
    assert!(!check(&[allow("orders", Literal), deny("orders", Literal)]));
    assert!(!check(&[allow("*", Literal), deny("*", Literal)]));
    assert!(check(&[allow("*", Literal), deny("x", Prefixed)]));
    // Read does not count for Write.
    assert!(!check(&[with(
        acl(Topic, "t", Literal, "User:alice"),
        Read,
        Allow
    )]));
}

#[test]
fn bindings_are_checked_as_kafka_checks_them() {
    let raw = |t: i8, name: &'static str, p: i8, principal: &'static str, op: i8, perm: i8| {
        AclBinding::parse(&super::super::RawBinding {
            resource_type: t,
            name,
            pattern: p,
            principal,
            host: "*",
            operation: op,
            permission: perm,
        })
    };
    let ok = raw(2, "t", 3, "User:alice", 3, 3).expect("valid");
    assert_eq!((ok.operation, ok.permission), (Read, Allow));
    for bad in [
        raw(1, "t", 3, "User:a", 3, 3), // ANY type
        raw(0, "t", 3, "User:a", 3, 3), // UNKNOWN type
        raw(6, "t", 3, "User:a", 3, 3), // delegation token: not kept
        raw(2, "t", 2, "User:a", 3, 3), // MATCH pattern
        raw(2, "t", 1, "User:a", 3, 3), // ANY pattern
        raw(2, "t", 3, "User:a", 1, 3), // ANY operation
        raw(2, "t", 3, "User:a", 3, 1), // ANY permission
        raw(2, "", 3, "User:a", 3, 3),  // empty name
        raw(4, "c", 3, "User:a", 7, 3), // cluster not named kafka-cluster
        raw(2, "t", 3, "alice", 3, 3),  // principal without a type
    ] {
        assert!(bad.is_err(), "{bad:?}");
    }
    assert_eq!(Operation::from_code(14), Some(DescribeTokens));
    assert_eq!(Operation::from_code(15), None);
    assert_eq!(IdempotentWrite.code(), 12);
}
