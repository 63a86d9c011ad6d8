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
import subprocess
import threading
import time

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition

import clients
import harness
import javalibs
import kwire
from cluster_harness import HelixCluster
from test_cluster_faults import FAST, create_topic, settled_leader, wait_in_sync
from test_transactions import CALL_TIMEOUT, committed_offsets, consume_n, read_all, transform

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
    c = HelixCluster(tmp_path, 3, args=FAST)
    try:
        # Inside the try: a node that started before another failed to is
        # stopped too.
        c.start()
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


class Copier:
    """One HelixEosCopy process (tests/java), its progress read as it goes."""

    def __init__(self, cp: str, cluster: HelixCluster, args: list[str]):
        self.copied = 0
        self.lines: list[str] = []
        self.proc = subprocess.Popen(
            ["java", "-Xmx256m", "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn", "-cp", cp,
             "HelixEosCopy", cluster.bootstrap, *args],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line.rstrip())
            if line.startswith("progress "):
                self.copied = int(line.split()[1])

    def wait_progress(self, at_least: int, timeout: float = 120.0) -> None:
        deadline = time.monotonic() + timeout
        while self.copied < at_least:
            assert self.proc.poll() is None, f"the copier exited early:\n" + "\n".join(self.lines[-40:])
            assert time.monotonic() < deadline, (
                f"the copier copied {self.copied} of {at_least} in {timeout} s:\n"
                + "\n".join(self.lines[-40:]))
            time.sleep(0.05)

    def kill9(self) -> None:
        self.proc.kill()
        self.proc.wait(timeout=30)

    def finish(self, timeout: float = 300.0) -> int:
        rc = self.proc.wait(timeout=timeout)
        self.reader.join(timeout=10)
        return rc


def test_java_read_process_write_is_exactly_once_while_nodes_and_the_copier_are_killed(
        cluster3, topic):
    """Issue 32's Java test: a read-process-write copier (Java kafka-clients
    3.9.1, sendOffsetsToTransaction) copies a fixed input while the test
    kills -9, in turn, the transaction coordinator's node, an output
    partition's leader, and the copier itself (a new one with the same
    transactional id takes over). The output holds every input record
    exactly once and the group's committed offsets are the input's end."""
    libs = javalibs.maven_libs("kafka-clients", "3.9.1")
    cp = f"{javalibs.compiled(javalibs.JAVA_DIR / 'HelixEosCopy.java', libs)}:{libs}/*"
    source, output = f"{topic}-in", f"{topic}-out"
    for name in (source, output):
        create_topic(cluster3.node(1).bootstrap, name, 3)
    wait_in_sync(cluster3, source)
    wait_in_sync(cluster3, output)
    total = 3000
    p = Producer({**clients.RDKAFKA, "bootstrap.servers": cluster3.bootstrap,
                  "enable.idempotence": True, "acks": "all"})
    values = [f"v-{i}" for i in range(total)]
    for i, v in enumerate(values):
        p.produce(source, value=v.encode(), partition=i % 3)
    assert p.flush(60) == 0
    group, tid = f"g-{topic}", f"copier-{topic}"
    args = [source, output, group, tid, str(total)]
    copier = Copier(cp, cluster3, args)
    copier.wait_progress(300)
    coordinator = coordinator_of(cluster3, tid)
    cluster3.node(coordinator).kill9()
    copier.wait_progress(900)
    cluster3.node(coordinator).start()
    out_leader = settled_leader(cluster3, output, 0)[0]
    cluster3.node(out_leader).kill9()
    copier.wait_progress(1500)
    cluster3.node(out_leader).start()
    copier.kill9()
    copier = Copier(cp, cluster3, args)
    rc = copier.finish()
    assert rc == 0, "\n".join(copier.lines[-60:]) + "\n" + cluster3.logs()
    assert any(line.startswith("HELIX-EOS OK") for line in copier.lines)
    got = read_all(Reads(cluster3), output, 3, total, "read_committed", timeout=90)
    duplicates = {v for v in got if got.count(v) > 1}
    assert sorted(got) == sorted(values), (
        f"{len(got)} read of {total}; duplicated {sorted(duplicates)[:10]}; "
        f"missing {sorted(set(values) - set(got))[:10]}")
    c = Consumer({**clients.RDKAFKA, "bootstrap.servers": cluster3.bootstrap, "group.id": group})
    try:
        committed = c.committed([TopicPartition(source, i) for i in range(3)], timeout=30)
    finally:
        c.close()
    assert sum(tp.offset for tp in committed) == total, committed


