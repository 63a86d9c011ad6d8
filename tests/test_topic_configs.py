"""Topic configs through confluent-kafka's AdminClient: every Kafka name
known, validated, shown by DescribeConfigs with Kafka's defaults, and taking
effect (LogAppendTime, timestamp bounds, segment.ms, retention, size);
DeleteRecords moves the log start offset."""

from __future__ import annotations

import time

import pytest
from confluent_kafka import (TIMESTAMP_CREATE_TIME, TIMESTAMP_LOG_APPEND_TIME, Consumer, KafkaError, KafkaException,
                             Producer, TopicPartition)
from confluent_kafka.admin import (AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic, OffsetSpec)

from kafka import KafkaProducer

import clients
import javalibs
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


def earliest_offset(bootstrap: str, topic: str) -> int:
    """Partition 0's log start offset (ListOffsets earliest)."""
    a = clients.admin(bootstrap)
    (fut,) = a.list_offsets({TopicPartition(topic, 0): OffsetSpec.earliest()}, request_timeout=30).values()
    return fut.result(timeout=30).offset


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
    assert earliest_offset(broker.bootstrap, topic) == 4
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
    assert earliest_offset(broker.bootstrap, topic) == 0
    set_config(broker.bootstrap, topic, "retention.ms", "60000")  # records are an hour old
    deadline = time.monotonic() + 90
    while earliest_offset(broker.bootstrap, topic) == 0 and time.monotonic() < deadline:
        time.sleep(1)
    start = earliest_offset(broker.bootstrap, topic)
    assert start > 0, "retention.ms lowered on a live topic deleted nothing within 90 s"
    a = clients.admin(broker.bootstrap)
    (fut,) = a.list_offsets({TopicPartition(topic, 0): OffsetSpec.latest()}, request_timeout=30).values()
    assert fut.result(timeout=30).offset == 60
    with kwire.Conn(broker.host, broker.port) as conn:
        assert conn.fetch(topic, 0, 0, max_wait_ms=0)[0] == 1  # OFFSET_OUT_OF_RANGE: deleted
        if start < 60:  # whatever the broker kept starts exactly at the log start
            (first, *_rest) = conn.fetch_all(topic, 0, 60, start_offset=start)
            assert first.base_offset == start


# Kafka 3.9's topic configs and their defaults, as a Kafka 3.9.1 broker
# describes a new topic (min.insync.replicas aside: Helix's default is the
# majority of the replicas, 1 for one replica, ADR 0014).
KAFKA_TOPIC_CONFIGS = {
    "cleanup.policy": "delete", "compression.gzip.level": "-1", "compression.lz4.level": "9",
    "compression.type": "producer", "compression.zstd.level": "3", "delete.retention.ms": "86400000",
    "file.delete.delay.ms": "60000", "flush.messages": "9223372036854775807",
    "flush.ms": "9223372036854775807", "follower.replication.throttled.replicas": "",
    "index.interval.bytes": "4096", "leader.replication.throttled.replicas": "",
    "local.retention.bytes": "-2", "local.retention.ms": "-2",
    "max.compaction.lag.ms": "9223372036854775807", "max.message.bytes": "1048588",
    "message.downconversion.enable": "true", "message.format.version": "3.0-IV1",
    "message.timestamp.after.max.ms": "9223372036854775807",
    "message.timestamp.before.max.ms": "9223372036854775807",
    "message.timestamp.difference.max.ms": "9223372036854775807", "message.timestamp.type": "CreateTime",
    "min.cleanable.dirty.ratio": "0.5", "min.compaction.lag.ms": "0", "min.insync.replicas": "1",
    "preallocate": "false", "remote.log.copy.disable": "false", "remote.log.delete.on.disable": "false",
    "remote.storage.enable": "false", "retention.bytes": "-1", "retention.ms": "604800000",
    "segment.bytes": "1073741824", "segment.index.bytes": "10485760", "segment.jitter.ms": "0",
    "segment.ms": "604800000", "unclean.leader.election.enable": "false",
}


