"""What operators look at: /metrics scraped with Prometheus' own parser
while real clients produce, /health and /ready on a node that falls behind
and catches up, `helix-server status` against live nodes, JSON logs."""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
import uuid

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from prometheus_client.openmetrics.parser import text_string_to_metric_families

import clients
import harness
import kwire
# `cluster`: the module-scoped 3-node fixture of test_cluster (one per module).
from test_cluster import cluster, create_topic, wait_fully_in_sync  # noqa: F401

pytestmark = [pytest.mark.managed,
              pytest.mark.skipif(harness.external_bootstrap() is not None
                                 or os.environ.get("HELIX_TEST_KAFKA_LIBS") is not None,
                                 reason="needs Helix nodes the suite starts (their metrics endpoint)")]


def scrape(port: int) -> dict[tuple[str, tuple], float]:
    """Every sample of /metrics, parsed by prometheus_client's OpenMetrics
    parser (it refuses malformed exposition): {(name, labels): value}."""
    code, body = harness.http_get(port, "/metrics")
    assert code == 200, body
    samples = {}
    for family in text_string_to_metric_families(body):
        for s in family.samples:
            samples[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return samples


def value(samples, name: str, **labels) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


def total(samples, name: str, **labels) -> float:
    """Sum over every series of `name` whose labels include `labels`."""
    want = set(labels.items())
    return sum(v for (n, ls), v in samples.items() if n == name and want <= set(ls))


def produce(bootstrap: str, topic: str, n: int, size: int = 100, partitions: int | None = None) -> None:
    """`n` acknowledged records; with `partitions`, spread round robin over
    them (otherwise where the client's partitioner puts them)."""
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5,
                  "enable.idempotence": True})
    failed = []
    for i in range(n):
        where = {"partition": i % partitions} if partitions else {}
        p.produce(topic, value=(b"%08d" % i).ljust(size, b"x"), **where,
                  on_delivery=lambda err, _m: err and failed.append(err))
        if i % 1000 == 0:
            p.poll(0)
    assert p.flush(60) == 0
    assert not failed, failed[:3]


def test_per_stage_histograms_count_every_produced_record_and_batch(fresh_broker):
    port = fresh_broker.metrics_port
    code, body = harness.http_get(port, "/health")
    assert (code, body) == (200, "ok\n")
    topic = f"metrics-{uuid.uuid4().hex[:8]}"
    clients.create_topic(fresh_broker.bootstrap, topic, 1)
    before = scrape(port)
    n = 2000
    produce(fresh_broker.bootstrap, topic, n)
    after = scrape(port)

    def delta(name, **labels):
        return total(after, name, **labels) - total(before, name, **labels)

    # Every record reached the log through exactly one batcher entry.
    assert delta("helix_produce_batch_records_sum") == n
    entries = delta("helix_produce_batch_records_count")
    assert 1 <= entries <= n
    for stage in ("raft_commit", "wal_append", "ack"):
        assert delta("helix_produce_stage_seconds_count", stage=stage) == entries, stage
    # One batcher wait per produce request (one partition), one latency
    # observation per answered request.
    requests = delta("helix_requests_total", api="Produce")
    assert requests >= 1
    assert delta("helix_produce_stage_seconds_count", stage="batcher_queue_wait") == requests
    assert delta("helix_request_duration_seconds_count", api="Produce") == requests
    assert delta("helix_produce_stage_seconds_count", stage="response_write") >= requests
    assert delta("helix_produce_batch_bytes_sum") >= n * 100
    # Buckets are cumulative and end at the count.
    inf = value(after, "helix_produce_stage_seconds_bucket", stage="ack", le="+Inf")
    assert inf == value(after, "helix_produce_stage_seconds_count", stage="ack")
    # The partition's series, and no lag left once the producer is answered.
    assert value(after, "helix_partition_high_watermark", topic=topic, partition="0") == n
    assert value(after, "helix_partition_log_end_offset", topic=topic, partition="0") == n
    assert value(after, "helix_partition_leader", topic=topic, partition="0") == 1
    assert value(after, "helix_partition_size_bytes", topic=topic, partition="0") > n * 100
    assert value(after, "helix_apply_lag_entries_max") == 0
    assert value(after, "helix_replicas_behind") == 0
    assert value(after, "helix_serving") == 1
    assert value(after, "helix_process_resident_memory_bytes") > 0
    assert value(after, "helix_process_open_fds") > 0
    assert value(after, "helix_pool_threads", pool="shards") >= 1
    for pool in ("network", "shards", "syncer"):
        assert 0 <= value(after, "helix_pool_busy_ratio", pool=pool) <= 1
    assert delta("helix_network_received_bytes_total") >= n * 100
    assert value(after, "helix_connections_open") >= 0
    code, body = harness.http_get(port, "/ready")
    assert code == 200 and body.startswith("ready"), body


