"""Transactions on a real 3-node cluster (issue 32, ADR 0026 "The cluster
step as built"): the transaction coordinator of a transactional id is the
leader of its `__transaction_state` partition, on one node; the
transaction's partitions are led by every node. Markers reach partitions
led elsewhere through the peer transport, and a partition leader asks the
coordinator on another node whether a transactional batch's partition is in
the transaction before it appends it (KIP-890 part 1).

Each test kills -9 one node at a chosen point: the coordinator with a
transaction open, the coordinator right after a commit was answered (its
markers may still be on their way), and the leader of a data partition
before the commit. Every committed record must then be read exactly once by
read_committed, no aborted or dangling record ever, and the last stable
offset must move again (the next transaction's records are read)."""

from __future__ import annotations

import os

import pytest
from confluent_kafka import KafkaException, Producer

import clients
import harness
import kwire
from cluster_harness import HelixCluster
from test_cluster_faults import FAST, create_topic, settled_leader, wait_in_sync
from test_transactions import CALL_TIMEOUT, read_all

pytestmark = [pytest.mark.cluster, pytest.mark.managed,
              pytest.mark.skipif(harness.external_bootstrap() is not None
                                 or os.environ.get("HELIX_TEST_KAFKA_LIBS") is not None,
                                 reason="cluster tests start their own Helix nodes")]

PARTITIONS = 6
PER_PARTITION = 5


class Reads:
    """read_all's view of a cluster (it needs only `bootstrap`)."""

    def __init__(self, cluster: HelixCluster):
        self.cluster = cluster

    @property
    def bootstrap(self) -> str:
        return self.cluster.live_bootstrap()


@pytest.fixture
def cluster3(tmp_path):
    c = HelixCluster(tmp_path, 3, args=FAST).start()
    try:
        yield c
    finally:
        c.stop()


def transactional(cluster: HelixCluster, tid: str) -> Producer:
    p = Producer({**clients.RDKAFKA, "bootstrap.servers": cluster.bootstrap,
                  "transactional.id": tid, "transaction.timeout.ms": 60_000,
                  "message.timeout.ms": 60_000})
    p.init_transactions(CALL_TIMEOUT)
    return p


def coordinator_of(cluster: HelixCluster, tid: str) -> int:
    for n in cluster.nodes:
        if not n.alive():
            continue
        with kwire.Conn("127.0.0.1", n.kafka_port) as conn:
            node, _, _ = kwire.find_coordinator(conn, tid, key_type=1)
            return node
    raise AssertionError("no live node answers FindCoordinator")


def write(p: Producer, topic: str, prefix: str) -> list[str]:
    """Begins a transaction and writes PER_PARTITION records to every
    partition; returns the values (not yet committed)."""
    p.begin_transaction()
    values = []
    for part in range(PARTITIONS):
        for i in range(PER_PARTITION):
            v = f"{prefix}-{part}-{i}"
            p.produce(topic, value=v.encode(), partition=part)
            values.append(v)
    assert p.flush(CALL_TIMEOUT) == 0, "records not delivered"
    return values


def leaders(cluster: HelixCluster, topic: str) -> dict[int, int]:
    return {p: settled_leader(cluster, topic, p)[0] for p in range(PARTITIONS)}


def setup(cluster: HelixCluster, topic: str) -> dict[int, int]:
    create_topic(cluster.node(1).bootstrap, topic, PARTITIONS)
    wait_in_sync(cluster, topic)
    led = leaders(cluster, topic)
    # The point of these tests: partitions led by every node, so most of a
    # transaction's markers cross the peer transport.
    assert set(led.values()) == {1, 2, 3}, f"leaders not spread: {led}"
    return led


def assert_reads(cluster: HelixCluster, topic: str, committed: list[str], aborted: list[str]) -> None:
    reads = Reads(cluster)
    got = read_all(reads, topic, PARTITIONS, len(committed), "read_committed", timeout=90)
    assert sorted(got) == sorted(committed), (
        f"read_committed: {len(got)} read, {len(committed)} committed; "
        f"aborted read: {sorted(set(got) & set(aborted))[:10]}; "
        f"missing: {sorted(set(committed) - set(got))[:10]}\n{cluster.logs()}")
    everything = read_all(reads, topic, PARTITIONS, len(committed) + len(aborted),
                          "read_uncommitted", timeout=90)
    assert sorted(everything) == sorted(committed + aborted)


