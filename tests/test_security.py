"""Security slice 1 (ADR 0028): one Helix node with four listeners
(PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL), real clients over each.

A CA, a server certificate, a client certificate and a client certificate
from a CA the broker does not trust are made with the ``openssl`` CLI;
SCRAM credentials with ``helix-server scram-credential`` (salted; the
password never reaches the broker's files). Nothing here measures time:
waits only bound how long a test may hang.
"""

from __future__ import annotations

import os
import socket
import ssl
import struct
import subprocess
import time
import uuid
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaError, Producer
from confluent_kafka.admin import AdminClient

import harness
import kwire
from certs import make_ca, make_cert, server_keystore

pytestmark = pytest.mark.skipif(
    bool(harness.external_bootstrap()) or bool(os.environ.get("HELIX_TEST_KAFKA_LIBS")),
    reason="starts a Helix node of its own with secure listeners",
)

USER, PASSWORD = "alice", "alice-secret"
HANDSHAKE_TIMEOUT_MS = 1000


def users_file(binary: Path, path: Path) -> None:
    entries = []
    for mechanism in ("SCRAM-SHA-512", "SCRAM-SHA-256"):
        out = subprocess.run(
            [str(binary), "scram-credential", "--user", USER, "--mechanism", mechanism],
            input=f"{PASSWORD}\n", capture_output=True, text=True, check=True,
        ).stdout
        assert PASSWORD not in out
        entries.append(out)
    path.write_text("\n".join(entries))


class SecureNode:
    """The node and where each of its listeners is."""

    def __init__(self, broker: harness.HelixBroker, ports: dict[str, int], certs: Path):
        self.broker = broker
        self.ports = ports
        self.certs = certs

    def addr(self, listener: str) -> str:
        return f"127.0.0.1:{self.ports[listener]}"

    def client_config(self, listener: str, **extra) -> dict:
        c = {"bootstrap.servers": self.addr(listener), "security.protocol": listener}
        if "SSL" in listener:
            c["ssl.ca.location"] = str(self.certs / "ca.pem")
        if listener.startswith("SASL"):
            c.update({"sasl.mechanism": "SCRAM-SHA-512", "sasl.username": USER,
                      "sasl.password": PASSWORD})
        c.update(extra)
        return c

    def metric(self, name: str) -> float:
        status, body = harness.http_get(self.broker.metrics_port, "/metrics")
        assert status == 200
        for line in body.splitlines():
            if line.startswith(name) and not line.startswith("#"):
                return float(line.split()[-1])
        raise AssertionError(f"no {name} in /metrics")


def start_node(tmp: Path, client_auth: str) -> SecureNode:
    binary = harness.helix_binary()
    if not os.access(binary, os.X_OK):
        pytest.skip(f"{binary} missing: cargo build --release -p helix-server")
    certs = tmp / "certs"
    keystore = server_keystore(certs)
    make_ca(certs, "rogue-ca")
    make_cert(certs, "client", "ca", "/O=helix-tests/CN=client-one")
    make_cert(certs, "rogue", "rogue-ca", "/CN=rogue")
    users = tmp / "users.toml"
    users_file(binary, users)
    broker = harness.HelixBroker(binary, tmp / "node")
    ports = {"PLAINTEXT": broker.port, "SSL": harness.free_port(),
             "SASL_PLAINTEXT": harness.free_port(), "SASL_SSL": harness.free_port()}
    broker.extra_args = [
        "--listeners", ",".join(f"{name}://127.0.0.1:{port}" for name, port in ports.items()),
        "--ssl-keystore-location", str(keystore),
        "--ssl-truststore-location", str(certs / "ca.pem"),
        "--ssl-client-auth", client_auth,
        "--ssl-handshake-timeout-ms", str(HANDSHAKE_TIMEOUT_MS),
        "--sasl-users-file", str(users),
        "--connection-failed-authentication-delay-ms", "50",
    ]
    broker.start()
    return SecureNode(broker, ports, certs)


@pytest.fixture(scope="module")
def node(tmp_path_factory):
    n = start_node(tmp_path_factory.mktemp("security"), "requested")
    try:
        yield n
    finally:
        n.broker.stop()


