"""SASL re-authentication (KIP-368, ADR 0028): one Helix node with a
SASL_PLAINTEXT listener and `--connections-max-reauth-ms 10000`.

The lifetime is not shorter because librdkafka re-authenticates at 90% of
it, and only once its in-flight requests are answered (it drops to one
in flight): the remaining 10% must cover a consumer's long-polling Fetch
on a loaded machine, or the session ends first and the broker closes the
connection, as Kafka's does.

librdkafka re-authenticates on its connections before the session
lifetime the broker answered ends; a client that does not is closed at
its next request after the end; a re-authentication as another user is
refused and closes the connection. Waits here are on conditions (the
clock passing a deadline, records arriving); nothing asserts a timing.
"""

from __future__ import annotations

import os
import struct
import subprocess
import threading
import time
import uuid
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer

import harness
import kwire
from test_security import SecureNode

pytestmark = pytest.mark.skipif(
    bool(harness.external_bootstrap()) or bool(os.environ.get("HELIX_TEST_KAFKA_LIBS")),
    reason="starts a Helix node of its own with a SASL listener",
)

USERS = {"alice": "alice-secret", "bob": "bob-secret"}
LIFETIME_MS = 10_000
RUN_SECONDS = 22


def users_file(binary: Path, path: Path) -> None:
    entries = []
    for user, password in USERS.items():
        entries.append(subprocess.run(
            [str(binary), "scram-credential", "--user", user, "--mechanism", "SCRAM-SHA-512"],
            input=f"{password}\n", capture_output=True, text=True, check=True,
        ).stdout)
    path.write_text("\n".join(entries))


@pytest.fixture(scope="module")
def node(tmp_path_factory):
    binary = harness.helix_binary()
    if not os.access(binary, os.X_OK):
        pytest.skip(f"{binary} missing: cargo build --release -p helix-server")
    tmp = tmp_path_factory.mktemp("reauth")
    users = tmp / "users.toml"
    users_file(binary, users)
    broker = harness.HelixBroker(binary, tmp / "node")
    ports = {"PLAINTEXT": broker.port, "SASL_PLAINTEXT": harness.free_port()}
    broker.extra_args = [
        "--listeners", ",".join(f"{name}://127.0.0.1:{port}" for name, port in ports.items()),
        "--sasl-users-file", str(users),
        "--connections-max-reauth-ms", str(LIFETIME_MS),
        "--connection-failed-authentication-delay-ms", "50",
    ]
    broker.start()
    try:
        yield SecureNode(broker, ports, tmp)
    finally:
        broker.stop()


def client_config(node: SecureNode, mechanism: str = "SCRAM-SHA-512") -> dict:
    return {"bootstrap.servers": node.addr("SASL_PLAINTEXT"), "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": mechanism, "sasl.username": "alice",
            "sasl.password": USERS["alice"]}


# ---------------------------------------------------------------- raw wire


def handshake(conn: kwire.Conn, mechanism: str = "PLAIN") -> int:
    m = mechanism.encode()
    return conn.request(17, 1, struct.pack(">h", len(m)) + m).i16()


def authenticate(conn: kwire.Conn, user: str, password: str) -> tuple[int, int]:
    """SaslAuthenticate v1 with a PLAIN token: (error code, session lifetime ms)."""
    token = f"\0{user}\0{password}".encode()
    r = conn.request(36, 1, struct.pack(">i", len(token)) + token)
    err = r.i16()
    r.string()  # error message
    r.bytes_()  # auth bytes
    return err, r.i64()


def metadata_answered(conn: kwire.Conn) -> bool:
    conn.send(kwire.request_frame(3, 1, 999, b"\x00\x00\x00\x00"))  # Metadata v1, all topics
    try:
        return bool(conn.recv_frame())
    except (ConnectionError, OSError):
        return False


def test_the_session_lifetime_is_answered_and_reauthentication_renews_it(node):
    before = node.metric("helix_sasl_reauthentications")
    with kwire.Conn("127.0.0.1", node.ports["SASL_PLAINTEXT"], timeout=30) as conn:
        assert handshake(conn) == 0
        assert authenticate(conn, "alice", USERS["alice"]) == (0, LIFETIME_MS)
        assert metadata_answered(conn)
        assert handshake(conn) == 0, "SaslHandshake again begins a re-authentication"
        assert authenticate(conn, "alice", USERS["alice"]) == (0, LIFETIME_MS)
        assert metadata_answered(conn), "served after re-authenticating"
    assert node.metric("helix_sasl_reauthentications") == before + 1


