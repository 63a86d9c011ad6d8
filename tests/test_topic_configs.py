"""Topic configs through confluent-kafka's AdminClient: validated, shown by
DescribeConfigs, and taking effect; DeleteRecords moves the log start offset."""

from __future__ import annotations

import time

import pytest
from confluent_kafka import KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import (AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic, OffsetSpec)

import clients
import kwire


def describe(bootstrap: str, topic: str) -> dict[str, ConfigEntry]:
    a = clients.admin(bootstrap)
    (fut,) = a.describe_configs([ConfigResource("TOPIC", topic)], request_timeout=30).values()
    return fut.result(timeout=30)


def set_config(bootstrap: str, topic: str, name: str, value: str) -> None:
    a = clients.admin(bootstrap)
    res = ConfigResource("TOPIC", topic, incremental_configs=[
        ConfigEntry(name, value, incremental_operation=AlterConfigOpType.SET)])
    (fut,) = a.incremental_alter_configs([res], request_timeout=30).values()
    fut.result(timeout=30)


def produce_one(bootstrap: str, topic: str, value: bytes) -> KafkaError | None:
    p = Producer({**clients.RDKAFKA, "bootstrap.servers": bootstrap, "acks": "all", "message.max.bytes": 2_000_000,
                  "message.timeout.ms": 20_000, "retries": 0})
    result: list = []
    p.produce(topic, value=value, on_delivery=lambda err, msg: result.append(err))
    p.flush(30)
    assert len(result) == 1, "no delivery report"
    return result[0]


def test_max_message_bytes_takes_effect_and_can_be_raised(broker, topic):
    clients.create_topic(broker.bootstrap, topic, 1, config={"max.message.bytes": "10000"})
    big = b"x" * 20_000
    err = produce_one(broker.bootstrap, topic, big)
    assert err is not None and err.code() == KafkaError.MSG_SIZE_TOO_LARGE, err
    assert produce_one(broker.bootstrap, topic, b"small") is None

    set_config(broker.bootstrap, topic, "max.message.bytes", "100000")
    entry = describe(broker.bootstrap, topic)["max.message.bytes"]
    assert entry.value == "100000" and entry.source == 1  # DYNAMIC_TOPIC_CONFIG
    deadline = time.monotonic() + 20
    while (err := produce_one(broker.bootstrap, topic, big)) is not None and time.monotonic() < deadline:
        time.sleep(0.5)  # Kafka applies a config change asynchronously
    assert err is None, f"20 kB record still refused after raising max.message.bytes: {err}"


@pytest.mark.parametrize("name,value", [("retention.ms", "not-a-number"), ("no.such.config", "1"),
                                         ("cleanup.policy", "sometimes")])
def test_invalid_config_is_refused_and_changes_nothing(broker, topic, name, value):
    clients.create_topic(broker.bootstrap, topic, 1, config={"retention.ms": "3600000"})
    with pytest.raises(KafkaException) as exc:
        set_config(broker.bootstrap, topic, name, value)
    assert exc.value.args[0].code() == KafkaError.INVALID_CONFIG, exc.value
    configs = describe(broker.bootstrap, topic)
    assert configs["retention.ms"].value == "3600000"
    assert name not in configs or configs[name].value != value

    other = topic + "-new"
    a = clients.admin(broker.bootstrap)
    fut = a.create_topics([NewTopic(other, 1, 1, config={name: value})], operation_timeout=30)[other]
    with pytest.raises(KafkaException) as exc:
        fut.result(timeout=30)
    assert exc.value.args[0].code() == KafkaError.INVALID_CONFIG, exc.value
    assert other not in a.list_topics(timeout=10).topics


def test_delete_records_moves_log_start_offset(broker, topic):
    clients.create_topic(broker.bootstrap, topic, 1)
    p = Producer({**clients.RDKAFKA, "bootstrap.servers": broker.bootstrap, "acks": "all", "linger.ms": 0})
    for i in range(10):
        p.produce(topic, value=b"r%d" % i, partition=0)
        p.flush(30)  # one batch per record, so offset 4 is a batch boundary
    a = clients.admin(broker.bootstrap)
    tp = TopicPartition(topic, 0, 4)
    (fut,) = a.delete_records([tp], request_timeout=30).values()
    assert fut.result(timeout=30).low_watermark == 4
    (fut,) = a.list_offsets({TopicPartition(topic, 0): OffsetSpec.earliest()}, request_timeout=30).values()
    assert fut.result(timeout=30).offset == 4
    with kwire.Conn(broker.host, broker.port) as conn:
        assert conn.fetch(topic, 0, 2, max_wait_ms=0)[0] == 1  # OFFSET_OUT_OF_RANGE below the start
        (first, *_rest) = conn.fetch_all(topic, 0, 10, start_offset=4)
    assert first.base_offset == 4


def test_retention_change_takes_effect(broker, topic):
    """Small segments, then retention.ms lowered on the live topic: the broker
    deletes the old segments (log start offset moves) without a restart."""
    if broker.kind == "kafka" and not broker.managed:
        pytest.skip("an external Kafka's retention check interval is unknown (the managed one uses 1 s)")
    clients.create_topic(broker.bootstrap, topic, 1, config={"segment.bytes": "2048"})
    p = Producer({**clients.RDKAFKA, "bootstrap.servers": broker.bootstrap, "acks": "all", "linger.ms": 0})
    old = int(time.time() * 1000) - 3_600_000
    for i in range(60):
        p.produce(topic, value=b"%03d-" % i + b"r" * 200, partition=0, timestamp=old)
        p.flush(30)
    a = clients.admin(broker.bootstrap)
    tp = TopicPartition(topic, 0)

    def earliest() -> int:
        (fut,) = a.list_offsets({tp: OffsetSpec.earliest()}, request_timeout=30).values()
        return fut.result(timeout=30).offset

    assert earliest() == 0
    set_config(broker.bootstrap, topic, "retention.ms", "60000")  # records are an hour old
    deadline = time.monotonic() + 90
    while earliest() == 0 and time.monotonic() < deadline:
        time.sleep(1)
    start = earliest()
    assert start > 0, "retention.ms lowered on a live topic deleted nothing within 90 s"
    (fut,) = a.list_offsets({tp: OffsetSpec.latest()}, request_timeout=30).values()
    assert fut.result(timeout=30).offset == 60
    with kwire.Conn(broker.host, broker.port) as conn:
        assert conn.fetch(topic, 0, 0, max_wait_ms=0)[0] == 1  # OFFSET_OUT_OF_RANGE: deleted
        if start < 60:  # whatever the broker kept starts exactly at the log start
            (first, *_rest) = conn.fetch_all(topic, 0, 60, start_offset=start)
            assert first.base_offset == start
