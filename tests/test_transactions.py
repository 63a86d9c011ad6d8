"""Transactions (issue 32, ADR 0026 "Step 3 as built") with confluent-kafka's
transactional producer on a single node: commit, abort, read_committed and
read_uncommitted readers, fencing by a second producer with the same
transactional.id, and a consume-transform-produce loop whose consumer
offsets go with the transaction (send_offsets_to_transaction: ADR 0026
"Offsets in transactions as built"). Every client call is bounded, so a
broker without transactions fails these tests (init_transactions times
out) instead of hanging them."""

from __future__ import annotations

import time
import uuid

import pytest
from confluent_kafka import (OFFSET_BEGINNING, OFFSET_INVALID, Consumer, KafkaError,
                             KafkaException, Producer, TopicPartition)

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


def consume_n(c: Consumer, n: int, timeout: float = 60.0) -> list:
    """The next `n` records `c` reads (it may have to join its group first)."""
    got: list = []
    deadline = time.monotonic() + timeout
    while len(got) < n and time.monotonic() < deadline:
        for m in c.consume(num_messages=n - len(got), timeout=0.5):
            if m.error() is None:
                got.append(m)
            elif m.error().code() != KafkaError._PARTITION_EOF:
                raise AssertionError(f"consume error: {m.error()}")
    assert len(got) == n, f"read {len(got)} of {n} records"
    return got


def committed_offsets(broker, group: str, topic: str, partitions: int) -> dict[int, int]:
    """The group's committed offsets as a fresh consumer of it reads them
    (librdkafka asks with require_stable at read_committed, the default)."""
    c = Consumer({
        **clients.RDKAFKA, "bootstrap.servers": broker.bootstrap,
        "group.id": group, "enable.auto.commit": False,
    })
    try:
        wanted = [TopicPartition(topic, p) for p in range(partitions)]
        return {tp.partition: tp.offset for tp in c.committed(wanted, timeout=CALL_TIMEOUT)}
    finally:
        c.close()


def transform_consumer(broker, topic: str, records: int) -> tuple[str, str, str, Consumer]:
    """A source topic holding `records` plain records over 2 partitions, an
    empty sink topic, and a read_committed consumer of a new group
    subscribed to the source: (source, sink, group, consumer)."""
    source, sink = f"{topic}-in", f"{topic}-out"
    clients.create_topic(broker.bootstrap, source, 2)
    clients.create_topic(broker.bootstrap, sink, 2)
    plain = Producer({**clients.RDKAFKA, "bootstrap.servers": broker.bootstrap})
    for i in range(records):
        plain.produce(source, value=f"in-{i}".encode(), partition=i % 2)
    assert plain.flush(CALL_TIMEOUT) == 0
    group = f"ctp-{uuid.uuid4().hex[:8]}"
    c = Consumer({
        **clients.RDKAFKA, "bootstrap.servers": broker.bootstrap,
        "group.id": group, "enable.auto.commit": False,
        "auto.offset.reset": "earliest", "isolation.level": "read_committed",
    })
    c.subscribe([source])
    return source, sink, group, c


def transform(p: Producer, c: Consumer, sink: str, records: list,
              end: bool | None) -> tuple[list[str], dict[int, int]]:
    """One transaction of the loop: the records transformed into `sink`
    and the consumer's positions sent to the transaction; then commit
    (True), abort (False) or leave it open (None). Returns the values
    written and the offsets sent."""
    p.begin_transaction()
    out = [f"t-{m.value().decode()}" for m in records]
    for m, v in zip(records, out):
        p.produce(sink, value=v.encode(), partition=m.partition())
    positions = [tp for tp in c.position(c.assignment()) if tp.offset >= 0]
    # The consumer's group metadata carries its member id and generation:
    # TxnOffsetCommit v3's checks (KIP-447).
    p.send_offsets_to_transaction(positions, c.consumer_group_metadata(), CALL_TIMEOUT)
    if end is True:
        p.commit_transaction(CALL_TIMEOUT)
    elif end is False:
        p.abort_transaction(CALL_TIMEOUT)
    else:
        assert p.flush(CALL_TIMEOUT) == 0
    return out, {tp.partition: tp.offset for tp in positions}


def test_send_offsets_to_transaction_commits_and_aborts_with_the_transaction(broker, topic):
    """Consume-transform-produce: the consumer's offsets are sent to the
    transaction. After its commit the group's committed offsets are the ones
    sent; after an abort they are unchanged; read_committed output holds the
    committed transaction's records only."""
    source, sink, group, c = transform_consumer(broker, topic, 20)
    p = producer(broker, f"tx-{topic}")
    try:
        p.init_transactions(CALL_TIMEOUT)
        committed_out, sent = transform(p, c, sink, consume_n(c, 12), end=True)
        assert sent, "the consumer holds no position"
        after_commit = committed_offsets(broker, group, source, 2)
        assert {part: after_commit[part] for part in sent} == sent
        assert sum(sent.values()) == 12

        _, aborted_sent = transform(p, c, sink, consume_n(c, 8), end=False)
        assert aborted_sent != sent
        assert committed_offsets(broker, group, source, 2) == after_commit

        got = read_all(broker, sink, 2, len(committed_out), "read_committed")
        assert sorted(got) == sorted(committed_out)
    finally:
        c.close()


@pytest.mark.managed
def test_offsets_in_transactions_are_replayed_after_kill9(fresh_broker, topic):
    """The group coordinator replays __consumer_offsets after kill -9:
    committed transactional offsets stay committed, and offsets left pending
    by a transaction open at the crash are dropped when the next producer
    with the same id aborts it (its marker reaches the replayed group)."""
    b = fresh_broker
    source, sink, group, c = transform_consumer(b, topic, 20)
    tid = f"tx-{topic}"
    first = producer(b, tid)
    try:
        first.init_transactions(CALL_TIMEOUT)
        _, sent = transform(first, c, sink, consume_n(c, 12), end=True)
        _, open_sent = transform(first, c, sink, consume_n(c, 8), end=None)
        assert open_sent != sent
    finally:
        c.close()
    b.restart()
    # Until the open transaction ends its offsets are pending: a fetch
    # with require_stable (committed()) would wait. The next producer's
    # InitProducerId aborts it.
    second = producer(b, tid)
    second.init_transactions(CALL_TIMEOUT)
    after = committed_offsets(b, group, source, 2)
    assert {part: after[part] for part in sent} == sent
    for part in open_sent:
        assert after[part] == sent.get(part, OFFSET_INVALID), "the aborted offsets are not committed"
