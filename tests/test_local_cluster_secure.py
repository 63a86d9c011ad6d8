"""`scripts/local-cluster.sh start --nodes 3 --secure` (issue 34 item 5):
one command starts a 3-node cluster whose client listener is SASL_SSL with
SCRAM-SHA-512 and a CA made for it, and writes the files clients use.

The property files are used exactly as the README tells a user to: kcat
with `-F client.properties`, confluent-kafka with the same file's
properties, and Kafka 3.9.1's own `kafka-topics.sh` (TopicCommand) with
`--command-config java-client.properties`. A client without SASL or
without TLS is refused; the admin password is in no node's log; ACLs are
enforced and `admin` manages them with kafka-acls.sh."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import uuid
from pathlib import Path

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

import harness
import javalibs

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "scripts" / "local-cluster.sh"

pytestmark = [
    pytest.mark.timeout(600),
    pytest.mark.skipif(os.environ.get("HELIX_TEST_KAFKA_LIBS") is not None,
                       reason="starts a Helix cluster with the repository's script"),
    pytest.mark.skipif(shutil.which("openssl") is None, reason="needs the openssl command"),
]


def free_base() -> int:
    """A base port P with P..P+2, P+100.. and P+200.. free (the script's layout)."""
    for _ in range(200):
        base = harness.free_port()
        ports = [base + off + i for off in (0, 100, 200) for i in range(3)]
        try:
            socks = []
            for p in ports:
                s = socket.socket()
                socks.append(s)
                s.bind(("127.0.0.1", p))
        except OSError:
            continue
        finally:
            for s in socks:
                s.close()
        return base
    raise RuntimeError("no free port block")


def properties(path: Path) -> dict[str, str]:
    out = {}
    for line in path.read_text().splitlines():
        if line and not line.startswith("#"):
            key, value = line.split("=", 1)
            out[key] = value
    return out


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    binary = harness.helix_binary()
    if not os.access(binary, os.X_OK):
        pytest.skip(f"{binary} missing: cargo build --release -p helix-server")
    data = tmp_path_factory.mktemp("secure-cluster")
    base = free_base()
    env = dict(os.environ, HELIX_SERVER_BIN=str(binary))
    args = ["--data-dir", str(data)]
    started = subprocess.run(["bash", str(SCRIPT), "start", "--nodes", "3", "--base-port", str(base),
                              "--secure", *args], env=env, capture_output=True, text=True, timeout=180)
    try:
        assert started.returncode == 0, started.stdout + started.stderr
        yield data, base, started.stdout
    finally:
        subprocess.run(["bash", str(SCRIPT), "stop", *args], env=env, capture_output=True, timeout=120)


def test_the_script_writes_client_files_and_keeps_keys_private(cluster):
    data, base, stdout = cluster
    secure = data / "secure"
    conf = properties(secure / "client.properties")
    assert conf["security.protocol"] == "SASL_SSL"
    assert conf["sasl.mechanism"] == "SCRAM-SHA-512"
    assert conf["bootstrap.servers"] == ",".join(f"127.0.0.1:{base + i}" for i in range(3))
    assert Path(conf["ssl.ca.location"]).read_text().startswith("-----BEGIN CERTIFICATE-----")
    java = properties(secure / "java-client.properties")
    assert java["ssl.truststore.location"] == conf["ssl.ca.location"]
    assert conf["sasl.password"] in java["sasl.jaas.config"]
    for private in ["ca.key", "users.toml", "client.properties", "java-client.properties",
                    *(f"node{i}-keystore.pem" for i in (1, 2, 3))]:
        mode = (secure / private).stat().st_mode & 0o777
        assert mode & 0o077 == 0, f"{private} is readable by others: {oct(mode)}"
    password = conf["sasl.password"]
    assert password not in (secure / "users.toml").read_text()
    assert password not in stdout
    for i in (1, 2, 3):
        assert password not in (data / f"node{i}.log").read_text()
    assert "kcat -F" in stdout


def test_kcat_produces_and_consumes_with_client_properties(cluster):
    data, _, _ = cluster
    conf = str(data / "secure" / "client.properties")
    topic = f"secure-kcat-{uuid.uuid4().hex[:8]}"
    lines = [f"line-{i}" for i in range(50)]
    produced = subprocess.run(["kcat", "-F", conf, "-P", "-t", topic, "-p", "0"],
                              input="\n".join(lines) + "\n", capture_output=True, text=True, timeout=120)
    assert produced.returncode == 0, produced.stderr
    consumed = subprocess.run(["kcat", "-F", conf, "-C", "-t", topic, "-o", "beginning", "-e", "-q"],
                              capture_output=True, text=True, timeout=120)
    assert consumed.returncode == 0, consumed.stderr
    assert consumed.stdout.split() == lines


def test_confluent_kafka_uses_the_same_properties(cluster):
    data, _, _ = cluster
    conf = properties(data / "secure" / "client.properties")
    topic = f"secure-ck-{uuid.uuid4().hex[:8]}"
    producer = Producer({**conf, "acks": "all"})
    for i in range(100):
        producer.produce(topic, key=str(i).encode(), value=f"v{i}".encode(), partition=0)
    assert producer.flush(60) == 0
    consumer = Consumer({**conf, "group.id": f"g-{topic}", "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
    seen = []
    try:
        while len(seen) < 100:
            m = consumer.poll(30)
            assert m is not None, f"only {len(seen)} of 100 records within 30 s"
            assert m.error() is None, m.error()
            seen.append(m.value().decode())
    finally:
        consumer.close()
    assert seen == [f"v{i}" for i in range(100)]


def test_clients_without_sasl_or_tls_are_refused(cluster):
    data, base, _ = cluster
    conf = properties(data / "secure" / "client.properties")
    for protocol in ("PLAINTEXT", "SSL"):
        bad = {k: v for k, v in conf.items() if not k.startswith("sasl.")}
        bad["security.protocol"] = protocol
        if protocol == "PLAINTEXT":
            bad.pop("ssl.ca.location")
        admin = AdminClient(bad)
        with pytest.raises(KafkaException):
            admin.list_topics(timeout=5)
    wrong = {**conf, "sasl.password": "not-the-password"}
    with pytest.raises(KafkaException):
        AdminClient(wrong).list_topics(timeout=10)
    # The cluster still serves the right user.
    assert AdminClient(conf).list_topics(timeout=30).brokers.keys() == {1, 2, 3}


def test_kafka_tools_use_java_client_properties(cluster):
    data, base, _ = cluster
    conf = str(data / "secure" / "java-client.properties")
    libs = javalibs.maven_libs("kafka-tools", "3.9.1")
    topic = f"secure-java-{uuid.uuid4().hex[:8]}"
    created = javalibs.java(f"{libs}/*", "org.apache.kafka.tools.TopicCommand",
                            "--bootstrap-server", f"127.0.0.1:{base}", "--command-config", conf,
                            "--create", "--topic", topic, "--partitions", "3", "--replication-factor", "3")
    assert created.returncode == 0, created.stdout.decode() + created.stderr.decode()
    listed = javalibs.java(f"{libs}/*", "org.apache.kafka.tools.TopicCommand",
                           "--bootstrap-server", f"127.0.0.1:{base}", "--command-config", conf, "--list")
    assert listed.returncode == 0, listed.stderr.decode()
    assert topic in listed.stdout.decode().split()


def test_acls_are_enforced_and_admin_manages_them(cluster):
    """The cluster runs the authorizer with `admin` as super user: Kafka's
    kafka-acls.sh adds and lists a binding (a broker without an authorizer
    answers SECURITY_DISABLED to it)."""
    data, base, _ = cluster
    conf = str(data / "secure" / "java-client.properties")
    libs = javalibs.maven_libs("kafka_2.13", "3.9.1")
    common = ["--bootstrap-server", f"127.0.0.1:{base}", "--command-config", conf]
    added = javalibs.java(f"{libs}/*", "kafka.admin.AclCommand", *common, "--add",
                          "--allow-principal", "User:bob", "--operation", "Read", "--topic", "bobs-topic")
    assert added.returncode == 0, added.stdout.decode() + added.stderr.decode()
    listed = javalibs.java(f"{libs}/*", "kafka.admin.AclCommand", *common, "--list", "--topic", "bobs-topic")
    assert listed.returncode == 0, listed.stderr.decode()
    assert "User:bob" in listed.stdout.decode() and "READ" in listed.stdout.decode()
