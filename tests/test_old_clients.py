"""Clients of the oldest protocol versions (issue 30 item 2), which Kafka 3.9
still serves: it converts their message sets (magic 0 and 1) to v2 batches
when they produce and down-converts v2 batches to their format when they
fetch.

- librdkafka with ``api.version.request=false`` and
  ``broker.version.fallback=0.9.0``: Produce v1 / Fetch v1, magic 0.
- kafka-python with ``api_version=(0, 10, 0)``: Produce v2 / Fetch v2,
  magic 1. (librdkafka 2.x cannot be pinned to 0.10.0: any fallback >= 0.10
  makes it send ApiVersions and speak the newest versions, so it would not
  exercise magic 1.)

Every record must come back to old and new consumers alike, with keys,
values and order intact and the timestamps Kafka gives: magic 0 carries none
(a magic 0 record is stored with timestamp -1), magic 1 and v2 keep the
producer's, and old consumers never see headers.

The consumers start at offset 0 explicitly: an old client resolving
"earliest" would need ListOffsets v0, which is not what this covers.
"""

from __future__ import annotations

import time
import uuid

import pytest
from confluent_kafka import TIMESTAMP_NOT_AVAILABLE, Consumer, KafkaError, Producer, TopicPartition
from kafka import KafkaConsumer, KafkaProducer
from kafka import TopicPartition as KpTopicPartition
from kafka.record.legacy_records import LegacyRecordBatchBuilder

import clients
import kwire

# The clients: what each writes and reads.
RD_V0 = "librdkafka-0.9.0"  # magic 0
KP_V1 = "kafka-python-0.10.0"  # magic 1
MODERN = "librdkafka"  # v2 batches
MAGIC = {RD_V0: 0, KP_V1: 1, MODERN: 2}

# Recent timestamps: time-based retention (7 days) must not delete them.
T0 = int(time.time() * 1000) - 60_000


def rd_config(broker, kind: str) -> dict:
    conf = {**clients.RDKAFKA, "bootstrap.servers": broker.bootstrap}
    if kind == RD_V0:
        conf.update({"api.version.request": False, "broker.version.fallback": "0.9.0"})
    return conf


def produce(broker, kind: str, topic: str, records: list[tuple], codec: str = "none") -> list[int]:
    """Produces (key, value, timestamp, headers) tuples to partition 0 in
    order, waits for every delivery, returns the offsets."""
    if kind == KP_V1:
        p = KafkaProducer(bootstrap_servers=broker.bootstrap, api_version=(0, 10, 0), acks="all",
                          compression_type=None if codec == "none" else codec, linger_ms=20,
                          max_in_flight_requests_per_connection=1)
        try:
            futures = [p.send(topic, value=v, key=k, partition=0, timestamp_ms=ts) for k, v, ts, _ in records]
            p.flush(60)
            return [f.get(timeout=60).offset for f in futures]
        finally:
            p.close()
    p = Producer({
        **rd_config(broker, kind),
        "compression.codec": codec,
        "linger.ms": 20,
        "acks": "all",
        "message.timeout.ms": 60_000,
        # One request in flight keeps the order across retries.
        "max.in.flight.requests.per.connection": 1,
    })
    offsets: dict[int, int] = {}
    errors = []

    def on_delivery(err, msg, i):
        if err is not None:
            errors.append(err)
        else:
            offsets[i] = msg.offset()

    for i, (key, value, ts, headers) in enumerate(records):
        extra = {"headers": headers} if headers else {}
        p.produce(topic, partition=0, key=key, value=value, timestamp=ts,
                  on_delivery=lambda err, msg, i=i: on_delivery(err, msg, i), **extra)
    left = p.flush(60)
    assert left == 0 and not errors, f"{kind} producer: {left} undelivered, errors {errors[:3]}"
    return [offsets[i] for i in range(len(records))]