def test_transactions_span_partitions_led_by_every_node(cluster3, topic):
    setup(cluster3, topic)
    tid = f"tx-{topic}"
    p = transactional(cluster3, tid)
    committed = write(p, topic, "c1")
    p.commit_transaction(CALL_TIMEOUT)
    aborted = write(p, topic, "a1")
    p.abort_transaction(CALL_TIMEOUT)
    committed += write(p, topic, "c2")
    p.commit_transaction(CALL_TIMEOUT)
    # A second producer with the id fences the first and aborts its open
    # transaction, on every node's partitions.
    aborted += write(p, topic, "zombie")
    second = transactional(cluster3, tid)
    with pytest.raises(KafkaException):
        p.commit_transaction(CALL_TIMEOUT)
    committed += write(second, topic, "c3")
    second.commit_transaction(CALL_TIMEOUT)
    assert_reads(cluster3, topic, committed, aborted)


def test_commit_after_kill9_of_the_coordinator_with_a_transaction_open(cluster3, topic):
    """The coordinator dies with a transaction Ongoing: its successor
    replays __transaction_state, takes the client's EndTxn and writes the
    markers to every partition."""
    setup(cluster3, topic)
    tid = f"tx-{topic}"
    p = transactional(cluster3, tid)
    coordinator = coordinator_of(cluster3, tid)
    committed = write(p, topic, "before")
    p.commit_transaction(CALL_TIMEOUT)
    committed += write(p, topic, "open")
    cluster3.node(coordinator).kill9()
    p.commit_transaction(90)
    assert coordinator_of(cluster3, tid) != coordinator
    committed += write(p, topic, "after")
    p.commit_transaction(90)
    cluster3.node(coordinator).start()
    assert_reads(cluster3, topic, committed, [])


def test_markers_complete_after_kill9_of_the_coordinator_right_after_commit(cluster3, topic):
    """The commit is answered once PrepareCommit is durable; the markers
    follow. The coordinator dies at once: the next one finds the
    transaction in PrepareCommit and writes them, so every committed record
    becomes readable and the LSO moves on."""
    setup(cluster3, topic)
    tid = f"tx-{topic}"
    p = transactional(cluster3, tid)
    coordinator = coordinator_of(cluster3, tid)
    committed = write(p, topic, "c")
    p.commit_transaction(CALL_TIMEOUT)
    cluster3.node(coordinator).kill9()
    # An abort after it must not disturb it either.
    aborted = write(p, topic, "a")
    p.abort_transaction(90)
    committed += write(p, topic, "l")
    p.commit_transaction(90)
    assert_reads(cluster3, topic, committed, aborted)
    cluster3.node(coordinator).start()


def test_markers_reach_a_partition_whose_leader_was_killed(cluster3, topic):
    """A data partition's leader dies with the transaction open: the commit's
    marker for it is retried until a new leader takes it."""
    led = setup(cluster3, topic)
    tid = f"tx-{topic}"
    p = transactional(cluster3, tid)
    coordinator = coordinator_of(cluster3, tid)
    victim = next(n for n in (1, 2, 3) if n != coordinator)
    assert victim in led.values()
    committed = write(p, topic, "c")
    cluster3.node(victim).kill9()
    p.commit_transaction(90)
    committed += write(p, topic, "l")
    p.commit_transaction(90)
    assert_reads(cluster3, topic, committed, [])
    cluster3.node(victim).start()
    # The restarted replica catches up the markers too: read_committed from
    # whatever leads after it is back reads the same.
    wait_in_sync(cluster3, topic)
    got = read_all(Reads(cluster3), topic, PARTITIONS, len(committed), "read_committed", timeout=90)
    assert sorted(got) == sorted(committed)
