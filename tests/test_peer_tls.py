"""Mutual TLS between the nodes (issue 34 item 2, ADR 0028): with
`peer_ssl_keystore_location` and `peer_ssl_truststore_location` every peer
connection is TLS both ways, and a node is accepted only with a certificate
from the cluster's CA.

- Three nodes on mutual TLS replicate a topic to every node and route
  clients.
- A node restarted with a certificate from another CA cannot join: the
  two trusted nodes refuse its connections and go on serving (a majority),
  and it holds nothing written after.

Certificates are made with the openssl CLI (tests/certs.py). Nothing here
measures time: waits only bound how long a test may hang."""

from __future__ import annotations

import os
import shutil
import time
import uuid
from pathlib import Path

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

import harness
from certs import keystore, make_ca, make_cert
from cluster_harness import HelixCluster

pytestmark = [
    pytest.mark.timeout(300),
    pytest.mark.skipif(bool(harness.external_bootstrap()) or bool(os.environ.get("HELIX_TEST_KAFKA_LIBS")),
                       reason="starts Helix nodes of its own with peer TLS"),
    pytest.mark.skipif(shutil.which("openssl") is None, reason="needs the openssl command"),
]

RECORDS = 200


def tls_cluster(tmp: Path) -> tuple[HelixCluster, Path]:
    """Three nodes on peer mTLS, and the directory of their certificates
    (also a CA the nodes do not trust, `rogue-ca`)."""
    certs = tmp / "certs"
    certs.mkdir()
    make_ca(certs, "ca")
    make_ca(certs, "rogue-ca")
    cluster = HelixCluster(tmp / "cluster", n=3)
    for node in cluster.nodes:
        make_cert(certs, f"node{node.id}", "ca", f"/CN=helix-node-{node.id}", san="IP:127.0.0.1")
        settings = (f'peer_ssl_keystore_location = "{keystore(certs, f"node{node.id}")}"\n'
                    f'peer_ssl_truststore_location = "{certs / "ca.pem"}"\n')
        cluster.prepend_config(node, settings)
    return cluster, certs


def metric(node, name: str, topic: str) -> float | None:
    status, body = harness.http_get(node.metrics_port, "/metrics")
    assert status == 200
    for line in body.splitlines():
        if line.startswith(name + "{") and f'topic="{topic}"' in line and 'partition="0"' in line:
            return float(line.split()[-1])
    return None


def await_log_end(node, topic: str, end: int) -> None:
    deadline = time.monotonic() + 60
    while (seen := metric(node, "helix_partition_log_end_offset", topic)) != end:
        assert time.monotonic() < deadline, f"node {node.id} holds {seen} of {end}\n{node.log_tail()}"
        time.sleep(0.1)


def produce(bootstrap: str, topic: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, 1, 3)])[topic].result(60)
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True})
    failed = []
    for i in range(RECORDS):
        p.produce(topic, value=f"r{i}".encode(), partition=0,
                  on_delivery=lambda err, _m: err and failed.append(err))
    assert p.flush(120) == 0 and not failed, failed


def refusals(node) -> int:
    return node.log.read_text(errors="replace").count("refused a peer connection: TLS handshake failed")


def test_three_nodes_on_mutual_tls_replicate_to_every_node(tmp_path):
    cluster, _ = tls_cluster(tmp_path)
    cluster.start()
    try:
        topic = f"mtls-{uuid.uuid4().hex[:8]}"
        produce(cluster.bootstrap, topic)
        for node in cluster.nodes:
            await_log_end(node, topic, RECORDS)
    finally:
        cluster.stop()


def test_a_node_with_an_untrusted_certificate_cannot_join(tmp_path):
    """Node 3 took part, then restarts with a certificate from a CA the
    others do not trust (a key replaced by the wrong one, or a CA rotated
    without it): both others refuse it, go on serving as a majority, and
    it gets nothing written after."""
    cluster, certs = tls_cluster(tmp_path)
    cluster.start()
    trusted, rogue = cluster.nodes[:2], cluster.node(3)
    try:
        rogue.stop()
        make_cert(certs, "rogue", "rogue-ca", "/CN=helix-node-3", san="IP:127.0.0.1")
        (certs / "node3-keystore.pem").write_text(keystore(certs, "rogue").read_text())
        before = [refusals(n) for n in trusted]
        started = time.monotonic()
        rogue.start(wait=False)
        deadline = time.monotonic() + 60
        while not all(refusals(n) > b for n, b in zip(trusted, before)):
            assert rogue.alive(), rogue.log_tail()
            assert time.monotonic() < deadline, "no refusal logged"
            time.sleep(0.1)
        topic = f"mtls-rogue-{uuid.uuid4().hex[:8]}"
        produce(",".join(n.bootstrap for n in trusted), topic)
        for n in trusted:
            await_log_end(n, topic, RECORDS)
        assert rogue.alive()
        assert metric(rogue, "helix_partition_log_end_offset", topic) is None
        # A refused node retries with backoff (to 2 s between attempts), not
        # in a tight loop: each of its 6 lanes (3 to each trusted node) was
        # refused at most 10 times plus once a second. A slower machine only
        # makes fewer attempts.
        lived = time.monotonic() - started
        refused = sum(refusals(n) - b for n, b in zip(trusted, before))
        assert refused <= 6 * (10 + lived), f"{refused} refusals in {lived:.0f} s: a tight loop"
    finally:
        cluster.stop()