def consume(broker, kind: str, topic: str, expected: int, timeout: float = 60.0) -> list[tuple]:
    """Reads partition 0 from offset 0 until `expected` records (and, for
    librdkafka, EOF). Returns (offset, key, value, timestamp, headers), the
    timestamp None where the format has none."""
    if kind == KP_V1:
        c = KafkaConsumer(bootstrap_servers=broker.bootstrap, api_version=(0, 10, 0), group_id=None,
                          enable_auto_commit=False)
        try:
            tp = KpTopicPartition(topic, 0)
            c.assign([tp])
            c.seek(tp, 0)
            out = []
            deadline = time.monotonic() + timeout
            while len(out) < expected and time.monotonic() < deadline:
                for msgs in c.poll(timeout_ms=1000).values():
                    out += [(m.offset, m.key, m.value, m.timestamp, list(m.headers or [])) for m in msgs]
            assert c.position(tp) == expected, f"{kind} consumer at {c.position(tp)}, read {len(out)}"
            assert len(out) == expected, f"{kind} consumer read {len(out)} of {expected}"
            return out
        finally:
            c.close()
    c = Consumer({
        **rd_config(broker, kind),
        "group.id": f"assign-only-{uuid.uuid4().hex[:8]}",
        "enable.auto.commit": False,
        "enable.partition.eof": True,
    })
    try:
        c.assign([TopicPartition(topic, 0, 0)])
        out = []
        eof = False
        deadline = time.monotonic() + timeout
        while not (eof and len(out) >= expected) and time.monotonic() < deadline:
            for m in c.consume(num_messages=1000, timeout=1.0):
                err = m.error()
                if err is None:
                    ts_type, ts = m.timestamp()
                    out.append((m.offset(), m.key(), m.value(),
                                None if ts_type == TIMESTAMP_NOT_AVAILABLE else ts, m.headers() or []))
                    eof = False
                elif err.code() == KafkaError._PARTITION_EOF:
                    eof = True
                else:
                    raise AssertionError(f"{kind} consumer: {err}")
        assert eof and len(out) == expected, f"{kind} consumer read {len(out)} of {expected} (eof {eof})"
        return out
    finally:
        c.close()


def records(tag: str, n: int, ts0: int, headers: bool = False) -> list[tuple]:
    return [
        (b"%s-k%d" % (tag.encode(), i), b"%s-value-%d-" % (tag.encode(), i) + b"x" * (i % 50),
         ts0 + i, [("h", b"%s-%d" % (tag.encode(), i))] if headers else None)
        for i in range(n)
    ]


def expected_timestamp(writer: str, reader: str, ts: int) -> int | None:
    """The timestamp a reader sees, as Kafka answers: none in magic 0; -1
    for a record written as magic 0; else the producer's."""
    if MAGIC[reader] == 0:
        return None
    if MAGIC[writer] == 0:
        return -1
    return ts


def check(got: list[tuple], written: list[tuple[str, tuple]], reader: str) -> None:
    assert len(got) == len(written)
    for i, ((offset, key, value, ts, headers), (writer, (k, v, t, h))) in enumerate(zip(got, written)):
        assert offset == i, f"{reader} reader: message {i} has offset {offset}"
        assert (key, value) == (k, v), f"{reader} reader, offset {i}"
        assert ts == expected_timestamp(writer, reader, t), f"{reader} reader, offset {i} written by {writer}"
        assert headers == (h if MAGIC[reader] == 2 and h else []), f"{reader} reader, offset {i}"


# kafka-python here has gzip only; snappy and lz4 magic 1 wrappers are covered
# by the unit tests (helix-server/src/kafka/legacy).
CASES = [(RD_V0, "none"), (RD_V0, "gzip"), (RD_V0, "snappy"), (RD_V0, "lz4"),
         (KP_V1, "none"), (KP_V1, "gzip")]


@pytest.mark.parametrize("kind,codec", CASES, ids=[f"{k}-{c}" for k, c in CASES])
def test_old_producer_and_old_consumer_round_trip(broker, topic, kind, codec):
    clients.create_topic(broker.bootstrap, topic, 1)
    sent = records(f"{kind}-{codec}", 300, T0)
    assert produce(broker, kind, topic, sent, codec) == list(range(len(sent)))
    written = [(kind, r) for r in sent]
    check(consume(broker, kind, topic, len(sent)), written, kind)
    check(consume(broker, MODERN, topic, len(sent)), written, MODERN)


def test_mixed_versions_on_one_topic_read_back_by_every_consumer(broker, topic):
    clients.create_topic(broker.bootstrap, topic, 1)
    written: list[tuple[str, tuple]] = []
    # Each producer's records land after the previous producer's: the
    # offsets interleave the three formats in runs.
    for round_ in range(2):
        for writer, codec in ((RD_V0, "gzip"), (KP_V1, "none"), (MODERN, "gzip"), (KP_V1, "gzip"),
                              (RD_V0, "none"), (MODERN, "none")):
            batch = records(f"r{round_}-{writer}-{codec}", 40, T0 + 1000 * len(written),
                            headers=writer == MODERN)
            offsets = produce(broker, writer, topic, batch, codec)
            assert offsets == list(range(len(written), len(written) + len(batch)))
            written += [(writer, r) for r in batch]
    for reader in (MODERN, RD_V0, KP_V1):
        check(consume(broker, reader, topic, len(written)), written, reader)