def test_every_kafka_topic_config_is_described_with_kafkas_default(broker, topic):
    clients.create_topic(broker.bootstrap, topic, 1)
    configs = describe(broker.bootstrap, topic)
    assert set(configs) == set(KAFKA_TOPIC_CONFIGS), set(configs) ^ set(KAFKA_TOPIC_CONFIGS)
    for name, default in KAFKA_TOPIC_CONFIGS.items():
        entry = configs[name]
        assert entry.value == default, (name, entry.value)
        assert not entry.is_read_only, name
        if name != "min.insync.replicas":  # a broker setting in the managed Kafka
            assert entry.source == 5, (name, entry.source)  # DEFAULT_CONFIG


@pytest.mark.parametrize("name,value,default", [
    ("flush.messages", "1", "9223372036854775807"),
    ("preallocate", "true", "false"), ("unclean.leader.election.enable", "true", "false"),
    ("leader.replication.throttled.replicas", "0:1", ""),
])
def test_a_value_helix_does_not_apply_is_refused_and_kafkas_default_accepted(broker, topic, name, value, default):
    clients.create_topic(broker.bootstrap, topic, 1)
    set_config(broker.bootstrap, topic, name, default)
    entry = describe(broker.bootstrap, topic)[name]
    assert (entry.value, entry.source) == (default, 1), entry  # set, to Kafka's default
    if broker.kind == "kafka":
        return  # Kafka applies them all
    with pytest.raises(KafkaException) as exc:
        set_config(broker.bootstrap, topic, name, value)
    err = exc.value.args[0]
    assert err.code() == KafkaError.INVALID_CONFIG, err
    assert "Helix does not support" in err.str(), err.str()
    assert describe(broker.bootstrap, topic)[name].value == default


@pytest.mark.parametrize("name,value", [
    ("message.format.version", "0.10.0.0"), ("message.format.version", "2.8-IV1"),
    ("message.downconversion.enable", "false"), ("message.timestamp.difference.max.ms", "3600000"),
])
def test_deprecated_configs_are_accepted_and_described_as_kafka_39_does(broker, topic, name, value):
    """Issue 30 item 5: Kafka 3.9 accepts these (message.format.version is
    ignored since inter-broker protocol 3.0) and describes the value set."""
    clients.create_topic(broker.bootstrap, topic, 1)
    set_config(broker.bootstrap, topic, name, value)
    entry = describe(broker.bootstrap, topic)[name]
    assert (entry.value, entry.source) == (value, 1), entry
    # The legacy AlterConfigs (the whole set) takes it too.
    a = clients.admin(broker.bootstrap)
    (fut,) = a.alter_configs([ConfigResource("TOPIC", topic, set_config={name: value})],
                             request_timeout=30).values()
    fut.result(timeout=30)
    assert describe(broker.bootstrap, topic)[name].value == value


def test_an_invalid_message_format_version_is_refused(broker, topic):
    clients.create_topic(broker.bootstrap, topic, 1)
    with pytest.raises(KafkaException) as exc:
        set_config(broker.bootstrap, topic, "message.format.version", "0.10")
    assert exc.value.args[0].code() == KafkaError.INVALID_CONFIG, exc.value.args[0]


def test_the_deprecated_timestamp_difference_bounds_produce_as_on_kafka(broker, topic):
    """Kafka 3.9 uses message.timestamp.difference.max.ms for before/after
    when those are left at their defaults."""
    clients.create_topic(broker.bootstrap, topic, 1)
    set_config(broker.bootstrap, topic, "message.timestamp.difference.max.ms", "60000")
    now = int(time.time() * 1000)
    reports = _deliver(broker.bootstrap, topic, [(b"old", now - 3_600_000), (b"now", now)])
    assert reports[0][0] is not None and reports[0][0].code() == KafkaError.INVALID_TIMESTAMP, reports[0]
    assert reports[1][0] is None, reports[1]


