"""confluent-kafka (the newest librdkafka from PyPI): idempotent producer,
assign()-based consumer, ListOffsets by timestamp."""

from __future__ import annotations

import time
import uuid

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import OffsetSpec

import clients
import kwire

IDEMPOTENT_RECORDS = 100_000


def consumer(broker, **extra) -> Consumer:
    # librdkafka insists on a group.id even for assign(); nothing is committed.
    conf = {
        **clients.RDKAFKA, "bootstrap.servers": broker.bootstrap,
        "group.id": f"assign-only-{uuid.uuid4().hex[:8]}",
        "enable.auto.commit": False,
        "enable.partition.eof": True,
        "auto.offset.reset": "error",
    }
    conf.update(extra)
    return Consumer(conf)


def read_partitions(broker, topic: str, partitions: int, expected: int, timeout: float = 120.0):
    """Reads every partition from the beginning until EOF on all of them and
    `expected` records in total. Returns the messages in arrival order."""
    c = consumer(broker)
    try:
        c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
        out = []
        eof: set[int] = set()
        deadline = time.monotonic() + timeout
        while (len(eof) < partitions or len(out) < expected) and time.monotonic() < deadline:
            for m in c.consume(num_messages=5000, timeout=1.0):
                err = m.error()
                if err is None:
                    out.append(m)
                    eof.discard(m.partition())
                elif err.code() == KafkaError._PARTITION_EOF:
                    eof.add(m.partition())
                else:
                    raise AssertionError(f"consume error: {err}")
        assert len(eof) == partitions, f"EOF seen on partitions {sorted(eof)} only, read {len(out)}"
        return out
    finally:
        c.close()


def test_idempotent_producer_then_assign_consumer_reads_all_exactly_once(broker, topic):
    partitions = 4
    clients.create_topic(broker.bootstrap, topic, partitions)
    p = Producer({
        **clients.RDKAFKA, "bootstrap.servers": broker.bootstrap,
        "enable.idempotence": True,
        "acks": "all",
        "linger.ms": 5,
        "message.timeout.ms": 120_000,
    })
    delivered: dict[int, tuple[int, int]] = {}
    errors = []

    def on_delivery(err, msg):
        if err is not None:
            errors.append(err)
        else:
            delivered[int(msg.value()[:6])] = (msg.partition(), msg.offset())

    for i in range(IDEMPOTENT_RECORDS):
        while True:
            try:
                p.produce(topic, key=b"k%d" % (i % 997), value=b"%06d-payload" % i, on_delivery=on_delivery)
                break
            except BufferError:
                p.poll(0.05)
        if i % 1000 == 0:
            p.poll(0)
    assert p.flush(120) == 0, "records still undelivered after flush"
    assert not errors, f"{len(errors)} delivery errors, first: {errors[0]}"
    assert len(delivered) == IDEMPOTENT_RECORDS

    # Offsets the broker acknowledged are unique and dense per partition.
    per_partition: dict[int, list[int]] = {}
    for part, off in delivered.values():
        per_partition.setdefault(part, []).append(off)
    for part, offs in per_partition.items():
        assert sorted(offs) == list(range(len(offs))), f"partition {part}: acknowledged offsets not dense from 0"

    msgs = read_partitions(broker, topic, partitions, IDEMPOTENT_RECORDS)
    seen: dict[int, tuple[int, int]] = {}
    for m in msgs:
        seq = int(m.value()[:6])
        assert seq not in seen, f"record {seq} read twice: at {seen[seq]} and {(m.partition(), m.offset())}"
        seen[seq] = (m.partition(), m.offset())
        assert m.key() == b"k%d" % (seq % 997)
    assert len(seen) == IDEMPOTENT_RECORDS
    assert seen == delivered, "records read at other positions than acknowledged"

    # The stored batches carry the producer id and sequence numbers.
    with kwire.Conn(broker.host, broker.port) as conn:
        for part in range(partitions):
            _err, _hw, data = conn.fetch(topic, part, 0, max_bytes=64 * 1024)
            batches = kwire.parse_batches(data)
            assert batches, f"partition {part}: nothing fetched at offset 0"
            assert batches[0].producer_id >= 0 and batches[0].base_sequence == 0, batches[0]


def test_offsets_for_times_and_list_offsets(broker, topic):
    partitions = 2
    n = 20
    clients.create_topic(broker.bootstrap, topic, partitions)
    t0 = int(time.time() * 1000) - 3_600_000
    # Increasing timestamps, except one record far ahead (the max timestamp).
    stamps = [t0 + 1000 * i for i in range(n)]
    stamps[7] = t0 + 500_000
    p = Producer({**clients.RDKAFKA, "bootstrap.servers": broker.bootstrap, "acks": "all", "linger.ms": 0})
    for part in range(partitions):
        for i, ts in enumerate(stamps):
            p.produce(topic, partition=part, key=b"%d" % i, value=b"v%d" % i, timestamp=ts + part)
        p.flush(30)  # one partition at a time keeps each partition's offsets = i
    assert p.flush(30) == 0

    def expected_offset(part: int, target: int) -> int:
        for i, ts in enumerate(stamps):
            if ts + part >= target:
                return i
        return -1  # no such record: Kafka answers offset -1

    targets = [t0 - 10_000, t0, t0 + 1, t0 + 3000, t0 + 6500, t0 + 8000, t0 + 19_000, t0 + 400_000,
               t0 + 500_000, t0 + 500_001]
    c = consumer(broker)
    try:
        for target in targets:
            got = c.offsets_for_times([TopicPartition(topic, part, target) for part in range(partitions)], timeout=30)
            for tp in got:
                assert tp.error is None, tp.error
                assert tp.offset == expected_offset(tp.partition, target), (
                    f"partition {tp.partition} timestamp {target - t0:+d}: offset {tp.offset}, "
                    f"expected {expected_offset(tp.partition, target)}"
                )
        for part in range(partitions):
            assert c.get_watermark_offsets(TopicPartition(topic, part), timeout=30) == (0, n)
    finally:
        c.close()

    # The records keep the producer's timestamps (CreateTime).
    msgs = read_partitions(broker, topic, partitions, partitions * n)
    for m in msgs:
        ts_type, ts = m.timestamp()
        assert ts_type == 1 and ts == stamps[m.offset()] + m.partition(), (m.partition(), m.offset(), ts)

    # ListOffsets through the AdminClient: earliest, latest, max timestamp, by timestamp.
    a = clients.admin(broker.bootstrap)
    specs = {
        "earliest": (OffsetSpec.earliest(), lambda part: 0),
        "latest": (OffsetSpec.latest(), lambda part: n),
        "max_timestamp": (OffsetSpec.max_timestamp(), lambda part: 7),
        "for_timestamp": (OffsetSpec.for_timestamp(t0 + 3000), lambda part: 3),
    }
    for name, (spec, want) in specs.items():
        req = {TopicPartition(topic, part): spec for part in range(partitions)}
        for tp, fut in a.list_offsets(req, request_timeout=30).items():
            info = fut.result(timeout=30)
            assert info.offset == want(tp.partition), f"{name} partition {tp.partition}: {info.offset}"
            if name == "max_timestamp":
                assert info.timestamp == stamps[7] + tp.partition
