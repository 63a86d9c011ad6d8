"""Transactions (issue 32, ADR 0026 "Step 3 as built") with confluent-kafka's
transactional producer on a single node: commit, abort, read_committed and
read_uncommitted readers, and fencing by a second producer with the same
transactional.id. Every client call is bounded, so a broker without
transactions fails these tests (init_transactions times out) instead of
hanging them."""

from __future__ import annotations

import time
import uuid

import pytest
from confluent_kafka import (OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, Producer,
                             TopicPartition)

import clients

# Seconds any one transactional call may take before the test fails.
CALL_TIMEOUT = 30.0


def producer(broker, transactional_id: str) -> Producer:
    return Producer({
        **clients.RDKAFKA, "bootstrap.servers": broker.bootstrap,
        "transactional.id": transactional_id,
        "transaction.timeout.ms": 60_000,
    })


def read_all(broker, topic: str, partitions: int, expected: int, isolation: str,
             timeout: float = 60.0) -> list[str]:
    """Reads every partition from the start at `isolation` until `expected`
    records arrived and every partition is at its end; returns the values.
    Waits a little past that, so a record too many is seen too."""
    c = Consumer({
        **clients.RDKAFKA, "bootstrap.servers": broker.bootstrap,
        "group.id": f"txn-reader-{uuid.uuid4().hex[:8]}",
        "enable.auto.commit": False,
        "enable.partition.eof": True,
        "isolation.level": isolation,
    })
    try:
        c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
        out: list[str] = []
        eof: set[int] = set()
        deadline = time.monotonic() + timeout
        settled_at = None
        while time.monotonic() < deadline:
            for m in c.consume(num_messages=1000, timeout=0.5):
                err = m.error()
                if err is None:
                    out.append(m.value().decode())
                    eof.discard(m.partition())
                elif err.code() == KafkaError._PARTITION_EOF:
                    eof.add(m.partition())
                else:
                    raise AssertionError(f"consume error: {err}")
            if len(eof) == partitions and len(out) >= expected:
                settled_at = settled_at or time.monotonic()
                if time.monotonic() - settled_at > 1.0:
                    break
            else:
                settled_at = None
        assert len(out) >= expected and len(eof) == partitions, (
            f"{isolation}: read {len(out)} of {expected}, EOF on {sorted(eof)}")
        return out
    finally:
        c.close()


def transaction(p: Producer, topic: str, prefix: str, per_partition: int, commit: bool) -> list[str]:
    """One transaction writing `per_partition` records to partitions 0 and 1."""
    p.begin_transaction()
    values = [f"{prefix}-{part}-{i}" for part in (0, 1) for i in range(per_partition)]
    for v in values:
        p.produce(topic, value=v.encode(), partition=int(v.split("-")[-2]))
    assert p.flush(CALL_TIMEOUT) == 0, "records not delivered"
    if commit:
        p.commit_transaction(CALL_TIMEOUT)
    else:
        p.abort_transaction(CALL_TIMEOUT)
    return values


def test_committed_transaction_is_read_exactly_by_read_committed(broker, topic):
    clients.create_topic(broker.bootstrap, topic, 2)
    p = producer(broker, f"tx-{topic}")
    p.init_transactions(CALL_TIMEOUT)
    committed = transaction(p, topic, "c", 10, commit=True)
    got = read_all(broker, topic, 2, len(committed), "read_committed")
    assert sorted(got) == sorted(committed)


def test_aborted_transaction_is_hidden_from_read_committed_only(broker, topic):
    clients.create_topic(broker.bootstrap, topic, 2)
    p = producer(broker, f"tx-{topic}")
    p.init_transactions(CALL_TIMEOUT)
    committed = transaction(p, topic, "c", 5, commit=True)
    aborted = transaction(p, topic, "a", 5, commit=False)
    # A later committed transaction: read_committed must read past the
    # aborted one to reach it.
    later = transaction(p, topic, "l", 3, commit=True)
    got = read_all(broker, topic, 2, len(committed) + len(later), "read_committed")
    assert sorted(got) == sorted(committed + later)
    everything = read_all(broker, topic, 2, len(committed) + len(aborted) + len(later),
                          "read_uncommitted")
    assert sorted(everything) == sorted(committed + aborted + later)


def test_second_producer_with_the_same_id_fences_the_first(broker, topic):
    clients.create_topic(broker.bootstrap, topic, 2)
    tid = f"tx-{topic}"
    first = producer(broker, tid)
    first.init_transactions(CALL_TIMEOUT)
    first.begin_transaction()
    for i in range(5):
        first.produce(topic, value=f"first-{i}".encode(), partition=i % 2)
    assert first.flush(CALL_TIMEOUT) == 0
    # The second producer's InitProducerId aborts the first one's open
    # transaction and bumps the epoch.
    second = producer(broker, tid)
    second.init_transactions(CALL_TIMEOUT)
    with pytest.raises(KafkaException) as fenced:
        first.commit_transaction(CALL_TIMEOUT)
    error = fenced.value.args[0]
    assert error.fatal() or error.code() in (
        KafkaError._FENCED, KafkaError.PRODUCER_FENCED, KafkaError.INVALID_PRODUCER_EPOCH), error
    values = transaction(second, topic, "second", 4, commit=True)
    got = read_all(broker, topic, 2, len(values), "read_committed")
    assert sorted(got) == sorted(values)


@pytest.mark.managed
def test_open_transaction_survives_kill9_and_is_aborted_by_the_next_producer(fresh_broker, topic):
    """The coordinator replays __transaction_state after kill -9: the next
    producer with the same id fences the one that died mid-transaction, its
    records are aborted (read_committed passes them), and committed ones
    stay."""
    b = fresh_broker
    clients.create_topic(b.bootstrap, topic, 2)
    tid = f"tx-{topic}"
    first = producer(b, tid)
    first.init_transactions(CALL_TIMEOUT)
    committed = transaction(first, topic, "c", 4, commit=True)
    first.begin_transaction()
    for i in range(6):
        first.produce(topic, value=f"open-{i}".encode(), partition=i % 2)
    assert first.flush(CALL_TIMEOUT) == 0
    b.restart()
    second = producer(b, tid)
    second.init_transactions(CALL_TIMEOUT)
    later = transaction(second, topic, "l", 3, commit=True)
    got = read_all(b, topic, 2, len(committed) + len(later), "read_committed")
    assert sorted(got) == sorted(committed + later)
    everything = read_all(b, topic, 2, len(committed) + 6 + len(later), "read_uncommitted")
    assert len(everything) == len(committed) + 6 + len(later)