def test_errors_are_counted_by_api_and_kafka_error_name(fresh_broker):
    port = fresh_broker.metrics_port
    topic = f"errors-{uuid.uuid4().hex[:8]}"
    clients.create_topic(fresh_broker.bootstrap, topic, 1)
    before = scrape(port)
    batch = kwire.record_batch([kwire.Record(key=None, value=b"v")])
    with kwire.Conn("127.0.0.1", fresh_broker.port) as conn:
        # Partitions 5 and 6 do not exist, 0 does.
        answer = conn.produce(topic, {0: batch, 5: batch, 6: batch})
    assert [answer[p][0] for p in (0, 5, 6)] == [0, 3, 3], answer
    after = scrape(port)
    labels = {"api": "Produce", "error": "UNKNOWN_TOPIC_OR_PARTITION"}
    assert total(after, "helix_request_errors_total", **labels) \
        - total(before, "helix_request_errors_total", **labels) == 2


def test_json_logs_are_one_object_per_line(tmp_path):
    b = harness.HelixBroker(harness.helix_binary(), tmp_path, extra_args=["--log-format", "json"])
    b.start()
    try:
        clients.create_topic(b.bootstrap, "json-logs", 1)
    finally:
        assert b.stop() == 0
    lines = [line for line in b.log.read_text().splitlines()
             if line and not line.startswith("===== start")]
    events = [json.loads(line) for line in lines]
    assert any(e["fields"].get("message") == "helix-server is serving Kafka" for e in events)
    assert all({"timestamp", "level", "target", "fields"} <= e.keys() for e in events)


def wait_ready(node, timeout: float = 60.0) -> list[tuple[int, str]]:
    """Polls /ready from as soon as the endpoint answers until it is 200;
    returns every answer seen."""
    seen = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            code, body = harness.http_get(node.metrics_port, "/ready", timeout=2)
        except OSError:
            time.sleep(0.02)
            continue
        seen.append((code, body))
        if code == 200:
            return seen
        time.sleep(0.02)
    raise AssertionError(f"node {node.id} never ready: {seen[-3:]}\n{node.log_tail()}")


@pytest.mark.cluster
def test_ready_is_false_while_a_replica_is_behind_and_lag_returns_to_zero(cluster):
    topic = f"ops-{uuid.uuid4().hex[:8]}"
    create_topic(cluster.bootstrap, topic, partitions=3)
    for n in cluster.nodes:
        wait_ready(n)
    third = cluster.node(3)
    third.stop()
    live = cluster.live_bootstrap()
    produce(live, topic, 20_000, size=1000, partitions=3)
    third.start(wait=False)
    seen = wait_ready(third)
    # It answered before it was ready (recovering, then behind), and said why.
    assert seen[0][0] == 503, seen[:3]
    assert any("behind their leader" in body or "recovering" in body for _, body in seen[:-1]), seen[:3]
    # Ready means caught up: its log holds what the leaders acknowledged.
    wait_fully_in_sync(cluster, topic)
    mine = scrape(third.metrics_port)
    assert value(mine, "helix_replicas_behind") == 0
    for p in range(3):
        ends = [value(scrape(n.metrics_port), "helix_partition_log_end_offset",
                      topic=topic, partition=str(p)) for n in cluster.nodes]
        assert ends[0] == ends[1] == ends[2] and ends[0] > 0, (p, ends)
    assert sum(value(mine, "helix_partition_high_watermark", topic=topic, partition=str(p))
               for p in range(3)) == 20_000
    # The leaders' view of their followers: no lag, nothing in flight.
    deadline = time.monotonic() + 30
    while True:
        views = [scrape(n.metrics_port) for n in cluster.nodes]
        lag = [value(v, "helix_follower_lag_entries_max") for v in views]
        under = [value(v, "helix_partitions_under_replicated") for v in views]
        # The ISR, and with it the under-replicated count, follows the lag
        # on the leaders' next ISR tick.
        if lag == [0, 0, 0] and under == [0, 0, 0] and all(
                value(v, "helix_replication_lag_entries_max") == 0 for v in views):
            break
        assert time.monotonic() < deadline, f"lag or under-replication never returned to zero: {lag} {under}"
        time.sleep(0.2)
    assert sum(value(v, "helix_replicas", role="leader") for v in views) >= 3


