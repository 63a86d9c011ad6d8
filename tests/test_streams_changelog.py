"""Kafka Streams 3.9.1, a stateful count with exactly_once_v2 on a 3-node
Helix cluster (issues 32 and 33): the count's state store is backed by a
compacted changelog topic, which Streams creates with cleanup.policy=compact
(it stopped with INVALID_CONFIG before compaction). After the application's
state directory is deleted, a new instance restores the store from the
changelog and goes on with the right counts.

Issue 32's own Streams test: the same count while the node leading the
output's first partition is killed with SIGKILL and restarted; every key's
latest count is exact.

The program is tests/java/HelixStreamsCount.java in "count" mode."""

from __future__ import annotations

import shutil
import subprocess
import threading
import time
import uuid
from contextlib import contextmanager
from types import SimpleNamespace

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka import OFFSET_BEGINNING
from confluent_kafka.admin import ConfigResource

import clients
import harness
import javalibs
from cluster_harness import HelixCluster
from test_cluster_faults import FAST, create_topic, settled_leader, wait_in_sync

pytestmark = [pytest.mark.cluster, pytest.mark.managed,
              pytest.mark.skipif(harness.external_bootstrap() is not None,
                                 reason="starts its own Helix nodes")]

KEYS = 7
PARTITIONS = 3


class App:
    """One HelixStreamsCount process in count mode."""

    def __init__(self, cp: str, cluster: HelixCluster, source: str, output: str, app_id: str, state):
        self.lines: list[str] = []
        self.proc = subprocess.Popen(
            ["java", "-Xmx256m", "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn", "-cp", cp,
             "HelixStreamsCount", cluster.bootstrap, source, output, app_id, str(state), "600", "count"],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        threading.Thread(target=lambda: self.lines.extend(l.rstrip() for l in self.proc.stdout),
                         daemon=True).start()

    def await_running(self) -> None:
        deadline = time.monotonic() + 120
        while "state RUNNING" not in self.lines:
            assert self.proc.poll() is None and time.monotonic() < deadline, self.tail()
            time.sleep(0.1)

    def tail(self) -> str:
        return "\n".join(self.lines[-60:])

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def latest_counts(bootstrap: str, topic: str, want: dict[str, int], app: App,
                  timeout: float = 120) -> dict[str, int]:
    """The last count per key in `topic` (read_committed), read until it is
    `want` or the timeout passes."""
    c = Consumer({**clients.RDKAFKA, "bootstrap.servers": bootstrap,
                  "group.id": f"counts-{uuid.uuid4().hex[:8]}", "enable.auto.commit": False,
                  "isolation.level": "read_committed"})
    try:
        c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(PARTITIONS)])
        latest: dict[str, int] = {}
        deadline = time.monotonic() + timeout
        while latest != want and time.monotonic() < deadline:
            for m in c.consume(num_messages=1000, timeout=0.5):
                if m.error() is None:
                    latest[m.key().decode()] = int(m.value())
                elif m.error().code() != KafkaError._PARTITION_EOF:
                    raise AssertionError(f"consume error: {m.error()}")
            assert not any("HELIX-STREAMS ERROR" in l for l in app.lines), app.tail()
        return latest
    finally:
        c.close()


def cleanup_policy(bootstrap: str, topic: str) -> str:
    a = clients.admin(bootstrap)
    (fut,) = a.describe_configs([ConfigResource("TOPIC", topic)], request_timeout=30).values()
    return fut.result(timeout=30)["cleanup.policy"].value


@contextmanager
def counting(tmp_path, topic):
    """A 3-node cluster with a source and an output topic, and `produce(n)`
    that sends n records over the keys, counting them per key in
    `counts`: what every key's latest count must end as."""
    libs = javalibs.maven_libs("kafka-streams", "3.9.1")
    cp = f"{javalibs.compiled(javalibs.JAVA_DIR / 'HelixStreamsCount.java', libs)}:{libs}/*"
    cluster = HelixCluster(tmp_path, 3, args=FAST)
    run = SimpleNamespace(cluster=cluster, source=f"{topic}-in", output=f"{topic}-out",
                          counts={f"k{k}": 0 for k in range(KEYS)}, apps=[])
    try:
        cluster.start()
        for name in (run.source, run.output):
            create_topic(cluster.node(1).bootstrap, name, PARTITIONS)
            wait_in_sync(cluster, name)
        p = Producer({**clients.RDKAFKA, "bootstrap.servers": cluster.bootstrap,
                      "enable.idempotence": True, "acks": "all"})

        def produce(n: int) -> None:
            for i in range(n):
                key = f"k{i % KEYS}"
                run.counts[key] += 1
                p.produce(run.source, key=key.encode(), value=b"v")
            assert p.flush(60) == 0

        def start_app(app_id: str, state) -> App:
            app = App(cp, cluster, run.source, run.output, app_id, state)
            run.apps.append(app)
            app.await_running()
            return app

        run.produce, run.start_app = produce, start_app
        yield run
    finally:
        for app in run.apps:
            app.stop()
        cluster.stop()


def test_a_count_restores_its_store_from_the_compacted_changelog(tmp_path, topic):
    with counting(tmp_path, topic) as run:
        app_id, state = f"count-{topic}"[:60], tmp_path / "streams-state"
        run.produce(700)
        app = run.start_app(app_id, state)
        got = latest_counts(run.cluster.bootstrap, run.output, dict(run.counts), app)
        assert got == run.counts, app.tail()
        changelog = f"{app_id}-counts-changelog"
        assert cleanup_policy(run.cluster.bootstrap, changelog) == "compact"
        app.stop()

        # The store is gone: the next instance rebuilds it from the changelog.
        shutil.rmtree(state)
        run.produce(350)
        app = run.start_app(app_id, state)
        got = latest_counts(run.cluster.bootstrap, run.output, dict(run.counts), app)
        assert got == run.counts, f"counts after the restore: {got}, want {run.counts}\n{app.tail()}"


def test_an_exactly_once_count_is_exact_while_a_broker_is_killed_and_restarted(tmp_path, topic):
    """Issue 32's Streams test: a count per key with exactly_once_v2 (its
    store backed by a compacted changelog) processes a fixed input while the
    node leading the output's first partition is killed with SIGKILL, and
    restarted. Every key's latest count read_committed is exactly the number
    of its input records: a record processed twice (a transaction committed
    twice, or an aborted one read) would leave a count too high, one lost a
    count too low."""
    with counting(tmp_path, topic) as run:
        run.produce(700)
        app = run.start_app(f"count-kill-{topic}"[:60], tmp_path / "streams-state")
        victim = settled_leader(run.cluster, run.output, 0)[0]
        run.cluster.node(victim).kill9()
        run.produce(700)
        run.cluster.node(victim).start()
        run.produce(350)
        got = latest_counts(run.cluster.bootstrap, run.output, dict(run.counts), app, timeout=180)
        assert got == run.counts, f"counts {got}, want {run.counts} (node {victim} killed)\n{app.tail()}"
