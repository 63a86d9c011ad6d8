"""ACLs (ADR 0028, slice 2): a Helix node with a SASL_PLAINTEXT listener,
the authorizer on and `admin` a super user. ACLs are managed with
confluent-kafka's AdminClient and Kafka 3.9.1's own `kafka-acls.sh`
(`kafka.admin.AclCommand`); a SCRAM user granted Write and Read on a topic
prefix and Read on a group produces and consumes there, and gets Kafka's
authorization errors elsewhere; the ACLs survive a restart and, on three
nodes, the kill of the controller's leader. Nothing here measures time:
waits only bound how long a test may hang.
"""

from __future__ import annotations

import os
import struct
import subprocess
import time
import uuid
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer
from confluent_kafka.admin import (
    AclBinding, AclBindingFilter, AclOperation, AclPermissionType, AdminClient, NewTopic,
    ResourcePatternType, ResourceType,
)

import harness
import javalibs
import kwire

pytestmark = pytest.mark.skipif(
    bool(harness.external_bootstrap()) or bool(os.environ.get("HELIX_TEST_KAFKA_LIBS")),
    reason="starts Helix nodes of its own with a SASL listener and the authorizer",
)

PASSWORDS = {"admin": "admin-secret", "alice": "alice-secret", "bob": "bob-secret"}
CALL_TIMEOUT = 30.0
ACL_COMMAND = "kafka.admin.AclCommand"
EVERYTHING = AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, None, None,
                              AclOperation.ANY, AclPermissionType.ANY)


def users_file(binary: Path, path: Path) -> None:
    entries = []
    for user, password in PASSWORDS.items():
        out = subprocess.run(
            [str(binary), "scram-credential", "--user", user, "--mechanism", "SCRAM-SHA-512"],
            input=f"{password}\n", capture_output=True, text=True, check=True,
        ).stdout
        entries.append(out)
    path.write_text("\n".join(entries))


def sasl(bootstrap: str, user: str, **extra) -> dict:
    c = {"bootstrap.servers": bootstrap, "security.protocol": "SASL_PLAINTEXT",
         "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": user,
         "sasl.password": PASSWORDS[user]}
    c.update(extra)
    return c


def binary_or_skip() -> Path:
    binary = harness.helix_binary()
    if not os.access(binary, os.X_OK):
        pytest.skip(f"{binary} missing: cargo build --release -p helix-server")
    return binary


class Node:
    """One Helix node with PLAINTEXT and SASL_PLAINTEXT listeners."""

    def __init__(self, tmp: Path):
        binary = binary_or_skip()
        users = tmp / "users.toml"
        users_file(binary, users)
        self.broker = harness.HelixBroker(binary, tmp / "node")
        self.sasl_port = harness.free_port()
        self.broker.extra_args = [
            "--listeners",
            f"PLAINTEXT://127.0.0.1:{self.broker.port},SASL_PLAINTEXT://127.0.0.1:{self.sasl_port}",
            "--sasl-users-file", str(users),
            "--authorizer", "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
            "--super-users", "User:admin;User:operator",
        ]
        self.broker.start()

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.sasl_port}"

    def admin(self, user: str = "admin") -> AdminClient:
        return AdminClient(sasl(self.bootstrap, user))


@pytest.fixture(scope="module")
def node(tmp_path_factory):
    n = Node(tmp_path_factory.mktemp("acls"))
    try:
        yield n
    finally:
        n.broker.stop()


def create_acls(admin: AdminClient, bindings: list[AclBinding]) -> None:
    for f in admin.create_acls(bindings, request_timeout=CALL_TIMEOUT).values():
        f.result(CALL_TIMEOUT)


def described(admin: AdminClient, flt: AclBindingFilter = EVERYTHING) -> set[tuple]:
    found = admin.describe_acls(flt, request_timeout=CALL_TIMEOUT).result(CALL_TIMEOUT)
    return {(b.restype, b.name, b.resource_pattern_type, b.principal, b.host, b.operation,
             b.permission_type) for b in found}


def key(b: AclBinding) -> tuple:
    return (b.restype, b.name, b.resource_pattern_type, b.principal, b.host, b.operation,
            b.permission_type)


