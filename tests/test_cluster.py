"""A 3-node Helix cluster (issue 17) driven by unmodified clients: kcat,
confluent-kafka, the Java client and Kafka's own kafka-topics tool. Topic
of 6 partitions, replication factor 3; Metadata agrees on every node;
produce and consume through any node; a consumer group rebalances and
resumes from its commits."""

from __future__ import annotations

import json
import os
import subprocess
import time
import uuid

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import NewTopic

import clients
import javalibs
import harness
from cluster_harness import HelixCluster

pytestmark = [pytest.mark.cluster, pytest.mark.managed,
              pytest.mark.skipif(harness.external_bootstrap() is not None
                                 or os.environ.get("HELIX_TEST_KAFKA_LIBS") is not None,
                                 reason="cluster tests start their own Helix nodes")]

PARTITIONS = 6
# Faster than the defaults so the tests see changes sooner; the behaviour is the same.
FAST = ["--replica-lag-time-max-ms", "3000", "--leader-imbalance-check-interval-ms", "2000",
        "--group-initial-rebalance-delay-ms", "0"]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    c = HelixCluster(tmp_path_factory.mktemp("cluster3"), 3, args=FAST).start()
    try:
        yield c
    finally:
        c.stop()


def create_topic(bootstrap: str, name: str, partitions: int = PARTITIONS, rf: int = 3) -> None:
    a = clients.admin(bootstrap)
    a.create_topics([NewTopic(name, num_partitions=partitions, replication_factor=rf)],
                    operation_timeout=30)[name].result(timeout=30)
    clients.wait_for_partitions(bootstrap, name, partitions)


def metadata(bootstrap: str, topic: str):
    """(brokers, {partition: (leader, replicas, isr)}) as one node answers."""
    md = clients.admin(bootstrap).list_topics(topic=topic, timeout=10)
    t = md.topics[topic]
    assert t.error is None, t.error
    parts = {p: (m.leader, tuple(m.replicas), tuple(sorted(m.isrs))) for p, m in t.partitions.items()}
    return sorted(md.brokers), parts


