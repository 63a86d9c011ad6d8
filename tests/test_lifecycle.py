"""The broker process: SIGTERM finishes in-flight work and exits 0 with every
acknowledged record kept; a data directory in use is refused to a second
broker; every coordinator partition serves after each start."""

from __future__ import annotations

import struct
import subprocess
import time

import pytest
from confluent_kafka import Producer

import clients
import kwire
from harness import free_port
from test_confluent import read_partitions

pytestmark = pytest.mark.managed

API_DESCRIBE_GROUPS = 15


def test_sigterm_exits_cleanly_and_keeps_data(fresh_broker, topic):
    b = fresh_broker
    clients.create_topic(b.bootstrap, topic, 2)
    p = Producer({**clients.RDKAFKA, "bootstrap.servers": b.bootstrap, "acks": "all", "linger.ms": 5})
    for i in range(2000):
        p.produce(topic, partition=i % 2, value=b"%05d" % i)
    assert p.flush(60) == 0
    code = b.stop()
    # The JVM reports a SIGTERM-initiated exit as 143 after its shutdown hooks ran.
    assert code == (143 if b.kind == "kafka" else 0), f"exit code {code} after SIGTERM\n{b.log_tail()}"
    b.start()
    msgs = read_partitions(b, topic, 2, 2000)
    assert sorted(int(m.value()) for m in msgs) == list(range(2000))


def test_second_broker_on_same_data_dir_is_refused(fresh_broker):
    b = fresh_broker
    cmd = b.command(port=free_port())
    try:
        proc = subprocess.run(cmd, capture_output=True, timeout=60, env=b.env())
    except subprocess.TimeoutExpired:
        pytest.fail("a second broker on a data directory in use kept running")
    out = (proc.stdout + proc.stderr).decode(errors="replace")
    assert proc.returncode != 0, out
    if b.kind != "kafka":
        # Helix's spec: a clear message. (Apache Kafka's KRaft layer may fail on
        # the shared metadata log before its log-dir lock is even checked.)
        assert str(b.data_dir) in out, f"the refusal does not name the data directory:\n{out[-3000:]}"
    # The first broker is unaffected. (Not asserted for Apache Kafka: a second
    # KRaft node with the same node id disturbs the first one's quorum.)
    assert b.alive()
    if b.kind != "kafka":
        clients.create_topic(b.bootstrap, "after-refusal", 1)


def java_string_hash(s: str) -> int:
    """Java's `String.hashCode` of an ASCII string (what Kafka partitions
    coordinator keys by)."""
    h = 0
    for c in s:
        h = (31 * h + ord(c)) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h


def a_key_per_partition(prefix: str, partitions: int = 50) -> dict[int, str]:
    """One key for each coordinator partition (Kafka's rule: the absolute
    value of the key's hash modulo the partition count)."""
    keys: dict[int, str] = {}
    i = 0
    while len(keys) < partitions:
        key = f"{prefix}-{i}"
        keys.setdefault(abs(java_string_hash(key)) % partitions, key)
        i += 1
    return keys


def init_transactional_id(conn: kwire.Conn, transactional_id: str) -> int:
    """InitProducerId v0 for `transactional_id`: its error code."""
    body = kwire.string(transactional_id) + struct.pack(">i", 60_000)
    r = conn.request(kwire.API_INIT_PRODUCER_ID, 0, body)
    r.i32()  # throttle
    return r.i16()


def describe_group(conn: kwire.Conn, group: str) -> int:
    """DescribeGroups v0 for one group: its error code (an unknown group on
    a serving coordinator is 0, state Dead)."""
    r = conn.request(API_DESCRIBE_GROUPS, 0, struct.pack(">i", 1) + kwire.string(group))
    if r.i32() != 1:
        raise kwire.ProtocolError("DescribeGroups answered another number of groups")
    return r.i16()


def answer_once_served(conn: kwire.Conn, ask, deadline: float) -> int:
    """`ask()`'s error code once it is not a coordinator's retriable one, or
    the last retriable one at `deadline`."""
    while True:
        code = ask()
        if code not in kwire.RETRIABLE_INIT_ERRORS or time.monotonic() > deadline:
            return code
        time.sleep(0.1)


def test_every_coordinator_partition_serves_after_each_start(fresh_broker):
    """Every `__transaction_state` and `__consumer_offsets` partition serves
    its keys after each start. An internal partition that became serving
    between the service's look at start and its follower's first look was
    never loaded, and its transactional ids or groups were answered
    NOT_COORDINATOR for good (CI: a transactional producer's
    init_transactions timed out); it happened on about one start in three."""
    b = fresh_broker
    transactional_ids = a_key_per_partition("txn")
    groups = a_key_per_partition("group")
    for start in range(8):
        if start:
            b.restart()
        unserved = []
        with kwire.Conn(b.host, b.port, timeout=30) as conn:
            deadline = time.monotonic() + 20
            for partition, tid in transactional_ids.items():
                kwire.find_coordinator(conn, tid, key_type=kwire.COORDINATOR_TRANSACTION)
                code = answer_once_served(conn, lambda: init_transactional_id(conn, tid), deadline)
                if code != kwire.ERR_NONE:
                    unserved.append(("__transaction_state", partition, code))
            for partition, group in groups.items():
                kwire.find_coordinator(conn, group)
                code = answer_once_served(conn, lambda: describe_group(conn, group), deadline)
                if code != kwire.ERR_NONE:
                    unserved.append(("__consumer_offsets", partition, code))
        assert not unserved, f"start {start + 1}: {unserved}\n{b.log_tail()}"