def allow(restype, name, pattern, principal, operation) -> AclBinding:
    return AclBinding(restype, name, pattern, principal, "*", operation, AclPermissionType.ALLOW)


def create_topic(admin: AdminClient, name: str, partitions: int = 1, rf: int = 1) -> None:
    admin.create_topics([NewTopic(name, partitions, rf)])[name].result(CALL_TIMEOUT)


def grant_alice(admin: AdminClient, prefix: str, group: str) -> list[AclBinding]:
    grants = [
        allow(ResourceType.TOPIC, prefix, ResourcePatternType.PREFIXED, "User:alice",
              AclOperation.WRITE),
        allow(ResourceType.TOPIC, prefix, ResourcePatternType.PREFIXED, "User:alice",
              AclOperation.READ),
        allow(ResourceType.GROUP, group, ResourcePatternType.LITERAL, "User:alice",
              AclOperation.READ),
    ]
    create_acls(admin, grants)
    return grants


def produce(config: dict, topic: str, count: int) -> list[KafkaError | None]:
    """Produces `count` records; returns each delivery's error (None: stored)."""
    errors: list[KafkaError | None] = []
    p = Producer({**config, "message.timeout.ms": 20000})
    for i in range(count):
        p.produce(topic, value=f"v{i}".encode(), on_delivery=lambda err, _m: errors.append(err))
    assert p.flush(CALL_TIMEOUT) == 0
    return errors


def consume(config: dict, topic: str, group: str, count: int) -> tuple[list[bytes], KafkaError | None]:
    """Reads up to `count` records in `group`; stops at the first error."""
    c = Consumer({**config, "group.id": group, "auto.offset.reset": "earliest",
                  "enable.auto.commit": False})
    c.subscribe([topic])
    got: list[bytes] = []
    deadline = time.monotonic() + CALL_TIMEOUT
    try:
        while len(got) < count and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is None:
                continue
            if m.error():
                return got, m.error()
            got.append(m.value())
        if got:
            c.commit(asynchronous=False)
        return got, None
    finally:
        c.close()


def describe_acls_raw(port: int) -> tuple[int, int]:
    """DescribeAcls v1 of every binding on a plaintext connection: the
    answer's error code and its number of resources."""
    body = struct.pack(">bhbhhbb", 1, -1, 1, -1, -1, 1, 1)
    with kwire.Conn("127.0.0.1", port) as conn:
        r = conn.request(29, 1, body)
        r.i32()  # throttle
        code = r.i16()
        r.string()
        return code, r.i32()


def test_admin_client_creates_describes_and_deletes_acls(node):
    admin = node.admin()
    name = f"acl-{uuid.uuid4().hex[:8]}"
    bindings = [
        allow(ResourceType.TOPIC, name, ResourcePatternType.LITERAL, "User:bob", AclOperation.READ),
        allow(ResourceType.GROUP, name, ResourcePatternType.PREFIXED, "User:bob",
              AclOperation.DESCRIBE),
        AclBinding(ResourceType.TOPIC, name, ResourcePatternType.LITERAL, "User:*", "10.0.0.1",
                   AclOperation.WRITE, AclPermissionType.DENY),
    ]
    create_acls(admin, bindings)
    assert {key(b) for b in bindings} <= described(admin)
    # MATCH: the bindings that apply to the topic named `name`.
    match = AclBindingFilter(ResourceType.TOPIC, name, ResourcePatternType.MATCH, None, None,
                             AclOperation.ANY, AclPermissionType.ANY)
    assert described(admin, match) == {key(bindings[0]), key(bindings[2])}
    deny_only = AclBindingFilter(ResourceType.ANY, name, ResourcePatternType.ANY, None, None,
                                 AclOperation.ANY, AclPermissionType.DENY)
    deleted = admin.delete_acls([deny_only], request_timeout=CALL_TIMEOUT)[deny_only].result(
        CALL_TIMEOUT)
    assert [key(b) for b in deleted] == [key(bindings[2])]
    left = described(admin)
    assert key(bindings[2]) not in left and key(bindings[0]) in left


