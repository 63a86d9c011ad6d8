"""SCRAM credentials as replicated controller state (issue 34, ADR 0028
"Slice 2 as built"): Kafka 3.9.1's own `kafka-configs.sh` (its main class,
kafka.admin.ConfigCommand, from the kafka_2.13 artifact) creates, describes
and deletes a user's SCRAM credential over a SASL listener, logged in as
the administrator of the node's users file; confluent-kafka then
authenticates as the new user. On a 3-node cluster the user created
through one node authenticates on the others, also after the controller
leader is killed with SIGKILL, and credentials survive a restart.

Nothing here measures time: waits only bound how long a test may hang.
"""

from __future__ import annotations

import os
import subprocess
import time
import uuid
from pathlib import Path

import pytest
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient, NewTopic

import harness
import javalibs
import kwire
from test_security import authentication_error, produce_and_consume

pytestmark = pytest.mark.skipif(
    bool(harness.external_bootstrap()) or bool(os.environ.get("HELIX_TEST_KAFKA_LIBS")),
    reason="starts Helix nodes of its own with SASL listeners",
)

ADMIN, ADMIN_PASSWORD = "admin", "admin-secret"
CONFIGS = "kafka.admin.ConfigCommand"


def binary() -> Path:
    b = harness.helix_binary()
    if not os.access(b, os.X_OK):
        pytest.skip(f"{b} missing: cargo build --release -p helix-server")
    return b


def admin_users_file(path: Path) -> Path:
    """The node's users file: the administrator only (SCRAM-SHA-512)."""
    out = subprocess.run(
        [str(binary()), "scram-credential", "--user", ADMIN, "--mechanism", "SCRAM-SHA-512"],
        input=f"{ADMIN_PASSWORD}\n", capture_output=True, text=True, check=True,
    ).stdout
    path.write_text(out)
    return path


def command_config(d: Path) -> Path:
    """The Java tools' client properties: SASL_PLAINTEXT as the admin."""
    p = d / "admin.properties"
    p.write_text(
        "security.protocol=SASL_PLAINTEXT\nsasl.mechanism=SCRAM-SHA-512\n"
        "sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required "
        f'username="{ADMIN}" password="{ADMIN_PASSWORD}";\n')
    return p


def kafka_configs(bootstrap: str, props: Path, *args: str) -> tuple[int, str]:
    """Runs `kafka-configs.sh --bootstrap-server BOOTSTRAP --command-config
    PROPS ARGS`: its exit code and what it printed."""
    libs = javalibs.maven_libs("kafka_2.13", "3.9.1")
    proc = javalibs.java(f"{libs}/*", CONFIGS, "--bootstrap-server", bootstrap,
                         "--command-config", str(props), *args, timeout=120)
    out = proc.stdout.decode(errors="replace") + proc.stderr.decode(errors="replace")
    return proc.returncode, out


def add_user(bootstrap: str, props: Path, user: str, password: str,
             mechanism: str = "SCRAM-SHA-256", iterations: int = 8192) -> None:
    code, out = kafka_configs(
        bootstrap, props, "--alter", "--entity-type", "users", "--entity-name", user,
        "--add-config", f"{mechanism}=[iterations={iterations},password={password}]")
    assert code == 0 and f"Completed updating config for user {user}." in out, out


def describe_user(bootstrap: str, props: Path, user: str) -> str:
    code, out = kafka_configs(bootstrap, props, "--describe", "--entity-type", "users",
                              "--entity-name", user)
    assert code == 0, out
    return out


def sasl_config(bootstrap: str, user: str, password: str,
                mechanism: str = "SCRAM-SHA-256") -> dict:
    return {"bootstrap.servers": bootstrap, "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": mechanism, "sasl.username": user, "sasl.password": password}


def authenticates(config: dict) -> bool:
    """Whether the client is served: its metadata request is answered and
    no authentication error is reported."""
    errors: list[KafkaError] = []
    admin = AdminClient({**config, "error_cb": errors.append})
    try:
        admin.list_topics(timeout=20)
    except KafkaException:
        return False
    return not any(e.code() == KafkaError._AUTHENTICATION for e in errors)


