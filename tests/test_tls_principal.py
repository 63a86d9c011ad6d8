"""A TLS client certificate's principal under ACLs (issue 34, ADR 0028).

One node with `ssl.client.auth=required` on its SSL listener and the
standard authorizer. The principal of a certificate with subject
`/O=helix-tests/OU=eng/CN=alice` is named as Kafka's default principal
builder names it: `User:` + the subject in RFC 2253 order, most specific
attribute first (`User:CN=alice,OU=eng,O=helix-tests`). An ACL for that
name lets the certificate produce to one topic and nowhere else; another
certificate from the same CA may produce nowhere.
"""

from __future__ import annotations

import os

import pytest
from confluent_kafka import KafkaError
from confluent_kafka.admin import (AclBinding, AclOperation, AclPermissionType, AdminClient,
                                   NewTopic, ResourcePatternType, ResourceType)

import harness
from certs import make_cert, server_keystore
from test_acls import produce, sasl, users_file

pytestmark = pytest.mark.skipif(
    bool(harness.external_bootstrap()) or bool(os.environ.get("HELIX_TEST_KAFKA_LIBS")),
    reason="starts a Helix node of its own with secure listeners",
)

ALICE = "User:CN=alice,OU=eng,O=helix-tests"
TIMEOUT = 30


@pytest.fixture(scope="module")
def node(tmp_path_factory):
    binary = harness.helix_binary()
    if not os.access(binary, os.X_OK):
        pytest.skip(f"{binary} missing: cargo build --release -p helix-server")
    tmp = tmp_path_factory.mktemp("tls-principal")
    certs = tmp / "certs"
    server = server_keystore(certs)
    make_cert(certs, "alice", "ca", "/O=helix-tests/OU=eng/CN=alice")
    make_cert(certs, "mallory", "ca", "/O=helix-tests/OU=eng/CN=mallory")
    users = tmp / "users.toml"
    users_file(binary, users)
    broker = harness.HelixBroker(binary, tmp / "node")
    ssl_port, sasl_port = harness.free_port(), harness.free_port()
    broker.extra_args = [
        "--listeners", f"PLAINTEXT://127.0.0.1:{broker.port},SSL://127.0.0.1:{ssl_port},"
                       f"SASL_PLAINTEXT://127.0.0.1:{sasl_port}",
        "--ssl-keystore-location", str(server),
        "--ssl-truststore-location", str(certs / "ca.pem"),
        "--ssl-client-auth", "required",
        "--sasl-users-file", str(users),
        "--authorizer", "standard",
        "--super-users", "User:admin",
    ]
    broker.start()
    try:
        yield {"broker": broker, "certs": certs, "ssl": f"127.0.0.1:{ssl_port}",
               "sasl": f"127.0.0.1:{sasl_port}"}
    finally:
        broker.stop()


def tls_config(node: dict, cert: str) -> dict:
    certs = node["certs"]
    return {"bootstrap.servers": node["ssl"], "security.protocol": "SSL",
            "ssl.ca.location": str(certs / "ca.pem"),
            "ssl.certificate.location": str(certs / f"{cert}.pem"),
            "ssl.key.location": str(certs / f"{cert}.key")}


def codes(errors: list[KafkaError | None]) -> set:
    return {e.code() if e is not None else None for e in errors}


def test_a_certificate_principal_produces_only_where_its_acl_allows(node, topic):
    admin = AdminClient(sasl(node["sasl"], "admin"))
    granted, other = f"{topic}-granted", f"{topic}-other"
    for f in admin.create_topics([NewTopic(granted, 1, 1), NewTopic(other, 1, 1)]).values():
        f.result(TIMEOUT)
    bindings = [AclBinding(ResourceType.TOPIC, granted, ResourcePatternType.LITERAL, ALICE, "*",
                           op, AclPermissionType.ALLOW)
                for op in (AclOperation.WRITE, AclOperation.DESCRIBE)]
    for f in admin.create_acls(bindings, request_timeout=TIMEOUT).values():
        f.result(TIMEOUT)

    assert codes(produce(tls_config(node, "alice"), granted, 5)) == {None}
    assert codes(produce(tls_config(node, "alice"), other, 1)) == \
        {KafkaError.TOPIC_AUTHORIZATION_FAILED}
    for t in (granted, other):
        assert codes(produce(tls_config(node, "mallory"), t, 1)) == \
            {KafkaError.TOPIC_AUTHORIZATION_FAILED}, t