def test_a_user_without_alter_on_the_cluster_cannot_manage_acls(node):
    alice = node.admin("alice")
    b = allow(ResourceType.TOPIC, "x", ResourcePatternType.LITERAL, "User:alice", AclOperation.ALL)
    with pytest.raises(KafkaException) as e:
        create_acls(alice, [b])
    assert e.value.args[0].code() == KafkaError.CLUSTER_AUTHORIZATION_FAILED
    # librdkafka drops DescribeAcls' top-level error (it returns no
    # bindings): read the answer off the wire, as User:ANONYMOUS on the
    # PLAINTEXT listener, who may not Describe the cluster either.
    assert describe_acls_raw(node.broker.port) == (KafkaError.CLUSTER_AUTHORIZATION_FAILED, 0)
    assert described(alice) == set()


def test_a_scram_user_produces_and_consumes_only_where_granted(node):
    admin = node.admin()
    run = uuid.uuid4().hex[:8]
    prefix, group = f"orders-{run}", f"g-{run}"
    mine, other = f"{prefix}-eu", f"secret-{run}"
    create_topic(admin, mine)
    create_topic(admin, other)
    grant_alice(admin, prefix, group)
    alice = sasl(node.bootstrap, "alice")

    assert produce(alice, mine, 10) == [None] * 10
    got, err = consume(alice, mine, group, 10)
    assert err is None and len(got) == 10

    errors = produce(alice, other, 1)
    assert [e.code() for e in errors] == [KafkaError.TOPIC_AUTHORIZATION_FAILED]
    _, err = consume(alice, mine, f"other-{run}", 1)
    assert err is not None and err.code() == KafkaError.GROUP_AUTHORIZATION_FAILED

    # Listing topics shows only what alice may describe (Read/Write imply
    # Describe); the admin sees both.
    alice_admin = AdminClient(alice)
    listed = set(alice_admin.list_topics(timeout=CALL_TIMEOUT).topics)
    assert mine in listed and other not in listed
    assert {t for t in listed if run in t} == {mine}
    assert {mine, other} <= set(admin.list_topics(timeout=CALL_TIMEOUT).topics)

    # Creating a topic needs Create.
    fs = alice_admin.create_topics([NewTopic(f"{prefix}-new", 1, 1)])
    with pytest.raises(KafkaException) as e:
        fs[f"{prefix}-new"].result(CALL_TIMEOUT)
    assert e.value.args[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED


def test_transactions_need_write_on_their_transactional_id(node):
    admin = node.admin()
    run = uuid.uuid4().hex[:8]
    topic, tid = f"tx-{run}", f"tid-{run}"
    create_topic(admin, topic)
    create_acls(admin, [allow(ResourceType.TOPIC, topic, ResourcePatternType.LITERAL,
                              "User:alice", AclOperation.WRITE)])
    config = sasl(node.bootstrap, "alice", **{"transactional.id": tid})
    refused = Producer(config)
    with pytest.raises(KafkaException) as e:
        refused.init_transactions(CALL_TIMEOUT)
    assert e.value.args[0].code() == KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    create_acls(admin, [allow(ResourceType.TRANSACTIONAL_ID, tid, ResourcePatternType.LITERAL,
                              "User:alice", AclOperation.WRITE)])
    p = Producer(config)
    p.init_transactions(CALL_TIMEOUT)
    p.begin_transaction()
    for i in range(3):
        p.produce(topic, value=f"t{i}".encode())
    p.commit_transaction(CALL_TIMEOUT)


def test_a_brokers_add_partitions_to_txn_needs_cluster_action(node):
    """AddPartitionsToTxn v4-v5 come from brokers (KIP-890 part 1): without
    ClusterAction on the cluster the answer is the top-level
    CLUSTER_AUTHORIZATION_FAILED and no results, as Kafka answers; with it
    the coordinator answers (an id it never saw: INVALID_PRODUCER_ID_MAPPING).
    Asked as User:ANONYMOUS on the PLAINTEXT listener."""
    admin = node.admin()
    topic = f"verify-{uuid.uuid4().hex[:8]}"
    create_topic(admin, topic)
    ask = [kwire.BrokerTxn("nobody", 7, 0, True, {topic: [0]})]
    with kwire.Conn("127.0.0.1", node.broker.port) as conn:
        for version in (4, 5):
            assert kwire.add_partitions_to_txn_v4(conn, ask, version) == (
                KafkaError.CLUSTER_AUTHORIZATION_FAILED, {})
    grant = allow(ResourceType.BROKER, "kafka-cluster", ResourcePatternType.LITERAL,
                  "User:ANONYMOUS", AclOperation.CLUSTER_ACTION)
    create_acls(admin, [grant])
    try:
        deadline = time.monotonic() + CALL_TIMEOUT
        with kwire.Conn("127.0.0.1", node.broker.port) as conn:
            while True:
                got = kwire.add_partitions_to_txn_v4(conn, ask)
                if got[0] != KafkaError.CLUSTER_AUTHORIZATION_FAILED or time.monotonic() > deadline:
                    break
                time.sleep(0.1)
        assert got == (0, {"nobody": {(topic, 0): 49}})
    finally:
        flt = AclBindingFilter(ResourceType.BROKER, "kafka-cluster", ResourcePatternType.LITERAL,
                               "User:ANONYMOUS", None, AclOperation.CLUSTER_ACTION,
                               AclPermissionType.ALLOW)
        admin.delete_acls([flt], request_timeout=CALL_TIMEOUT)[flt].result(CALL_TIMEOUT)


def kafka_acls(bootstrap: str, config: Path, *args: str) -> str:
    """Runs Kafka 3.9.1's `kafka-acls.sh --bootstrap-server BOOTSTRAP
    --command-config CONFIG ARGS` and returns what it printed."""
    libs = javalibs.maven_libs("kafka_2.13", "3.9.1")
    proc = javalibs.java(f"{libs}/*", ACL_COMMAND, "--bootstrap-server", bootstrap,
                         "--command-config", str(config), *args, timeout=120)
    out = proc.stdout.decode(errors="replace")
    err = proc.stderr.decode(errors="replace")[-4000:]
    assert proc.returncode == 0, f"{args}: exit {proc.returncode}\n{out}\n{err}"
    return out


def command_config(path: Path, user: str) -> Path:
    path.write_text(
        "security.protocol=SASL_PLAINTEXT\nsasl.mechanism=SCRAM-SHA-512\n"
        "sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required "
        f'username="{user}" password="{PASSWORDS[user]}";\n')
    return path


def test_kafka_acls_sh_adds_lists_and_removes(node, tmp_path):
    config = command_config(tmp_path / "admin.properties", "admin")
    prefix = f"tool-{uuid.uuid4().hex[:8]}"
    kafka_acls(node.bootstrap, config, "--add", "--allow-principal", "User:bob",
               "--operation", "Read", "--operation", "Describe", "--topic", prefix,
               "--resource-pattern-type", "prefixed", "--group", prefix)
    out = kafka_acls(node.bootstrap, config, "--list", "--topic", prefix,
                     "--resource-pattern-type", "prefixed")
    assert f"name={prefix}, patternType=PREFIXED" in out, out
    assert "principal=User:bob, host=*, operation=READ, permissionType=ALLOW" in out, out
    assert "operation=DESCRIBE" in out, out
    admin = node.admin()
    found = described(admin)
    # The pattern type applies to every resource of the command.
    assert (ResourceType.GROUP, prefix, ResourcePatternType.PREFIXED, "User:bob", "*",
            AclOperation.READ, AclPermissionType.ALLOW) in found
    kafka_acls(node.bootstrap, config, "--remove", "--force", "--topic", prefix,
               "--resource-pattern-type", "prefixed")
    assert not {b for b in described(admin) if b[0] == ResourceType.TOPIC and b[1] == prefix}
    # A plain user is refused by the tool too.
    bob = command_config(tmp_path / "bob.properties", "bob")
    libs = javalibs.maven_libs("kafka_2.13", "3.9.1")
    proc = javalibs.java(f"{libs}/*", ACL_COMMAND, "--bootstrap-server", node.bootstrap,
                         "--command-config", str(bob), "--list", timeout=120)
    text = (proc.stdout + proc.stderr).decode(errors="replace")
    assert "ClusterAuthorizationException" in text or "not authorized" in text.lower(), text


def test_acls_survive_a_restart(tmp_path):
    n = Node(tmp_path)
    try:
        admin = n.admin()
        run = uuid.uuid4().hex[:8]
        topic = f"kept-{run}"
        create_topic(admin, topic)
        grants = grant_alice(admin, "kept-", f"g-{run}")
        n.broker.restart()
        assert {key(b) for b in grants} <= described(n.admin())
        assert produce(sasl(n.bootstrap, "alice"), topic, 3) == [None] * 3
    finally:
        n.broker.stop()


def controller_of(bootstrap_port: int) -> int:
    with kwire.Conn("127.0.0.1", bootstrap_port, timeout=5.0) as conn:
        _, controller = conn.brokers_and_controller()
        return controller


def test_acls_survive_a_controller_leader_kill_on_three_nodes(tmp_path):
    from cluster_harness import HelixCluster

    binary = binary_or_skip()
    users = tmp_path / "users.toml"
    users_file(binary, users)
    cluster = HelixCluster(tmp_path / "cluster", 3)
    sasl_ports = cluster.add_sasl_listeners(
        users, 'authorizer = "standard"\nsuper_users = "User:admin"\n')
    cluster.start()
    try:
        every = ",".join(f"127.0.0.1:{p}" for p in sasl_ports.values())
        admin = AdminClient(sasl(every, "admin"))
        topic = f"ha-{uuid.uuid4().hex[:8]}"
        create_topic(admin, topic, partitions=3, rf=3)
        grants = grant_alice(admin, "ha-", "ha-group")
        # Every node applied them: each one's own view answers.
        for n in cluster.nodes:
            one = AdminClient(sasl(f"127.0.0.1:{sasl_ports[n.id]}", "admin"))
            assert {key(b) for b in grants} <= described(one)

        leader = controller_of(cluster.node(1).kafka_port)
        assert leader in sasl_ports
        cluster.node(leader).kill9()
        rest = [n for n in cluster.nodes if n.id != leader]
        live = ",".join(f"127.0.0.1:{sasl_ports[n.id]}" for n in rest)
        # The survivors elect a new controller leader, which takes the next
        # command (until then a node forwards to the dead one).
        deadline = time.monotonic() + 60
        while not all(controller_of(n.kafka_port) not in (leader, -1) for n in rest):
            assert time.monotonic() < deadline, "no new controller leader"
            time.sleep(0.2)
        admin = AdminClient(sasl(live, "admin"))
        create_acls(admin, [allow(ResourceType.GROUP, "after-kill", ResourcePatternType.LITERAL,
                                  "User:alice", AclOperation.READ)])
        for n in rest:
            one = AdminClient(sasl(f"127.0.0.1:{sasl_ports[n.id]}", "admin"))
            assert {key(b) for b in grants} <= described(one)
        assert produce(sasl(live, "alice"), topic, 5) == [None] * 5
        cluster.node(leader).start()
        cluster.node(leader).wait_routing()
        back = AdminClient(sasl(f"127.0.0.1:{sasl_ports[leader]}", "admin"))
        deadline = time.monotonic() + 60
        while (ResourceType.GROUP, "after-kill") not in {(b[0], b[1]) for b in described(back)}:
            assert time.monotonic() < deadline, "the restarted node never applied the new ACL"
            time.sleep(0.2)
    finally:
        cluster.stop()


def test_a_broker_without_an_authorizer_answers_security_disabled(tmp_path):
    broker = harness.HelixBroker(binary_or_skip(), tmp_path / "plain")
    broker.start()
    try:
        assert describe_acls_raw(broker.port) == (KafkaError.SECURITY_DISABLED, 0)
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        b = allow(ResourceType.TOPIC, "t", ResourcePatternType.LITERAL, "User:a", AclOperation.READ)
        with pytest.raises(KafkaException) as e:
            create_acls(admin, [b])
        assert e.value.args[0].code() == KafkaError.SECURITY_DISABLED
    finally:
        broker.stop()
