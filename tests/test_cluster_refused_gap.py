"""A refusal followed by leadership on the same node is not a sequence gap
(issue 29, Jepsen seed 2026; ADR 0024 "Refused, then decided"), on a real
3-node cluster.

librdkafka pipelines up to five requests per partition. In the Jepsen run a
node answered three of them NOT_LEADER_OR_FOLLOWER while it campaigned, won
a millisecond later, and decided the fourth against its log: a gap, answered
OUT_OF_ORDER_SEQUENCE_NUMBER. librdkafka took that for "renumber", bumped
its epoch and sent again, from sequence 0, a batch another leader had
already stored: a duplicate. The same steps here, by hand: the producer's
second batch goes to both followers (refused), the leader is killed, and the
third batch goes to whichever follower now leads. It must be answered
NOT_LEADER_OR_FOLLOWER (retriable: the client sends the second again, then
the third), never OUT_OF_ORDER_SEQUENCE_NUMBER; a gap the node did not
leave is still reported.
"""

from __future__ import annotations

import os
import time
import uuid

import pytest

import harness
import kwire
from cluster_harness import HelixCluster
from test_cluster_faults import FAST, create_topic, leader_of, settled_leader, wait_in_sync

pytestmark = [pytest.mark.cluster, pytest.mark.managed,
              pytest.mark.skipif(harness.external_bootstrap() is not None
                                 or os.environ.get("HELIX_TEST_KAFKA_LIBS") is not None,
                                 reason="cluster tests start their own Helix nodes")]

RECORDS = 5  # per batch


def batch(pid: int, epoch: int, seq: int) -> bytes:
    records = [kwire.Record(key=None, value=f"s{seq + i}".encode()) for i in range(RECORDS)]
    return kwire.record_batch(records, producer_id=pid, producer_epoch=epoch, base_sequence=seq)


def send(node, topic: str, data: bytes) -> int:
    with kwire.Conn("127.0.0.1", node.kafka_port) as c:
        return c.produce(topic, {0: data})[0][0]


def test_a_gap_left_by_its_own_refusal_is_answered_not_leader(tmp_path):
    topic = f"gap-{uuid.uuid4().hex[:8]}"
    cluster = HelixCluster(tmp_path, 3, args=FAST).start()
    try:
        create_topic(cluster.bootstrap, topic, partitions=1)
        wait_in_sync(cluster, topic)
        old, _ = settled_leader(cluster, topic, 0)
        with kwire.Conn("127.0.0.1", cluster.node(old).kafka_port) as c:
            pid, epoch = c.init_producer_id()
        assert send(cluster.node(old), topic, batch(pid, epoch, 0)) == kwire.ERR_NONE

        followers = [n for n in cluster.nodes if n.id != old]
        for f in followers:
            assert send(f, topic, batch(pid, epoch, RECORDS)) == kwire.ERR_NOT_LEADER_OR_FOLLOWER

        cluster.node(old).kill9()
        new = cluster.node(leader_of(cluster, topic, 0))
        # The new leader takes writes (a producer without an id probes it),
        # so what follows is its decision, not a refusal.
        deadline = time.monotonic() + 30
        while send(new, topic, kwire.record_batch([kwire.Record(key=None, value=b"probe")])) != kwire.ERR_NONE:
            assert time.monotonic() < deadline, f"node {new.id} never took writes\n{cluster.logs()}"
            time.sleep(0.1)

        third = send(new, topic, batch(pid, epoch, 2 * RECORDS))
        assert third == kwire.ERR_NOT_LEADER_OR_FOLLOWER, (
            f"the batch after the one node {new.id} refused was answered {third}: "
            f"librdkafka renumbers on OUT_OF_ORDER_SEQUENCE_NUMBER (45) and duplicates")
        # The client sends again, in order: both are stored, once.
        assert send(new, topic, batch(pid, epoch, RECORDS)) == kwire.ERR_NONE
        assert send(new, topic, batch(pid, epoch, 2 * RECORDS)) == kwire.ERR_NONE
        # A gap this node did not leave is reported.
        assert send(new, topic, batch(pid, epoch, 4 * RECORDS)) == kwire.ERR_OUT_OF_ORDER_SEQUENCE_NUMBER

        with kwire.Conn("127.0.0.1", new.kafka_port) as c:
            stored = [b for b in c.fetch_all(topic, 0, 3 * RECORDS + 1) if b.producer_id == pid]
        assert [b.base_sequence for b in stored] == [0, RECORDS, 2 * RECORDS]
    finally:
        cluster.stop()
