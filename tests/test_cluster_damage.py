"""Damaged replicas in a cluster (issue 18 item 3, ADR 0016): a replica whose
log is damaged inside data it had flushed sets the log aside and rejoins
empty as a learner (no vote, no candidacy) until the leader has restored
it; then it votes again and holds, byte for byte, what the other replicas
hold. Real processes, real clients."""

from __future__ import annotations

import os
import time

import pytest
from confluent_kafka import Producer

import clients
from cluster_harness import HelixCluster
from test_cluster import FAST, create_topic, metadata, wait_fully_in_sync

pytestmark = [pytest.mark.managed,
              pytest.mark.skipif(os.environ.get("HELIX_TEST_KAFKA_LIBS") is not None,
                                 reason="Helix's data directory layout and ADR 0016's policy")]


def produce(bootstrap: str, topic: str, start: int, n: int) -> None:
    p = Producer({**clients.RDKAFKA, "bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5,
                  "enable.idempotence": True, "message.timeout.ms": 60_000})
    acked = []
    for i in range(start, start + n):
        p.produce(topic, value=b"%06d" % i, partition=0, on_delivery=lambda err, msg: acked.append(err))
    assert p.flush(90) == 0
    assert acked == [None] * n, [e for e in acked if e is not None][:3]


def wait_for_line(node, text: str, timeout: float = 60.0) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        lines = [ln for ln in node.log.read_text(errors="replace").splitlines() if text in ln]
        if lines:
            return lines[-1]
        time.sleep(0.2)
    raise AssertionError(f"node {node.id} never logged {text!r}:\n{node.log_tail()}")


def test_a_damaged_follower_rejoins_as_a_learner_and_is_restored_byte_for_byte(tmp_path, topic):
    c = HelixCluster(tmp_path, 3, args=FAST).start()
    try:
        create_topic(c.node(1).bootstrap, topic, partitions=1)
        wait_fully_in_sync(c, topic)
        produce(c.bootstrap, topic, 0, 2000)
        _, parts = metadata(c.node(1).bootstrap, topic)
        leader = parts[0][0]
        victim = c.node(next(n for n in (1, 2, 3) if n != leader))
        assert victim.stop() == 0, "clean SIGTERM"
        produce(c.live_bootstrap(), topic, 2000, 500)  # the victim misses these

        logs = sorted(victim.data_dir.glob("topics/*/0/wal/*.log"))
        assert len(logs) == 1, logs
        size = logs[0].stat().st_size
        os.truncate(logs[0], size - 100)  # inside what it had flushed
        victim.start()

        aside = wait_for_line(victim, "the log is set aside")
        assert str(logs[0]) in aside and f"position={size - 100}" in aside, aside
        wait_for_line(victim, "it votes again")
        kept = list(victim.data_dir.glob("topics/*/0/wal.damaged-*/*.log"))
        assert [p.stat().st_size for p in kept] == [size - 100], "the damaged log is kept as it was"
        assert "torn or corrupt tail cut" not in victim.log.read_text(errors="replace")

        produce(c.bootstrap, topic, 2500, 500)
        wait_fully_in_sync(c, topic)
    finally:
        c.stop()
    stored = c.stored_logs()
    others = [stored[n.id][0] for n in c.nodes if n is not victim]
    assert others[0] == others[1], "the healthy replicas differ"
    assert stored[victim.id][0] == others[0], "the restored replica differs from the others"
    # 3,000 records: every acknowledged one is in the replicas' logs.
    for i in (0, 1999, 2000, 2499, 2999):
        assert b"%06d" % i in others[0], i