def test_a_connection_whose_session_ended_is_closed_at_its_next_request(node):
    before = node.metric("helix_sasl_expired_sessions_closed")
    with kwire.Conn("127.0.0.1", node.ports["SASL_PLAINTEXT"], timeout=30) as conn:
        assert handshake(conn) == 0
        err, lifetime_ms = authenticate(conn, "alice", USERS["alice"])
        assert (err, lifetime_ms) == (0, LIFETIME_MS)
        ended = time.monotonic() + lifetime_ms / 1000
        assert metadata_answered(conn), "served while the session lasts"
        while time.monotonic() <= ended + 0.1:  # await the clock passing the session's end
            time.sleep(0.1)
        conn.send(kwire.request_frame(3, 1, 1000, b"\x00\x00\x00\x00"))
        assert conn.closed_by_peer(timeout=30), "closed instead of answered"
    assert node.metric("helix_sasl_expired_sessions_closed") == before + 1


def test_a_reauthentication_as_another_user_is_refused_and_closes(node):
    with kwire.Conn("127.0.0.1", node.ports["SASL_PLAINTEXT"], timeout=30) as conn:
        assert handshake(conn) == 0
        assert authenticate(conn, "alice", USERS["alice"])[0] == 0
        assert handshake(conn) == 0
        err, _ = authenticate(conn, "bob", USERS["bob"])
        assert err == 58, "SASL_AUTHENTICATION_FAILED"
        assert conn.closed_by_peer(timeout=30)


def test_requests_during_a_reauthentication_close_the_connection(node):
    """As on Kafka: between the re-authenticating SaslHandshake and its
    completion only ApiVersions and SASL requests are served."""
    with kwire.Conn("127.0.0.1", node.ports["SASL_PLAINTEXT"], timeout=30) as conn:
        assert handshake(conn) == 0
        assert authenticate(conn, "alice", USERS["alice"])[0] == 0
        assert handshake(conn) == 0
        conn.send(kwire.request_frame(3, 1, 1001, b"\x00\x00\x00\x00"))
        assert conn.closed_by_peer(timeout=30)


# ---------------------------------------------------------------- real clients


def test_librdkafka_reauthenticates_while_producing_and_consuming(node, topic):
    """A producer and a consumer run for RUN_SECONDS (over two lifetimes):
    every record arrives, the connections re-authenticated, and none was
    closed for an ended session."""
    config = client_config(node, "SCRAM-SHA-512")
    reauths = node.metric("helix_sasl_reauthentications")
    expired = node.metric("helix_sasl_expired_sessions_closed")
    errors: list = []
    producer = Producer({**config, "error_cb": errors.append, "linger.ms": 5})
    consumer = Consumer({**config, "group.id": f"g-{uuid.uuid4().hex[:8]}",
                         "auto.offset.reset": "earliest", "error_cb": errors.append})
    consumer.subscribe([topic])
    got: list[bytes] = []
    sent = 0
    done = threading.Event()

    def consume() -> None:
        deadline = time.monotonic() + RUN_SECONDS + 60
        while time.monotonic() < deadline and not (done.is_set() and len(got) >= sent):
            msg = consumer.poll(0.2)
            if msg is None:
                continue
            if msg.error():
                errors.append(msg.error())
                continue
            got.append(msg.value())

    reader = threading.Thread(target=consume)
    reader.start()
    try:
        end = time.monotonic() + RUN_SECONDS
        while time.monotonic() < end:
            producer.produce(topic, value=f"v{sent}".encode())
            sent += 1
            producer.poll(0.02)  # paces the producer; serves its callbacks
        assert producer.flush(60) == 0, "records left unsent"
        done.set()
        reader.join(timeout=120)
        assert not reader.is_alive()
    finally:
        done.set()
        consumer.close()
    assert sorted(got) == sorted(f"v{i}".encode() for i in range(sent)), \
        f"{len(got)} of {sent} records arrived"
    assert not errors, errors
    # Two lifetimes passed on the producer's connection and at least one
    # on the consumer's: each re-authenticated.
    assert node.metric("helix_sasl_reauthentications") >= reauths + 3
    assert node.metric("helix_sasl_expired_sessions_closed") == expired