def await_authenticates(config: dict, why: str) -> None:
    """Waits until the client is served: a node applies a controller
    command when its leader tells it the command is committed, a moment
    after the node that took the request answered."""
    deadline = time.monotonic() + 60
    while not authenticates(config):
        assert time.monotonic() < deadline, why


def assert_refused(config: dict) -> None:
    err = authentication_error(config)
    assert err is not None and err.code() == KafkaError._AUTHENTICATION, err


class Node:
    """One Helix node with PLAINTEXT and SASL_PLAINTEXT listeners."""

    def __init__(self, tmp: Path):
        self.broker = harness.HelixBroker(binary(), tmp / "node")
        self.sasl_port = harness.free_port()
        self.broker.extra_args = [
            "--listeners",
            f"PLAINTEXT://127.0.0.1:{self.broker.port},SASL_PLAINTEXT://127.0.0.1:{self.sasl_port}",
            "--sasl-users-file", str(admin_users_file(tmp / "users.toml")),
            "--connection-failed-authentication-delay-ms", "50",
        ]
        self.props = command_config(tmp)

    @property
    def sasl(self) -> str:
        return f"127.0.0.1:{self.sasl_port}"


@pytest.fixture(scope="module")
def node(tmp_path_factory):
    n = Node(tmp_path_factory.mktemp("scram"))
    n.broker.start()
    try:
        yield n
    finally:
        n.broker.stop()


def test_kafka_configs_adds_a_scram_user_who_then_produces_and_consumes(node, topic):
    add_user(node.sasl, node.props, "alice", "alice-secret")
    out = describe_user(node.sasl, node.props, "alice")
    assert "SCRAM credential configs for user-principal 'alice' are SCRAM-SHA-256=iterations=8192" in out, out
    alice = sasl_config(node.sasl, "alice", "alice-secret")
    admin = AdminClient(alice)  # kept alive until the topic is made
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)
    produce_and_consume(alice, topic)
    assert_refused(sasl_config(node.sasl, "alice", "wrong-secret"))
    # The other mechanism was not set.
    assert_refused(sasl_config(node.sasl, "alice", "alice-secret", "SCRAM-SHA-512"))


def test_a_credential_survives_a_restart_and_delete_config_removes_it(node):
    add_user(node.sasl, node.props, "bob", "bob-secret", "SCRAM-SHA-512", 4096)
    node.broker.restart()
    bob = sasl_config(node.sasl, "bob", "bob-secret", "SCRAM-SHA-512")
    assert authenticates(bob)
    code, out = kafka_configs(node.sasl, node.props, "--alter", "--entity-type", "users",
                              "--entity-name", "bob", "--delete-config", "SCRAM-SHA-512")
    assert code == 0 and "Completed updating config for user bob." in out, out
    assert_refused(bob)
    # As Kafka: a user without credentials (RESOURCE_NOT_FOUND) is left
    # out of the tool's answer.
    out = describe_user(node.sasl, node.props, "bob")
    assert "user-principal 'bob'" not in out, out


def test_the_users_file_admin_still_logs_in_and_kafka_refuses_are_kept(node):
    assert authenticates(sasl_config(node.sasl, ADMIN, ADMIN_PASSWORD, "SCRAM-SHA-512"))
    # Deleting a credential that does not exist: RESOURCE_NOT_FOUND.
    code, out = kafka_configs(node.sasl, node.props, "--alter", "--entity-type", "users",
                              "--entity-name", "nobody", "--delete-config", "SCRAM-SHA-256")
    assert code != 0 and "ResourceNotFoundException" in out, out
    # Too few iterations: the tool itself refuses (the broker's refusal,
    # UNACCEPTABLE_CREDENTIAL "Too few iterations", is a unit test).
    code, out = kafka_configs(
        node.sasl, node.props, "--alter", "--entity-type", "users", "--entity-name", "carol",
        "--add-config", "SCRAM-SHA-256=[iterations=1000,password=x]")
    assert code != 0 and "less than the minimum 4096" in out, out
    # Too many: UNACCEPTABLE_CREDENTIAL from the broker.
    code, out = kafka_configs(
        node.sasl, node.props, "--alter", "--entity-type", "users", "--entity-name", "carol",
        "--add-config", "SCRAM-SHA-256=[iterations=20000,password=x]")
    assert code != 0 and "UnacceptableCredentialException" in out, out
    assert "Too many iterations" in out, out