def _deliver(bootstrap: str, topic: str, records: list[tuple[bytes, int | None]]) -> list:
    """Produces each (value, timestamp) in its own batch; returns the delivery
    reports (error, timestamp, offset) in order."""
    p = Producer({**clients.RDKAFKA, "bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 0,
                  "retries": 0, "message.timeout.ms": 20_000})
    reports: list = []
    for value, ts in records:
        kw = {"timestamp": ts} if ts is not None else {}
        p.produce(topic, value=value, partition=0,
                  on_delivery=lambda err, msg: reports.append((err, msg.timestamp(), msg.offset())), **kw)
        p.flush(30)
    assert len(reports) == len(records), "missing delivery reports"
    return reports


def _consume(bootstrap: str, topic: str, n: int) -> list:
    c = Consumer({**clients.RDKAFKA, "bootstrap.servers": bootstrap, "group.id": f"g-{topic}",
                  "enable.auto.commit": False})
    try:
        c.assign([TopicPartition(topic, 0, 0)])
        out = []
        deadline = time.monotonic() + 30
        while len(out) < n and time.monotonic() < deadline:
            m = c.poll(1)
            if m is not None and m.error() is None:
                out.append(m)
        assert len(out) == n, f"read {len(out)} of {n}"
        return out
    finally:
        c.close()


def test_log_append_time_stamps_the_brokers_clock(broker, topic):
    """message.timestamp.type=LogAppendTime: the producer's timestamps are
    replaced by the broker's clock, reported in the produce answer (to
    librdkafka and kafka-python), read by consumers as LOG_APPEND_TIME and
    found by ListOffsets by time; switching back keeps producer times."""
    clients.create_topic(broker.bootstrap, topic, 1, config={"message.timestamp.type": "LogAppendTime"})
    before = int(time.time() * 1000)
    reports = _deliver(broker.bootstrap, topic, [(b"a", 1000), (b"b", 1001), (b"c", None)])
    kp = KafkaProducer(bootstrap_servers=broker.bootstrap, acks="all")
    md = kp.send(topic, value=b"d", partition=0, timestamp_ms=1002).get(timeout=30)
    kp.close()
    after = int(time.time() * 1000)
    assert [r[0] for r in reports] == [None] * 3, reports
    assert [r[2] for r in reports] == [0, 1, 2]
    for _, (kind, ts), _ in reports:
        assert kind == TIMESTAMP_LOG_APPEND_TIME and before <= ts <= after, (kind, ts, before, after)
    assert md.offset == 3 and before <= md.timestamp <= after, md

    msgs = _consume(broker.bootstrap, topic, 4)
    for m, expect in zip(msgs, [r[1][1] for r in reports] + [md.timestamp]):
        assert m.timestamp() == (TIMESTAMP_LOG_APPEND_TIME, expect), (m.offset(), m.timestamp())

    c = Consumer({**clients.RDKAFKA, "bootstrap.servers": broker.bootstrap, "group.id": f"t-{topic}"})
    try:
        (early,) = c.offsets_for_times([TopicPartition(topic, 0, 1500)], timeout=30)
        (late,) = c.offsets_for_times([TopicPartition(topic, 0, after + 60_000)], timeout=30)
    finally:
        c.close()
    # Producer time 1000..1002 is gone: every record is at or after `before`.
    assert early.offset == 0, early
    assert late.offset == -1, late

    set_config(broker.bootstrap, topic, "message.timestamp.type", "CreateTime")
    deadline = time.monotonic() + 20
    while True:  # Kafka applies a config change asynchronously
        (report,) = _deliver(broker.bootstrap, topic, [(b"e", 5000)])
        if report[1] == (TIMESTAMP_CREATE_TIME, 5000) or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert report[0] is None and report[1] == (TIMESTAMP_CREATE_TIME, 5000), report