def test_a_transaction_left_open_is_aborted_after_its_timeout(tmp_path, topic):
    """A producer opens a transaction and goes silent: the coordinator
    aborts it once `transaction.timeout.ms` has passed (looked for every
    500 ms here), so it stops holding back read_committed readers of
    another producer's later commit; its records are never read as
    committed, and its own commit afterwards fails."""
    c = HelixCluster(tmp_path, 3, args=FAST + [
        "--transaction-abort-timed-out-transaction-cleanup-interval-ms", "500"])
    try:
        c.start()
        setup(c, topic)
        silent = Producer({**clients.RDKAFKA, "bootstrap.servers": c.bootstrap,
                           "transactional.id": f"silent-{topic}", "transaction.timeout.ms": 3000})
        silent.init_transactions(CALL_TIMEOUT)
        left_open = write(silent, topic, "open")
        other = transactional(c, f"other-{topic}")
        committed = write(other, topic, "later")
        other.commit_transaction(CALL_TIMEOUT)
        assert_reads(c, topic, committed, left_open)
        with pytest.raises(KafkaException):
            silent.commit_transaction(CALL_TIMEOUT)
    finally:
        c.stop()


def test_kill9_of_every_node_mid_transaction_neither_hangs_nor_loses_a_commit(cluster3, topic):
    """Every node dies at once: one transaction open, another answered
    committed an instant before (its markers possibly unwritten). After the
    restart the coordinators replay `__transaction_state`: the committed one
    completes (its records become readable), the open one is aborted by the
    next producer with its id, and the LSO moves on to a later commit."""
    setup(cluster3, topic)
    a = transactional(cluster3, f"a-{topic}")
    committed = write(a, topic, "a1")
    a.commit_transaction(CALL_TIMEOUT)
    left_open = write(a, topic, "a2")
    b = transactional(cluster3, f"b-{topic}")
    committed += write(b, topic, "b1")
    b.commit_transaction(CALL_TIMEOUT)
    cluster3.kill_all()
    cluster3.start()
    wait_in_sync(cluster3, topic)
    again = transactional(cluster3, f"a-{topic}")
    committed += write(again, topic, "a3")
    again.commit_transaction(90)
    assert_reads(cluster3, topic, committed, left_open)


def test_send_offsets_to_transaction_commits_with_the_transaction_across_nodes(cluster3, topic):
    """confluent-kafka's consume-transform-produce on 3 nodes: the group's
    coordinator, the transaction's coordinator and the partitions' leaders
    are wherever placement put them. After a commit the group's committed
    offsets are the ones sent, after an abort unchanged, and read_committed
    reads the committed transaction's records only."""
    source, sink = f"{topic}-in", f"{topic}-out"
    for name in (source, sink):
        create_topic(cluster3.node(1).bootstrap, name, 2)
        wait_in_sync(cluster3, name)
    plain = Producer({**clients.RDKAFKA, "bootstrap.servers": cluster3.bootstrap, "acks": "all"})
    for i in range(20):
        plain.produce(source, value=f"in-{i}".encode(), partition=i % 2)
    assert plain.flush(CALL_TIMEOUT) == 0
    group = f"ctp-{topic}"
    c = Consumer({**clients.RDKAFKA, "bootstrap.servers": cluster3.bootstrap, "group.id": group,
                  "enable.auto.commit": False, "auto.offset.reset": "earliest",
                  "isolation.level": "read_committed"})
    c.subscribe([source])
    reads = Reads(cluster3)
    try:
        p = transactional(cluster3, f"tx-{topic}")
        committed_out, sent = transform(p, c, sink, consume_n(c, 12), end=True)
        assert sent and sum(sent.values()) == 12
        after_commit = committed_offsets(reads, group, source, 2)
        assert {part: after_commit[part] for part in sent} == sent
        _, aborted_sent = transform(p, c, sink, consume_n(c, 8), end=False)
        assert aborted_sent != sent
        assert committed_offsets(reads, group, source, 2) == after_commit
        got = read_all(reads, sink, 2, len(committed_out), "read_committed")
        assert sorted(got) == sorted(committed_out)
    finally:
        c.close()