def test_no_password_reaches_the_log_or_the_data_directory(node):
    secret = f"pw-{uuid.uuid4().hex}"
    add_user(node.sasl, node.props, "dave", secret)
    assert authenticates(sasl_config(node.sasl, "dave", secret))
    for path in [node.broker.log, *node.broker.workdir.rglob("*")]:
        if path and Path(path).is_file():
            assert secret.encode() not in Path(path).read_bytes(), path


def controller_of(bootstrap: str) -> int:
    host, port = bootstrap.rsplit(":", 1)
    with kwire.Conn(host, int(port), timeout=5.0) as conn:
        return conn.brokers_and_controller()[1]


def test_a_user_created_on_one_node_authenticates_on_the_others_after_the_controller_dies(tmp_path, topic):
    """Three nodes with SASL_PLAINTEXT listeners: a user created through
    one node authenticates on every node; after the controller leader is
    killed (SIGKILL) the user still authenticates on the survivors, a new
    user can be created there, and the killed node, restarted, knows both."""
    from cluster_harness import HelixCluster

    users = admin_users_file(tmp_path / "users.toml")
    props = command_config(tmp_path)
    cluster = HelixCluster(tmp_path / "cluster", 3)
    sasl_ports = cluster.add_sasl_listeners(users, "connection_failed_authentication_delay_ms = 50\n")
    sasl = {i: f"127.0.0.1:{p}" for i, p in sasl_ports.items()}
    try:
        cluster.start()  # inside: a node that fails to start stops the others
        for n in cluster.nodes:
            n.wait_routing()
        leader = controller_of(cluster.node(1).bootstrap)
        assert leader in sasl
        via = next(i for i in sasl if i != leader)  # forwarded to the controller
        add_user(sasl[via], props, "alice", "alice-secret")
        assert authenticates(sasl_config(sasl[via], "alice", "alice-secret"))
        for i in sasl:
            await_authenticates(sasl_config(sasl[i], "alice", "alice-secret"), f"node {i}")
        admin = AdminClient(sasl_config(sasl[via], "alice", "alice-secret"))
        admin.create_topics([NewTopic(topic, 1, 3)])[topic].result(30)
        cluster.node(leader).kill9()
        survivors = [i for i in sasl if i != leader]
        for i in survivors:
            assert authenticates(sasl_config(sasl[i], "alice", "alice-secret")), i
            assert_refused(sasl_config(sasl[i], "alice", "wrong"))
        # The controller moved: writes go on through the new leader.
        deadline = time.monotonic() + 60
        while controller_of(cluster.node(survivors[0]).bootstrap) in (leader, -1):
            assert time.monotonic() < deadline, "no new controller"
            time.sleep(0.2)
        add_user(sasl[survivors[1]], props, "erin", "erin-secret", "SCRAM-SHA-512", 4096)
        produce_and_consume(sasl_config(sasl[survivors[0]], "alice", "alice-secret"), topic)
        cluster.node(leader).start()
        cluster.node(leader).wait_routing()
        # The restarted node catches up on the controller log it missed.
        erin = sasl_config(sasl[leader], "erin", "erin-secret", "SCRAM-SHA-512")
        await_authenticates(erin, cluster.node(leader).log_tail())
        assert authenticates(sasl_config(sasl[leader], "alice", "alice-secret"))
    finally:
        cluster.stop()