def status(bootstrap: str, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(harness.helix_binary()), "status", "--bootstrap", bootstrap, *extra],
                          capture_output=True, text=True, timeout=60)


@pytest.mark.cluster
def test_status_shows_nodes_partitions_isr_and_group_lag(cluster):
    topic = f"status-{uuid.uuid4().hex[:8]}"
    group = f"g-{uuid.uuid4().hex[:6]}"
    create_topic(cluster.bootstrap, topic, partitions=3)
    produce(cluster.bootstrap, topic, 300, partitions=3)
    c = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": group,
                  "auto.offset.reset": "earliest", "enable.auto.commit": False})
    c.assign([TopicPartition(topic, 0, 0)])
    got = 0
    deadline = time.monotonic() + 30
    while got < 10 and time.monotonic() < deadline:
        m = c.poll(1.0)
        if m is not None and m.error() is None:
            got += 1
    assert got >= 10
    c.commit(offsets=[TopicPartition(topic, 0, 10)], asynchronous=False)
    c.close()
    _, parts = wait_fully_in_sync(cluster, topic)

    out = status(cluster.node(2).bootstrap, "--json")
    assert out.returncode == 0, out.stderr
    s = json.loads(out.stdout)
    assert [n["id"] for n in s["nodes"]] == [1, 2, 3]
    assert all(n["reachable"] for n in s["nodes"])
    assert s["controller"] in (1, 2, 3)
    [t] = [t for t in s["topics"] if t["name"] == topic]
    for p in t["partitions"]:
        leader, replicas, isr = parts[p["partition"]]
        assert (p["leader"], tuple(p["replicas"]), tuple(sorted(p["isr"]))) == (leader, replicas, isr)
        assert p["state"] == "ok"
    assert sum(p["end_offset"] for p in t["partitions"]) == 300
    [g] = [g for g in s["groups"] if g["id"] == group]
    [o] = [o for o in g["offsets"] if o["topic"] == topic]
    end0 = next(p["end_offset"] for p in t["partitions"] if p["partition"] == 0)
    assert end0 == 100
    assert (o["partition"], o["committed"], o["lag"]) == (0, 10, 90)
    assert g["state"] == "Empty"

    # Every series the Grafana dashboard queries is one the nodes export.
    # An error counter has series only once an error was answered: answer
    # one (a partition the topic does not have) so its panel has data.
    batch = kwire.record_batch([kwire.Record(key=None, value=b"v")])
    with kwire.Conn("127.0.0.1", cluster.node(1).kafka_port) as conn:
        assert conn.produce(topic, {99: batch})[99][0] == 3
    exported = {name for n in cluster.nodes for (name, _) in scrape(n.metrics_port)}
    dashboard = json.loads((harness.REPO / "docs" / "grafana" / "helix-dashboard.json").read_text())
    queried = {m for p in dashboard["panels"] for t in p["targets"]
               for m in re.findall(r"helix_[a-z_]+", t["expr"])}
    assert len(queried) > 15 and queried <= exported, sorted(queried - exported)

    text = status(cluster.node(1).bootstrap)
    assert text.returncode == 0, text.stderr
    assert topic in text.stdout and group in text.stdout and "controller: node" in text.stdout

    # A node down: its partitions under-replicated, the node unreachable.
    cluster.node(3).stop()
    try:
        deadline = time.monotonic() + 30
        while True:
            s = json.loads(status(cluster.node(1).bootstrap, "--json").stdout)
            [t] = [t for t in s["topics"] if t["name"] == topic]
            if all(p["state"] == "under-replicated" for p in t["partitions"]):
                break
            assert time.monotonic() < deadline, t
            time.sleep(0.5)
        assert [n["reachable"] for n in s["nodes"] if n["id"] == 3] in ([False], [])
    finally:
        cluster.node(3).start()
        wait_ready(cluster.node(3))


def test_status_fails_clearly_when_nothing_answers():
    out = status(f"127.0.0.1:{harness.free_port()}")
    assert out.returncode == 1
    assert "no node of" in out.stderr