def wait_fully_in_sync(cluster: HelixCluster, topic: str, timeout: float = 30.0,
                      preferred: bool = False):
    """Metadata every node agrees on, with a full ISR (and, with `preferred`,
    every leader its preferred replica: the settled state leader balancing
    reaches, so leaders no longer move)."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        views = [metadata(n.bootstrap, topic) for n in cluster.nodes if n.alive()]
        last = views
        if all(v == views[0] for v in views) and all(
            leader >= 0 and len(isr) == 3 and (not preferred or leader == replicas[0])
            for leader, replicas, isr in views[0][1].values()
        ):
            return views[0]
        time.sleep(0.3)
    raise AssertionError(f"metadata never agreed with a full ISR: {last}\n{cluster.logs()}")


def test_metadata_from_every_node_agrees(cluster, topic):
    create_topic(cluster.node(1).bootstrap, topic)
    brokers, parts = wait_fully_in_sync(cluster, topic)
    assert brokers == [1, 2, 3]
    assert sorted(parts) == list(range(PARTITIONS))
    for p, (leader, replicas, isr) in parts.items():
        assert sorted(replicas) == [1, 2, 3], (p, replicas)
        assert isr == (1, 2, 3), (p, isr)
        assert leader in replicas
    # Preferred leaders (first replicas) are spread evenly: two per node.
    preferred = [replicas[0] for _, replicas, _ in parts.values()]
    assert sorted(preferred.count(n) for n in (1, 2, 3)) == [2, 2, 2], preferred
    # __consumer_offsets is listed as Kafka's internal topic.
    md = clients.admin(cluster.node(2).bootstrap).list_topics(timeout=10)
    assert "__consumer_offsets" in md.topics


def test_produce_and_consume_through_any_node(cluster, topic):
    create_topic(cluster.node(1).bootstrap, topic)
    sent = {}
    for i, node in enumerate(cluster.nodes):
        p = Producer({**clients.RDKAFKA, "bootstrap.servers": node.bootstrap, "acks": "all",
                      "enable.idempotence": True})
        for k in range(600):
            value = b"n%d-%d" % (node.id, k)
            p.produce(topic, key=b"%d" % k, value=value)
            sent[value] = k
        assert p.flush(60) == 0
    for node in cluster.nodes:
        c = Consumer({**clients.RDKAFKA, "bootstrap.servers": node.bootstrap,
                      "group.id": f"read-{uuid.uuid4().hex[:6]}", "auto.offset.reset": "earliest",
                      "enable.auto.commit": False})
        c.subscribe([topic])
        got = []
        deadline = time.monotonic() + 60
        while len(got) < len(sent) and time.monotonic() < deadline:
            for m in c.consume(num_messages=1000, timeout=1.0):
                if m.error() is None:
                    got.append(m.value())
        c.close()
        assert sorted(got) == sorted(sent), f"read through node {node.id}: {len(got)} of {len(sent)}"


def kcat(bootstrap: str, *args: str, input: bytes | None = None) -> subprocess.CompletedProcess:
    cmd = ["kcat", "-b", bootstrap, *args]
    proc = subprocess.run(cmd, input=input, capture_output=True, timeout=120)
    assert proc.returncode == 0, f"{' '.join(cmd)}: {proc.stderr.decode(errors='replace')}"
    return proc


def test_kcat_lists_three_brokers_produces_and_consumes(cluster, topic):
    create_topic(cluster.node(1).bootstrap, topic)
    wait_fully_in_sync(cluster, topic)
    md = json.loads(kcat(cluster.node(2).bootstrap, "-L", "-J", "-t", topic).stdout)
    assert sorted(b["id"] for b in md["brokers"]) == [1, 2, 3]
    (t,) = [t for t in md["topics"] if t["topic"] == topic]
    for p in t["partitions"]:
        assert len(p["replicas"]) == 3 and len(p["isrs"]) == 3, p
    lines = b"".join(b"k%d\tv%d\n" % (i, i) for i in range(3000))
    kcat(cluster.node(3).bootstrap, "-P", "-t", topic, "-K", "\t", "-X", "acks=all", input=lines)
    out = kcat(cluster.node(1).bootstrap, "-C", "-t", topic, "-e", "-o", "beginning", "-f", "%k\t%s\n").stdout
    assert sorted(out.splitlines()) == sorted(lines.splitlines())


def test_java_client_against_the_cluster(cluster, topic):
    libs = javalibs.maven_libs("kafka-clients", "3.9.1")
    cp = f"{javalibs.compiled(javalibs.JAVA_DIR / 'HelixClientCheck.java', libs)}:{libs}/*"
    proc = javalibs.java(cp, "HelixClientCheck", cluster.bootstrap, topic)
    out = proc.stdout.decode(errors="replace")
    assert proc.returncode == 0, f"{out}\n{proc.stderr.decode(errors='replace')[-6000:]}\n{cluster.logs()}"
    assert f"HELIX-JAVA-CHECK OK topic={topic} records=400" in out


def test_kafka_topics_describe_shows_leaders_and_isr(cluster, topic):
    create_topic(cluster.node(1).bootstrap, topic)
    _, parts = wait_fully_in_sync(cluster, topic, preferred=True)
    libs = javalibs.maven_libs("kafka-tools", "3.9.1")
    proc = javalibs.java(f"{libs}/*", "org.apache.kafka.tools.TopicCommand",
                         "--bootstrap-server", cluster.node(3).bootstrap, "--describe", "--topic", topic)
    out = proc.stdout.decode(errors="replace")
    assert proc.returncode == 0, out + proc.stderr.decode(errors="replace")
    assert "ReplicationFactor: 3" in out, out
    rows = [line for line in out.splitlines() if "Partition:" in line]
    assert len(rows) == PARTITIONS, out
    for line in rows:
        fields = dict(zip(line.split()[::2], line.split()[1::2]))
        p = int(fields["Partition:"])
        leader, replicas, isr = parts[p]
        assert int(fields["Leader:"]) == leader, line
        assert [int(x) for x in fields["Replicas:"].split(",")] == list(replicas), line
        assert sorted(int(x) for x in fields["Isr:"].split(",")) == list(isr), line


def test_consumer_group_rebalances_and_resumes_from_commits(cluster, topic):
    create_topic(cluster.node(1).bootstrap, topic)
    group = f"g-{uuid.uuid4().hex[:8]}"
    p = Producer({**clients.RDKAFKA, "bootstrap.servers": cluster.bootstrap, "acks": "all"})
    for i in range(1200):
        p.produce(topic, value=b"%d" % i, partition=i % PARTITIONS)
    assert p.flush(60) == 0

    def member(bootstrap: str) -> Consumer:
        c = Consumer({**clients.RDKAFKA, "bootstrap.servers": bootstrap, "group.id": group,
                      "auto.offset.reset": "earliest", "enable.auto.commit": False,
                      "session.timeout.ms": 10000, "heartbeat.interval.ms": 500})
        c.subscribe([topic])
        return c

    a, b = member(cluster.node(1).bootstrap), member(cluster.node(3).bootstrap)
    seen: list[bytes] = []
    deadline = time.monotonic() + 60
    while len(seen) < 600 and time.monotonic() < deadline:
        for c in (a, b):
            for m in c.consume(num_messages=50, timeout=0.2):
                if m.error() is None:
                    seen.append(m.value())
                    c.commit(message=m, asynchronous=False)
    assert len(seen) >= 600, f"the group read {len(seen)} records\n{cluster.logs()}"
    both = [len(c.assignment()) for c in (a, b)]
    assert sorted(both) == [3, 3], f"6 partitions split between two members: {both}"
    a.close()
    b.close()
    # A new member resumes exactly after what was committed.
    c = member(cluster.node(2).bootstrap)
    rest: list[bytes] = []
    deadline = time.monotonic() + 60
    while len(seen) + len(rest) < 1200 and time.monotonic() < deadline:
        for m in c.consume(num_messages=500, timeout=0.5):
            if m.error() is None:
                rest.append(m.value())
    c.close()
    assert sorted(seen + rest, key=int) == [b"%d" % i for i in range(1200)], \
        f"read {len(seen)} then {len(rest)}: duplicates or gaps"


def test_min_insync_replicas_up_to_the_majority(cluster, topic):
    """Helix acknowledges acks=all writes once a majority of the replicas
    has them (ADR 0014): min.insync.replicas up to that majority is taken
    and shown; a larger value, which Raft would not honour, is refused."""
    from confluent_kafka import KafkaError, KafkaException
    from confluent_kafka.admin import ConfigResource
    bootstrap = cluster.node(2).bootstrap
    a = clients.admin(bootstrap)

    def describe(name):
        (fut,) = a.describe_configs([ConfigResource("TOPIC", name)], request_timeout=30).values()
        return fut.result(timeout=30)["min.insync.replicas"]

    create_topic(bootstrap, topic, 1)
    entry = describe(topic)
    assert (entry.value, entry.source) == ("2", 5), (entry.value, entry.source)  # default: 2 of 3

    set_two = topic + "-two"
    a.create_topics([NewTopic(set_two, 1, 3, config={"min.insync.replicas": "2"})],
                    operation_timeout=30)[set_two].result(timeout=30)
    entry = describe(set_two)
    assert (entry.value, entry.source) == ("2", 1), (entry.value, entry.source)  # DYNAMIC_TOPIC_CONFIG

    too_many = topic + "-three"
    fut = a.create_topics([NewTopic(too_many, 1, 3, config={"min.insync.replicas": "3"})],
                          operation_timeout=30)[too_many]
    with pytest.raises(KafkaException) as exc:
        fut.result(timeout=30)
    assert exc.value.args[0].code() == KafkaError.INVALID_CONFIG, exc.value
    assert "majority" in exc.value.args[0].str(), exc.value
    assert too_many not in a.list_topics(timeout=10).topics
