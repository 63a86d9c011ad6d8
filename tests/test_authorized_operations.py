"""`authorized_operations` (KIP-430, issue 34 must-have 4, ADR 0028 slice 5):
confluent-kafka's AdminClient asks for them in describe_topics (Metadata
v8+), describe_cluster (DescribeCluster) and describe_consumer_groups
(DescribeGroups v3+). Without an authorizer every operation Kafka
supports on the resource type is answered (Kafka's
`AuthHelper.authorizedOperations`); with one, those the principal may do:
a SCRAM user with Read on a topic and a group sees {READ, DESCRIBE} (Read
implies Describe), with Describe on the cluster sees {DESCRIBE}, and a
super user sees everything. Not asked for, nothing is answered.
"""

from __future__ import annotations

import uuid

import pytest
from confluent_kafka import Consumer, TopicCollection, TopicPartition
from confluent_kafka.admin import (
    AclBinding, AclOperation, AclPermissionType, AdminClient, ResourcePatternType, ResourceType,
)

from test_acls import CALL_TIMEOUT, Node, create_acls, create_topic, pytestmark as needs_own_helix, sasl

O = AclOperation
TOPIC_OPS = {O.READ, O.WRITE, O.CREATE, O.DESCRIBE, O.DELETE, O.ALTER, O.DESCRIBE_CONFIGS,
             O.ALTER_CONFIGS}
GROUP_OPS = {O.READ, O.DESCRIBE, O.DELETE}
CLUSTER_OPS = {O.CREATE, O.CLUSTER_ACTION, O.DESCRIBE_CONFIGS, O.ALTER_CONFIGS, O.IDEMPOTENT_WRITE,
               O.ALTER, O.DESCRIBE}


def allow(restype, name, principal, op) -> AclBinding:
    return AclBinding(restype, name, ResourcePatternType.LITERAL, principal, "*", op,
                      AclPermissionType.ALLOW)


def commit_group(config: dict, topic: str, group: str) -> None:
    """Makes `group` exist (an offset commit, no members)."""
    c = Consumer({**config, "group.id": group, "enable.auto.commit": False})
    try:
        c.commit(offsets=[TopicPartition(topic, 0, 0)], asynchronous=False)
    finally:
        c.close()


def operations(admin: AdminClient, topic: str, group: str, include: bool = True):
    t = admin.describe_topics(TopicCollection([topic]), include_authorized_operations=include,
                              request_timeout=CALL_TIMEOUT)[topic].result(CALL_TIMEOUT)
    c = admin.describe_cluster(include_authorized_operations=include,
                               request_timeout=CALL_TIMEOUT).result(CALL_TIMEOUT)
    g = admin.describe_consumer_groups([group], include_authorized_operations=include,
                                       request_timeout=CALL_TIMEOUT)[group].result(CALL_TIMEOUT)
    as_set = lambda ops: None if ops is None else set(ops)  # noqa: E731
    return (as_set(t.authorized_operations), as_set(c.authorized_operations),
            as_set(g.authorized_operations))


@pytest.fixture(scope="module")
def node(tmp_path_factory):
    n = Node(tmp_path_factory.mktemp("authorized_operations"))
    try:
        yield n
    finally:
        n.broker.stop()


def test_without_an_authorizer_every_supported_operation_is_answered(broker):
    """Passes against Apache Kafka 3.9.1 too (HELIX_TEST_KAFKA_LIBS)."""
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    topic, group = f"ops-{uuid.uuid4().hex[:8]}", f"ops-group-{uuid.uuid4().hex[:8]}"
    create_topic(admin, topic)
    commit_group({"bootstrap.servers": broker.bootstrap}, topic, group)
    assert operations(admin, topic, group) == (TOPIC_OPS, CLUSTER_OPS, GROUP_OPS)
    assert operations(admin, topic, group, include=False) == (None, None, None)


@needs_own_helix
def test_a_principal_sees_the_operations_its_acls_allow(node):
    su = node.admin()
    topic, group = f"ops-{uuid.uuid4().hex[:8]}", f"ops-group-{uuid.uuid4().hex[:8]}"
    create_topic(su, topic)
    create_acls(su, [
        allow(ResourceType.TOPIC, topic, "User:alice", O.READ),
        allow(ResourceType.GROUP, group, "User:alice", O.READ),
        allow(ResourceType.BROKER, "kafka-cluster", "User:alice", O.DESCRIBE),
    ])
    commit_group(sasl(node.bootstrap, "alice"), topic, group)

    alice = node.admin("alice")
    assert operations(alice, topic, group) == ({O.READ, O.DESCRIBE}, {O.DESCRIBE},
                                               {O.READ, O.DESCRIBE})
    assert operations(su, topic, group) == (TOPIC_OPS, CLUSTER_OPS, GROUP_OPS)