def test_log_append_time_topic_stamps_what_old_producers_send(broker, topic):
    clients.create_topic(broker.bootstrap, topic, 1, {"message.timestamp.type": "LogAppendTime"})
    before = int(time.time() * 1000)
    written = [(RD_V0, r) for r in records("lat-v0", 30, T0)]
    produce(broker, RD_V0, topic, [r for _, r in written], "gzip")
    v1 = records("lat-v1", 30, T0)
    produce(broker, KP_V1, topic, v1, "none")
    written += [(KP_V1, r) for r in v1]
    after = int(time.time() * 1000)
    for reader in (MODERN, RD_V0, KP_V1):
        got = consume(broker, reader, topic, len(written))
        assert [(key, value) for _, key, value, _, _ in got] == [(k, v) for _, (k, v, _, _) in written]
        stamps = {ts for _, _, _, ts, _ in got}
        if MAGIC[reader] == 0:
            assert stamps == {None}, f"{reader} reader"
        else:
            # The broker's append time, not the producers' (T0 is a minute
            # before `before`), whatever format the record came in.
            assert all(before <= ts <= after for ts in stamps), f"{reader} reader: {stamps} not in [{before}, {after}]"


def legacy_set(magic: int, values: list[bytes]) -> bytes:
    """An uncompressed magic 0/1 message set, as kafka-python writes it."""
    b = LegacyRecordBatchBuilder(magic=magic, compression_type=0, batch_size=1 << 20)
    for i, v in enumerate(values):
        b.append(i, timestamp=T0 + i, key=None, value=v)
    return bytes(b.build())


@pytest.mark.parametrize("version,magic", [(0, 0), (1, 0), (2, 1)])
def test_a_damaged_old_message_set_is_refused_for_its_partition_only(broker, topic, version, magic):
    clients.create_topic(broker.bootstrap, topic, 2)
    good = legacy_set(magic, [b"a", b"b"])
    bad = bytearray(good)
    bad[-1] ^= 0x01  # inside the last message's value: its CRC no longer matches
    with kwire.Conn(broker.host, broker.port) as c:
        got = c.produce(topic, {0: bytes(bad), 1: good}, version=version)
        assert got == {0: (kwire.ERR_CORRUPT_MESSAGE, -1), 1: (kwire.ERR_NONE, 0)}
        # Nothing of the refused set was written; the connection still serves.
        assert c.produce(topic, {0: good}, version=version) == {0: (kwire.ERR_NONE, 0)}
        # A v2 batch in an old request is accepted too, as Kafka does.
        batch = kwire.record_batch([kwire.Record(key=None, value=b"c")])
        assert c.produce(topic, {0: batch}, version=version) == {0: (kwire.ERR_NONE, 2)}


def read_group(broker, kind: str, topic: str, group: str, expected: int, timeout: float = 60.0) -> list:
    """An old consumer in `group` (subscribe, earliest when nothing is
    committed) reads `expected` records, commits them and leaves."""
    c = Consumer({**rd_config(broker, kind), "group.id": group, "auto.offset.reset": "earliest",
                  "enable.auto.commit": False})
    try:
        c.subscribe([topic])
        out = []
        deadline = time.monotonic() + timeout
        while len(out) < expected and time.monotonic() < deadline:
            for m in c.consume(num_messages=1000, timeout=1.0):
                if m.error() is not None:
                    raise AssertionError(f"{kind} consumer: {m.error()}")
                out.append((m.key(), m.value()))
        assert len(out) == expected, f"{kind} group consumer read {len(out)} of {expected}"
        c.commit(asynchronous=False)
        return out
    finally:
        c.close()


def test_an_old_consumer_group_starts_at_earliest_then_resumes_from_its_commit(broker, topic):
    # librdkafka 0.9.0 resolves "earliest" with ListOffsets v0 and keeps its
    # position with the v0-era group APIs.
    clients.create_topic(broker.bootstrap, topic, 1)
    group = f"old-group-{uuid.uuid4().hex[:8]}"
    first = records("first", 50, T0)
    produce(broker, MODERN, topic, first)
    assert read_group(broker, RD_V0, topic, group, len(first)) == [(k, v) for k, v, _, _ in first]
    second = records("second", 10, T0)
    produce(broker, RD_V0, topic, second)
    assert read_group(broker, RD_V0, topic, group, len(second)) == [(k, v) for k, v, _, _ in second]
