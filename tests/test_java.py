"""The Kafka Java client (kafka-clients from Maven Central), the strictest
about protocol versions: tests/java/HelixClientCheck.java, compiled with plain
javac, run against the broker. Both the 3.9 line and the 4.x line (which
dropped old protocol versions, KIP-896) are checked."""

from __future__ import annotations

import os

import pytest

import javalibs
import kwire

SOURCE = javalibs.JAVA_DIR / "HelixClientCheck.java"
VERSIONS = os.environ.get("HELIX_TEST_KAFKA_CLIENT_VERSIONS", "3.9.1,4.1.1").split(",")


@pytest.mark.parametrize("version", VERSIONS)
def test_java_client_admin_producer_consumer(broker, topic, version):
    libs = javalibs.maven_libs("kafka-clients", version)
    cp = f"{javalibs.compiled(SOURCE, libs)}:{libs}/*"
    proc = javalibs.java(cp, "HelixClientCheck", broker.bootstrap, topic)
    out = proc.stdout.decode(errors="replace")
    err = proc.stderr.decode(errors="replace")
    assert proc.returncode == 0, f"kafka-clients {version} check failed (exit {proc.returncode}):\n{out}\n{err[-6000:]}"
    assert f"HELIX-JAVA-CHECK OK topic={topic} records=400" in out

    # The producer ran with the client's defaults: idempotence on, so every
    # stored batch carries a producer id and a sequence.
    with kwire.Conn(broker.host, broker.port) as conn:
        for part in range(4):
            batches = conn.fetch_all(topic, part, 100)
            assert sum(b.record_count for b in batches) == 100
            assert all(b.producer_id >= 0 and b.base_sequence >= 0 for b in batches), batches[0]
        # Each codec's topic holds batches stored as the Java client compressed them.
        for codec in ("gzip", "snappy", "lz4", "zstd"):
            assert f"compressed {codec} {topic}-{codec} ok" in out
            batches = conn.fetch_all(f"{topic}-{codec}", 0, 200)
            assert {b.compression for b in batches} == {kwire.COMPRESSION[codec]}, codec
            assert sum(b.record_count for b in batches) == 200
