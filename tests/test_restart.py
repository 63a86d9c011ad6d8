"""kill -9 of the broker mid-production, restart on the same data directory:
topics, configs, acknowledged records and idempotent-producer state survive,
and offsets continue without gaps or repeats."""

from __future__ import annotations

import time

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import ConfigResource

import clients
import kwire
from test_confluent import read_partitions

pytestmark = pytest.mark.managed

PARTITIONS = 3
TOPIC_CONFIG = {"retention.ms": "86400000", "max.message.bytes": "200000"}


def topic_configs(bootstrap: str, topic: str) -> dict[str, tuple[str, object]]:
    a = clients.admin(bootstrap)
    (fut,) = a.describe_configs([ConfigResource("TOPIC", topic)], request_timeout=30).values()
    return {name: (entry.value, entry.source) for name, entry in fut.result(timeout=30).items()}


def test_kill9_mid_production_then_restart(fresh_broker, topic):
    b = fresh_broker
    clients.create_topic(b.bootstrap, topic, PARTITIONS, config=TOPIC_CONFIG)
    before_configs = topic_configs(b.bootstrap, topic)
    for name, value in TOPIC_CONFIG.items():
        assert before_configs[name][0] == value

    p = Producer({
        **clients.RDKAFKA, "bootstrap.servers": b.bootstrap,
        "enable.idempotence": True,
        "acks": "all",
        "linger.ms": 2,
        "message.timeout.ms": 120_000,
        "retry.backoff.ms": 100,
        "reconnect.backoff.ms": 50,
        "reconnect.backoff.max.ms": 500,
    })
    acked: dict[int, tuple[int, int]] = {}
    errors = []

    def on_delivery(err, msg):
        if err is not None:
            errors.append(err)
        else:
            acked[int(msg.value()[:7])] = (msg.partition(), msg.offset())

    total = 30_000
    kill_after_acked = 8_000
    killed_at_acked = None
    seq = 0
    while seq < total:
        if seq - len(acked) - len(errors) >= 2_000:
            p.poll(0.005)  # keep a bounded window of records in flight
            continue
        try:
            p.produce(topic, key=b"k%d" % (seq % 31), value=b"%07d-restart" % seq, on_delivery=on_delivery)
            seq += 1
        except BufferError:
            p.poll(0.01)
        if seq % 500 == 0:
            p.poll(0)
        if killed_at_acked is None and len(acked) >= kill_after_acked:
            # Records are in flight right now: kill -9 the broker under them.
            b.kill9()
            killed_at_acked = dict(acked)
            in_flight_at_kill = seq - len(acked)
            time.sleep(0.5)
            b.start()
    assert killed_at_acked is not None, "the kill never happened"
    assert in_flight_at_kill > 0, "nothing was in flight when the broker was killed"
    assert p.flush(120) == 0, "records undelivered two minutes after the restart"
    assert not errors, f"{len(errors)} delivery errors after restart, first: {errors[0]}"
    assert len(acked) == total

    # Records acknowledged before the kill kept their offsets.
    for s, pos in killed_at_acked.items():
        assert acked[s] == pos, f"record {s} acknowledged at {pos} before the kill, at {acked[s]} after"

    # Every record once, at its acknowledged offset; offsets dense per partition.
    msgs = read_partitions(b, topic, PARTITIONS, total)
    seen: dict[int, tuple[int, int]] = {}
    for m in msgs:
        s = int(m.value()[:7])
        assert s not in seen, f"record {s} stored twice: {seen[s]} and {(m.partition(), m.offset())}"
        seen[s] = (m.partition(), m.offset())
    assert seen == acked
    per_partition: dict[int, list[int]] = {}
    for part, off in acked.values():
        per_partition.setdefault(part, []).append(off)
    for part, offs in per_partition.items():
        assert sorted(offs) == list(range(len(offs))), f"partition {part}: offsets have gaps or repeats"

    # Topic and its configs survived.
    after_configs = topic_configs(b.bootstrap, topic)
    for name in TOPIC_CONFIG:
        assert after_configs[name] == before_configs[name], name

    # A second kill -9 with nothing in flight, and the producer carries on.
    ends = {part: len(offs) for part, offs in per_partition.items()}
    b.restart()
    more: list[tuple[int, int]] = []
    for i in range(PARTITIONS * 10):
        p.produce(topic, partition=i % PARTITIONS, value=b"after-%d" % i,
                  on_delivery=lambda err, msg: more.append((msg.partition(), msg.offset())) if err is None
                  else errors.append(err))
    assert p.flush(120) == 0
    assert not errors, errors[0]
    for part in range(PARTITIONS):
        offs = sorted(o for pp, o in more if pp == part)
        assert offs == list(range(ends.get(part, 0), ends.get(part, 0) + 10)), f"partition {part}: {offs}"


def test_idempotent_producer_state_survives_kill9(fresh_broker, topic):
    """Raw Produce with a producer id: after kill -9 and restart, a replayed
    batch is recognised as a duplicate (answered with its original offset, not
    written again) and a sequence gap is refused."""
    b = fresh_broker
    clients.create_topic(b.bootstrap, topic, 1)

    def batch(seq: int, n: int, pid: int, epoch: int) -> bytes:
        return kwire.record_batch([kwire.Record(b"k", b"v%d" % (seq + i)) for i in range(n)],
                                  producer_id=pid, producer_epoch=epoch, base_sequence=seq)

    with kwire.Conn(b.host, b.port) as conn:
        pid, epoch = conn.init_producer_id()
        first = conn.produce(topic, {0: batch(0, 5, pid, epoch)})[0]
        second = conn.produce(topic, {0: batch(5, 5, pid, epoch)})[0]
    assert first == (kwire.ERR_NONE, 0) and second == (kwire.ERR_NONE, 5)

    b.restart()

    with kwire.Conn(b.host, b.port) as conn:
        err, base = conn.produce(topic, {0: batch(5, 5, pid, epoch)})[0]
        # Kafka 3.9 answers a replay of one of the last five batches with no
        # error and the original offset (UnifiedLog: maybeDuplicate); with
        # DUPLICATE_SEQUENCE_NUMBER, librdkafka and the Java client report
        # the record delivered at offset -1.
        assert (err, base) == (kwire.ERR_NONE, 5), (
            f"replayed batch after restart: error {err}, base offset {base} (want no error, the original 5)"
        )
        err, _ = conn.produce(topic, {0: batch(20, 5, pid, epoch)})[0]
        assert err == kwire.ERR_OUT_OF_ORDER_SEQUENCE_NUMBER, f"sequence gap answered with {err}"
        assert conn.produce(topic, {0: batch(10, 5, pid, epoch)})[0] == (kwire.ERR_NONE, 10)
        batches = conn.fetch_all(topic, 0, 15)
    values = [r.value for bt in batches for r in kwire.decode_records(bt)]
    assert values == [b"v%d" % i for i in range(15)], "duplicate or missing records in the log"