def test_kafka_streams_exactly_once_v2_copies_exactly_once_while_a_broker_is_killed(cluster3, topic):
    """Kafka Streams 3.9.1 (Maven Central) with processing.guarantee
    exactly_once_v2, a stateless application (every input record to the
    output: Streams' transactions, its offsets in them, read_committed)
    while a broker is killed -9 and restarted. The output holds every input
    record exactly once. (The issue's stateful count needs a compacted
    changelog topic: issue 33.)"""
    libs = javalibs.maven_libs("kafka-streams", "3.9.1")
    cp = f"{javalibs.compiled(javalibs.JAVA_DIR / 'HelixStreamsCount.java', libs)}:{libs}/*"
    source, output = f"{topic}-in", f"{topic}-out"
    for name in (source, output):
        create_topic(cluster3.node(1).bootstrap, name, 3)
        wait_in_sync(cluster3, name)
    total = 3000
    values = [f"v-{i}" for i in range(total)]
    p = Producer({**clients.RDKAFKA, "bootstrap.servers": cluster3.bootstrap,
                  "enable.idempotence": True, "acks": "all"})
    for i, v in enumerate(values[:total // 2]):
        p.produce(source, key=f"k{i % 7}".encode(), value=v.encode())
    assert p.flush(60) == 0
    app = subprocess.Popen(
        ["java", "-Xmx256m", "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn", "-cp", cp,
         "HelixStreamsCount", cluster3.bootstrap, source, output, f"app-{topic}",
         str(cluster3.workdir / "streams-state"), "150", "copy"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(line.rstrip() for line in app.stdout),
                              daemon=True)
    reader.start()
    try:
        deadline = time.monotonic() + 90
        while "state RUNNING" not in lines:
            assert app.poll() is None and time.monotonic() < deadline, "\n".join(lines[-40:])
            time.sleep(0.1)
        victim = settled_leader(cluster3, output, 0)[0]
        cluster3.node(victim).kill9()
        for i, v in enumerate(values[total // 2:], start=total // 2):
            p.produce(source, key=f"k{i % 7}".encode(), value=v.encode())
        assert p.flush(60) == 0
        cluster3.node(victim).start()
        got = read_all(Reads(cluster3), output, 3, total, "read_committed", timeout=120)
        duplicates = {v for v in got if got.count(v) > 1}
        assert sorted(got) == sorted(values), (
            f"{len(got)} read of {total}; duplicated {sorted(duplicates)[:10]}; "
            f"missing {sorted(set(values) - set(got))[:10]}\n" + "\n".join(lines[-40:]))
        assert not any("HELIX-STREAMS ERROR" in line for line in lines), "\n".join(lines[-60:])
    finally:
        app.kill()
        app.wait(timeout=30)


def test_a_brokers_verify_only_add_partitions_to_txn_is_answered_by_the_coordinator(cluster3, topic):
    """AddPartitionsToTxn v4-v5, the form a Kafka partition leader sends the
    coordinator before a transaction's first batch (KIP-890 part 1), over
    the wire: the coordinator answers NONE for a partition in the ongoing
    transaction and TRANSACTION_ABORTABLE for one that is not (Kafka 3.9's
    answer at both versions), and changes nothing; every other node answers
    NOT_COORDINATOR. Before v4 was served the connection was closed."""
    led = setup(cluster3, topic)
    tid = f"tx-{topic}"
    p = transactional(cluster3, tid)
    p.begin_transaction()
    p.produce(topic, value=b"in", partition=0)
    assert p.flush(CALL_TIMEOUT) == 0, "record not delivered"
    # The producer's id and epoch, from its batch on p0's leader.
    with kwire.Conn("127.0.0.1", cluster3.node(led[0]).kafka_port) as conn:
        err, _, records = conn.fetch(topic, 0, 0)
    assert err == kwire.ERR_NONE
    batch = kwire.parse_batches(records)[0]
    ask = [kwire.BrokerTxn(tid, batch.producer_id, batch.producer_epoch, True, {topic: [0, 1]})]
    coordinator = coordinator_of(cluster3, tid)
    for node in cluster3.nodes:
        with kwire.Conn("127.0.0.1", node.kafka_port) as conn:
            assert conn.versions()[kwire.API_ADD_PARTITIONS_TO_TXN] == (0, 5)
            for version in (4, 5):
                got = kwire.add_partitions_to_txn_v4(conn, ask, version)
                if node.id == coordinator:
                    expected = {(topic, 0): 0, (topic, 1): 120}
                else:
                    expected = {(topic, 0): 16, (topic, 1): 16}
                assert got == (0, {tid: expected}), f"node {node.id} v{version}"
    p.commit_transaction(CALL_TIMEOUT)
    assert read_all(Reads(cluster3), topic, PARTITIONS, 1, "read_committed", timeout=90) == ["in"]