def test_timestamps_outside_the_topic_bounds_are_refused(broker, topic):
    clients.create_topic(broker.bootstrap, topic, 1, config={"message.timestamp.before.max.ms": "60000",
                                                            "message.timestamp.after.max.ms": "60000"})
    now = int(time.time() * 1000)
    reports = _deliver(broker.bootstrap, topic, [(b"old", now - 3_600_000), (b"now", None),
                                                 (b"future", now + 3_600_000), (b"recent", now - 1000)])
    codes = [r[0].code() if r[0] else None for r in reports]
    assert codes == [KafkaError.INVALID_TIMESTAMP, None, KafkaError.INVALID_TIMESTAMP, None], reports
    assert [m.value() for m in _consume(broker.bootstrap, topic, 2)] == [b"now", b"recent"]


def test_segment_ms_rolls_the_active_segment(broker, topic):
    """segment.ms: the segment holding hour-old records is sealed at the first
    append after a second, so lowering retention.ms deletes it (retention
    takes whole sealed segments), while without the roll it could not."""
    if broker.kind == "kafka" and not broker.managed:
        pytest.skip("an external Kafka's retention check interval is unknown (the managed one uses 1 s)")
    clients.create_topic(broker.bootstrap, topic, 1, config={"segment.ms": "1000"})
    old = int(time.time() * 1000) - 3_600_000
    _deliver(broker.bootstrap, topic, [(b"old-%d" % i, old) for i in range(5)])
    time.sleep(1.5)
    (report,) = _deliver(broker.bootstrap, topic, [(b"new", None)])
    assert report[0] is None and report[2] == 5, report
    assert earliest_offset(broker.bootstrap, topic) == 0
    set_config(broker.bootstrap, topic, "retention.ms", "60000")
    deadline = time.monotonic() + 90
    while earliest_offset(broker.bootstrap, topic) == 0 and time.monotonic() < deadline:
        time.sleep(0.5)
    assert earliest_offset(broker.bootstrap, topic) == 5, "the rolled segment of hour-old records was not deleted"


def kafka_configs(bootstrap: str, *args: str) -> tuple[int, str]:
    """Kafka 3.9.1's kafka-configs tool (kafka.admin.ConfigCommand, in the
    kafka_2.13 artifact from Maven Central)."""
    libs = javalibs.maven_libs("kafka_2.13", "3.9.1")
    proc = javalibs.java(f"{libs}/*", "kafka.admin.ConfigCommand", "--bootstrap-server", bootstrap, *args)
    return proc.returncode, proc.stdout.decode(errors="replace") + proc.stderr.decode(errors="replace")


def test_kafka_configs_tool_round_trip(broker, topic):
    clients.create_topic(broker.bootstrap, topic, 1)
    entity = ("--entity-type", "topics", "--entity-name", topic)
    rc, out = kafka_configs(broker.bootstrap, *entity, "--alter", "--add-config",
                            "message.timestamp.type=LogAppendTime,retention.ms=3600000,segment.ms=60000")
    assert rc == 0, out
    rc, out = kafka_configs(broker.bootstrap, *entity, "--describe")
    assert rc == 0, out
    for setting in ("message.timestamp.type=LogAppendTime", "retention.ms=3600000", "segment.ms=60000"):
        assert setting in out, out
    rc, out = kafka_configs(broker.bootstrap, *entity, "--alter", "--delete-config", "retention.ms")
    assert rc == 0, out
    configs = describe(broker.bootstrap, topic)
    assert configs["retention.ms"].source != 1 and configs["segment.ms"].value == "60000", configs
    if broker.kind == "helix":
        rc, out = kafka_configs(broker.bootstrap, *entity, "--alter", "--add-config", "preallocate=true")
        assert rc != 0 and "Helix does not support" in out, out
        rc, out = kafka_configs(broker.bootstrap, *entity, "--alter", "--add-config", "no.such.config=1")
        assert rc != 0 and "no.such.config" in out, out
        assert describe(broker.bootstrap, topic)["preallocate"].value == "false"


