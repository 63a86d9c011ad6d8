"""The Kafka Java client (kafka-clients from Maven Central), the strictest
about protocol versions: tests/java/HelixClientCheck.java, compiled with plain
javac, run against the broker. Both the 3.9 line and the 4.x line (which
dropped old protocol versions, KIP-896) are checked."""

from __future__ import annotations

import fcntl
import hashlib
import os
import subprocess
from pathlib import Path

import pytest

import kwire

JAVA_DIR = Path(__file__).resolve().parent / "java"
SOURCE = JAVA_DIR / "HelixClientCheck.java"
CACHE = Path(os.environ.get("HELIX_TEST_CACHE", Path.home() / ".cache" / "helix-tests"))
VERSIONS = os.environ.get("HELIX_TEST_KAFKA_CLIENT_VERSIONS", "3.9.1,4.1.1").split(",")


def client_classpath(version: str) -> str:
    """kafka-clients VERSION and its dependencies, fetched once into the cache;
    the program compiled once per source and version."""
    CACHE.mkdir(parents=True, exist_ok=True)
    libs = CACHE / f"kafka-clients-{version}"
    digest = hashlib.sha256(SOURCE.read_bytes()).hexdigest()[:12]
    classes = CACHE / f"classes-{version}-{digest}"
    with open(CACHE / ".lock", "w") as lock:  # pytest-xdist workers share the cache
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (libs / f"kafka-clients-{version}.jar").exists():
            subprocess.run(
                ["mvn", "-q", "-B", "-f", str(JAVA_DIR / "pom.xml"), "dependency:copy-dependencies",
                 f"-Dkafka.version={version}", f"-DoutputDirectory={libs}"],
                check=True, capture_output=True, timeout=300,
            )
        if not (classes / "HelixClientCheck.class").exists():
            tmp = classes.with_suffix(".tmp")
            tmp.mkdir(exist_ok=True)
            subprocess.run(["javac", "-cp", f"{libs}/*", "-d", str(tmp), str(SOURCE)],
                           check=True, capture_output=True, timeout=300)
            tmp.rename(classes)
    return f"{classes}:{libs}/*"


@pytest.mark.parametrize("version", VERSIONS)
def test_java_client_admin_producer_consumer(broker, topic, version):
    cp = client_classpath(version)
    proc = subprocess.run(
        ["java", "-Xmx256m", "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn", "-cp", cp,
         "HelixClientCheck", broker.bootstrap, topic],
        capture_output=True, timeout=240,
    )
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