def produce_and_consume(config: dict, topic: str, count: int = 20) -> None:
    """Produces `count` records and reads them back in a consumer group."""
    producer = Producer(config)
    for i in range(count):
        producer.produce(topic, key=str(i).encode(), value=f"v{i}".encode())
    assert producer.flush(60) == 0, "records left unsent"
    consumer = Consumer({**config, "group.id": f"g-{uuid.uuid4().hex[:8]}",
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
    consumer.subscribe([topic])
    got = []
    deadline = time.monotonic() + 60
    try:
        while len(got) < count and time.monotonic() < deadline:
            msg = consumer.poll(1.0)
            if msg is None:
                continue
            assert msg.error() is None, msg.error()
            got.append(msg.value())
        consumer.commit(asynchronous=False)
    finally:
        consumer.close()
    assert sorted(got) == sorted(f"v{i}".encode() for i in range(count))


def authentication_error(config: dict) -> KafkaError | None:
    """The first error a client reports while trying to use the broker."""
    errors: list[KafkaError] = []
    admin = AdminClient({**config, "error_cb": errors.append})
    try:
        admin.list_topics(timeout=10)
    except Exception:  # noqa: BLE001 - the error callback says why
        pass
    deadline = time.monotonic() + 30
    while not errors and time.monotonic() < deadline:
        admin.poll(0.5)
    return errors[0] if errors else None


def metadata_brokers(config: dict) -> list[str]:
    md = AdminClient(config).list_topics(timeout=20)
    return [f"{b.host}:{b.port}" for b in md.brokers.values()]


@pytest.mark.parametrize("listener", ["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"])
def test_metadata_names_the_listener_the_client_connected_to(node, listener):
    assert metadata_brokers(node.client_config(listener)) == [node.addr(listener)]


def test_ssl_with_server_authentication_produces_and_consumes(node, topic):
    produce_and_consume(node.client_config("SSL"), topic)


def test_ssl_with_a_client_certificate_produces_and_consumes(node, topic):
    config = node.client_config(
        "SSL",
        **{"ssl.certificate.location": str(node.certs / "client.pem"),
           "ssl.key.location": str(node.certs / "client.key")},
    )
    produce_and_consume(config, topic)


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-512", "SCRAM-SHA-256", "PLAIN"])
def test_sasl_ssl_produces_and_consumes(node, topic, mechanism):
    produce_and_consume(node.client_config("SASL_SSL", **{"sasl.mechanism": mechanism}), topic)


def test_sasl_plaintext_produces_and_consumes(node, topic):
    produce_and_consume(node.client_config("SASL_PLAINTEXT"), topic)


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-512", "PLAIN"])
def test_a_wrong_password_fails_with_an_authentication_error(node, mechanism):
    before = node.metric("helix_sasl_authentication_failures")
    err = authentication_error(node.client_config(
        "SASL_SSL", **{"sasl.mechanism": mechanism, "sasl.password": "not-it"}))
    assert err is not None and err.code() == KafkaError._AUTHENTICATION, err
    assert node.metric("helix_sasl_authentication_failures") > before


def test_an_unknown_user_fails_like_a_wrong_password(node):
    err = authentication_error(node.client_config("SASL_PLAINTEXT", **{"sasl.username": "mallory"}))
    assert err is not None and err.code() == KafkaError._AUTHENTICATION, err


def test_requests_before_authentication_close_the_connection(node):
    with kwire.Conn("127.0.0.1", node.ports["SASL_PLAINTEXT"], timeout=10) as conn:
        assert conn.api_versions(), "ApiVersions is answered before authentication"
        conn.send(kwire.request_frame(3, 1, 99, b"\x00\x00\x00\x00"))  # Metadata v1
        assert conn.closed_by_peer(timeout=30), "Metadata before authentication closes"



def test_sasl_apis_are_advertised_only_on_sasl_listeners(node):
    sasl_keys = {17, 36}
    with kwire.Conn("127.0.0.1", node.ports["SASL_PLAINTEXT"], timeout=10) as conn:
        assert sasl_keys <= set(conn.api_versions())
    with kwire.Conn("127.0.0.1", node.ports["PLAINTEXT"], timeout=10) as conn:
        assert not sasl_keys & set(conn.api_versions())


def test_a_plaintext_client_on_a_tls_port_fails_and_the_node_serves_others(node, topic):
    err = authentication_error({"bootstrap.servers": node.addr("SSL"),
                                "security.protocol": "PLAINTEXT",
                                "socket.timeout.ms": 5000})
    assert err is not None, "a plaintext client on the TLS port must see an error"
    produce_and_consume(node.client_config("SSL"), topic, count=5)


def test_a_tls_client_on_a_plaintext_port_fails_and_the_node_serves_others(node, topic):
    err = authentication_error({"bootstrap.servers": node.addr("PLAINTEXT"),
                                "security.protocol": "SSL",
                                "ssl.ca.location": str(node.certs / "ca.pem")})
    assert err is not None, "a TLS client on the plaintext port must see an error"
    produce_and_consume(node.client_config("PLAINTEXT"), topic, count=5)


def test_a_stalled_tls_handshake_is_closed_and_counted(node):
    before = node.metric("helix_tls_handshake_failures")
    with socket.create_connection(("127.0.0.1", node.ports["SSL"]), timeout=30) as s:
        s.sendall(b"\x16\x03\x01")  # the start of a ClientHello, never finished
        assert s.recv(1024) == b"", "the broker closes the connection"
    assert node.metric("helix_tls_handshake_failures") > before
    # A whole handshake still works.
    ctx = ssl.create_default_context(cafile=str(node.certs / "ca.pem"))
    with socket.create_connection(("127.0.0.1", node.ports["SSL"]), timeout=30) as raw:
        with ctx.wrap_socket(raw, server_hostname="localhost") as tls:
            assert tls.version() is not None


def test_kcat_over_sasl_ssl_lists_metadata(node):
    cmd = ["kcat", "-L", "-J", "-b", node.addr("SASL_SSL"),
           "-X", "security.protocol=SASL_SSL", "-X", "sasl.mechanisms=SCRAM-SHA-512",
           "-X", f"sasl.username={USER}", "-X", f"sasl.password={PASSWORD}",
           "-X", f"ssl.ca.location={node.certs / 'ca.pem'}"]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert node.addr("SASL_SSL") in out.stdout


def test_required_client_auth_refuses_clients_without_a_trusted_certificate(tmp_path, topic):
    n = start_node(tmp_path, "required")
    try:
        assert authentication_error(n.client_config("SSL")) is not None, "no certificate"
        rogue = {"ssl.certificate.location": str(n.certs / "rogue.pem"),
                 "ssl.key.location": str(n.certs / "rogue.key")}
        assert authentication_error(n.client_config("SSL", **rogue)) is not None, "untrusted CA"
        trusted = {"ssl.certificate.location": str(n.certs / "client.pem"),
                   "ssl.key.location": str(n.certs / "client.key")}
        produce_and_consume(n.client_config("SSL", **trusted), topic, count=5)
    finally:
        n.broker.stop()


def test_sasl_handshake_v0_takes_a_bare_plain_token(node):
    """SaslHandshake v0 is advertised, so it is served: the token follows
    as a bare length-prefixed frame, and so does the (empty) answer."""
    with kwire.Conn("127.0.0.1", node.ports["SASL_PLAINTEXT"], timeout=10) as conn:
        mechanism = b"PLAIN"
        r = conn.request(17, 0, struct.pack(">h", len(mechanism)) + mechanism)
        assert r.i16() == 0, "SaslHandshake v0 answered without error"
        token = f"\0{USER}\0{PASSWORD}".encode()
        conn.send(struct.pack(">i", len(token)) + token)
        assert conn.recv_exact(4) == b"\0\0\0\0", "an empty token back: authenticated"
        assert conn.api_versions(), "requests are served once authenticated"
        conn.send(kwire.request_frame(3, 1, 98, b"\x00\x00\x00\x00"))
        assert conn.recv_frame(), "Metadata is answered once authenticated"


def test_a_wrong_bare_plain_token_closes_the_connection(node):
    with kwire.Conn("127.0.0.1", node.ports["SASL_PLAINTEXT"], timeout=10) as conn:
        r = conn.request(17, 0, struct.pack(">h", 5) + b"PLAIN")
        assert r.i16() == 0
        token = f"\0{USER}\0wrong".encode()
        conn.send(struct.pack(">i", len(token)) + token)
        assert conn.closed_by_peer(timeout=30)


def test_a_cluster_names_every_node_by_the_clients_listener(tmp_path, topic):
    """Three nodes, each with PLAINTEXT and SASL_PLAINTEXT listeners and
    `advertised_listeners` in its `[[nodes]]` table: a client on the SASL
    listener is told every node's SASL address, and produces and consumes
    through all of them."""
    from cluster_harness import HelixCluster

    binary = harness.helix_binary()
    if not os.access(binary, os.X_OK):
        pytest.skip(f"{binary} missing: cargo build --release -p helix-server")
    users = tmp_path / "users.toml"
    users_file(binary, users)
    cluster = HelixCluster(tmp_path / "cluster", 3)
    sasl_ports = cluster.add_sasl_listeners(users)
    cluster.start()
    try:
        config = {"bootstrap.servers": f"127.0.0.1:{sasl_ports[1]}",
                  "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "SCRAM-SHA-512",
                  "sasl.username": USER, "sasl.password": PASSWORD}
        assert sorted(metadata_brokers(config)) == sorted(
            f"127.0.0.1:{p}" for p in sasl_ports.values())
        plain = {"bootstrap.servers": cluster.node(2).bootstrap}
        assert sorted(metadata_brokers(plain)) == sorted(n.bootstrap for n in cluster.nodes)
        from confluent_kafka.admin import NewTopic
        admin = AdminClient(config)
        admin.create_topics([NewTopic(topic, 3, 3)])[topic].result(30)
        produce_and_consume(config, topic, count=30)
    finally:
        cluster.stop()