@pytest.mark.parametrize("codec,level_config,level,attr", [
    ("uncompressed", None, None, 0), ("gzip", "compression.gzip.level", "9", 1), ("snappy", None, None, 2),
    ("lz4", "compression.lz4.level", "12", 3), ("zstd", "compression.zstd.level", "7", 4),
])
def test_topic_compression_type_recompresses_keeping_offsets_and_timestamps(broker, topic, codec,
                                                                              level_config, level, attr):
    """Issue 30 item 4: CreateTopics with compression.type (and a KIP-390
    level) is accepted; batches the producer sent in another codec are
    stored in the topic's codec with their offsets and timestamps, and every
    client reads them back."""
    config = {"compression.type": codec}
    if level_config:
        config[level_config] = level
    clients.create_topic(broker.bootstrap, topic, 1, config=config)
    produced_with = "zstd" if codec == "uncompressed" else "none"
    p = Producer({**clients.RDKAFKA, "bootstrap.servers": broker.bootstrap, "acks": "all",
                  "compression.type": produced_with, "linger.ms": 20})
    now = int(time.time() * 1000)
    sent = [(f"k{i}".encode(), f"value-{i}".encode() * 20, now - 1000 + i) for i in range(50)]
    delivered: list = []
    for key, value, ts in sent:
        p.produce(topic, key=key, value=value, partition=0, timestamp=ts,
                  on_delivery=lambda err, msg: delivered.append((err, msg.offset())))
    assert p.flush(30) == 0
    assert all(err is None for err, _ in delivered), delivered
    assert sorted(o for _, o in delivered) == list(range(50))
    assert describe(broker.bootstrap, topic)["compression.type"].value == codec
    with kwire.Conn(broker.host, broker.port) as conn:
        batches = conn.fetch_all(topic, 0, 50)
    assert batches and all(b.compression == attr for b in batches), [b.compression for b in batches]
    assert all(b.crc_ok for b in batches)
    c = Consumer({**clients.RDKAFKA, "bootstrap.servers": broker.bootstrap, "group.id": f"{topic}-r",
                  "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    c.assign([TopicPartition(topic, 0, 0)])
    got = []
    deadline = time.monotonic() + 30
    while len(got) < 50 and time.monotonic() < deadline:
        m = c.poll(1.0)
        if m is not None and m.error() is None:
            got.append((m.offset(), m.key(), m.value(), m.timestamp()[1]))
    c.close()
    assert got == [(i, k, v, ts) for i, (k, v, ts) in enumerate(sent)]


@pytest.mark.parametrize("internal", ["__consumer_offsets", "__transaction_state"])
def test_internal_topics_are_described_compacted_as_kafka_creates_them(broker, internal):
    """Kafka 3.9.1 creates both internal topics with `cleanup.policy=compact`,
    `segment.bytes` and `compression.type` as topic overrides (source
    DYNAMIC_TOPIC_CONFIG); Helix bounds their logs by snapshots (ADR 0020)
    and describes them the same way (it described the broker's defaults:
    `delete`, 1 GiB segments)."""
    with kwire.Conn(broker.host, broker.port) as conn:
        # Kafka creates __transaction_state on the first such request.
        kwire.find_coordinator(conn, "describe-internal", key_type=kwire.COORDINATOR_TRANSACTION)
        kwire.find_coordinator(conn, "describe-internal")
    a = clients.admin(broker.bootstrap)
    deadline = time.monotonic() + 30
    while True:
        try:
            (fut,) = a.describe_configs([ConfigResource("TOPIC", internal)], request_timeout=30).values()
            got = fut.result(timeout=30)
            break
        except KafkaException:
            assert time.monotonic() < deadline, f"{internal} never described"
            time.sleep(0.5)
    dynamic = 1  # DYNAMIC_TOPIC_CONFIG
    assert (got["cleanup.policy"].value, got["cleanup.policy"].source) == ("compact", dynamic)
    assert got["segment.bytes"].source == dynamic
    assert got["compression.type"].source == dynamic
