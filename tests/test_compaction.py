"""Log compaction (issue 33, ADR 0027) with real clients on a broker that
runs: keyed writes with overwrites and tombstones on a compacted topic with
small segments end up, read from the beginning, as the latest value per key
at its original offset (offsets with gaps); tombstones stay until
delete.retention.ms; the disk use falls; keyless records are refused; kill -9
during and after cleaning keeps the latest value per key.

Each test waits for the cleaner with a deadline (polling what a consumer
reads), never a fixed sleep. Against Kafka (HELIX_TEST_KAFKA_LIBS) the same
tests run on Kafka's own cleaner."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource

import clients
import harness

# Small segments roll often, so most of what is written is sealed and
# cleanable; a dirty ratio near 0 cleans as soon as anything is dirty.
COMPACTED = {
    "cleanup.policy": "compact",
    "segment.bytes": "2048",
    "min.cleanable.dirty.ratio": "0.01",
    "delete.retention.ms": "86400000",
}
KEYS = [f"key-{i}".encode() for i in range(12)]
# How long the cleaner may take to get to a partition (Kafka's backoff is
# 15 s; the Helix broker here backs off 200 ms).
CLEAN_DEADLINE_S = 90


@pytest.fixture
def compacting_broker(tmp_path):
    """A broker of this test's own whose cleaner looks every 200 ms."""
    if harness.external_bootstrap():
        pytest.skip("needs a broker the suite starts")
    libs = os.environ.get("HELIX_TEST_KAFKA_LIBS")
    if libs:
        b: harness.ManagedBroker = harness.KafkaBroker(Path(libs), tmp_path)
    else:
        b = harness.HelixBroker(harness.helix_binary(), tmp_path, extra_args=["--log-cleaner-backoff-ms", "200"])
    b.start()
    try:
        yield b
    finally:
        b.stop()


def producer(bootstrap: str) -> Producer:
    # Small batches, many segments; Kafka refuses a batch larger than
    # segment.bytes (RECORD_LIST_TOO_LARGE).
    return Producer({**clients.RDKAFKA, "bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 0,
                     "batch.size": 1500, "enable.idempotence": True, "message.timeout.ms": 30_000})


def write(bootstrap: str, topic: str, records: list[tuple[bytes | None, bytes | None]]) -> list[int]:
    """Produces `records` (key, value) in order; returns their offsets."""
    p = producer(bootstrap)
    offsets: list[int | None] = [None] * len(records)
    errors: list = []

    def report(i):
        def on_delivery(err, msg):
            if err is not None:
                errors.append(err)
            else:
                offsets[i] = msg.offset()
        return on_delivery

    for i, (k, v) in enumerate(records):
        p.produce(topic, key=k, value=v, on_delivery=report(i))
        p.poll(0)
        if i % 20 == 19:
            p.flush(30)
    assert p.flush(60) == 0, "records undelivered"
    assert not errors, errors[:3]
    assert all(o is not None for o in offsets)
    return offsets  # type: ignore[return-value]


def read_all(bootstrap: str, topic: str) -> list[tuple[int, bytes | None, bytes | None]]:
    """(offset, key, value) of every record from the beginning to the end."""
    a = clients.admin(bootstrap)
    c = Consumer({**clients.RDKAFKA, "bootstrap.servers": bootstrap, "group.id": f"g-{time.time_ns()}",
                  "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    try:
        low, high = c.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)
        c.assign([TopicPartition(topic, 0, low)])
        out: list[tuple[int, bytes | None, bytes | None]] = []
        deadline = time.monotonic() + 30
        while (not out or out[-1][0] < high - 1) and time.monotonic() < deadline:
            for m in c.consume(500, timeout=1):
                if m.error() is None:
                    out.append((m.offset(), m.key(), m.value()))
        assert not out or out[-1][0] == high - 1, f"read up to {out[-1][0] if out else None}, end {high}"
        return out
    finally:
        c.close()
        del a


def latest(records: list[tuple[bytes | None, bytes | None]], offsets: list[int]) -> dict[bytes, tuple[int, bytes | None]]:
    out: dict[bytes, tuple[int, bytes | None]] = {}
    for (k, v), o in zip(records, offsets):
        assert k is not None
        out[k] = (o, v)
    return out


def wait_compacted(bootstrap: str, topic: str, keys: list[bytes], deadline_s: float = CLEAN_DEADLINE_S):
    """Polls until each of `keys` is read exactly once from the beginning;
    returns that read."""
    deadline = time.monotonic() + deadline_s
    seen: list = []
    while time.monotonic() < deadline:
        seen = read_all(bootstrap, topic)
        counts = {k: 0 for k in keys}
        for _, k, _ in seen:
            if k in counts:
                counts[k] += 1
        if all(n == 1 for n in counts.values()):
            return seen
        time.sleep(0.5)
    raise AssertionError(f"not compacted within {deadline_s} s: {len(seen)} records read")


def rounds(n: int, tag: str) -> list[tuple[bytes, bytes]]:
    return [(k, b"%s-%d-%s" % (tag.encode(), r, k)) for r in range(n) for k in KEYS]


def filler(n: int) -> list[tuple[bytes, bytes]]:
    """Writes after the interesting ones, so those end up in sealed
    segments (the active segment is never cleaned)."""
    return [(b"filler-%d" % (i % 3), b"x" * 100) for i in range(n)]


def create_with_dir(broker, topic: str, config: dict[str, str]) -> Path | None:
    """Creates the topic; returns its directory on a Helix broker."""
    topics = Path(broker.data_dir) / "topics"
    before = set(topics.glob("*")) if topics.exists() else set()
    clients.create_topic(broker.bootstrap, topic, 1, config=config)
    if broker.kind != "helix":
        return None
    (new,) = set(topics.glob("*")) - before
    return new


def wal_bytes(topic_dir: Path) -> int:
    return sum(p.stat().st_size for p in topic_dir.rglob("*.log"))


def test_compaction_keeps_the_latest_value_per_key_at_its_offset(compacting_broker, topic):
    b = compacting_broker
    compacted_dir = create_with_dir(b, topic, COMPACTED)
    # The same writes to a topic that is not compacted: the disk use to beat.
    plain_dir = create_with_dir(b, topic + "-plain", {**COMPACTED, "cleanup.policy": "delete"})
    records = rounds(6, "v") + [(KEYS[0], None), (KEYS[1], None)]
    offsets = write(b.bootstrap, topic, records)
    write(b.bootstrap, topic + "-plain", records + filler(60))
    want = latest(records, offsets)
    write(b.bootstrap, topic, filler(60))

    seen = wait_compacted(b.bootstrap, topic, KEYS)
    got = {k: (o, v) for o, k, v in seen if k in want}
    assert got == want, "not the latest value per key at its original offset"
    # Tombstones stay (delete.retention.ms is a day).
    assert got[KEYS[0]][1] is None and got[KEYS[1]][1] is None
    read_offsets = [o for o, _, _ in seen]
    assert read_offsets == sorted(set(read_offsets)), "offsets must increase"
    assert len(read_offsets) < read_offsets[-1] + 1, "no gap: nothing was removed"
    if compacted_dir is not None and plain_dir is not None:
        assert wal_bytes(compacted_dir) < wal_bytes(plain_dir) * 0.7, "the cleaned segments take less disk"

    # What the broker describes.
    a = clients.admin(b.bootstrap)
    (fut,) = a.describe_configs([ConfigResource("TOPIC", topic)], request_timeout=30).values()
    entry = fut.result(timeout=30)["cleanup.policy"]
    assert (entry.value, entry.source) == ("compact", 1), entry

    # What the cleaner reports (ADR 0027 §10).
    if b.kind == "helix":
        from test_operations import scrape, value
        samples = scrape(b.metrics_port)
        labels = {"topic": topic, "partition": "0"}
        assert value(samples, "helix_compaction_partition_bytes_reclaimed_total", **labels) > 0, samples
        assert value(samples, "helix_compaction_last_clean_timestamp_ms", **labels) > 0
        assert value(samples, "helix_compaction_bytes_reclaimed_total") > 0
        assert value(samples, "helix_uncleanable_partitions") == 0
        assert ("helix_compaction_dirty_ratio", tuple(sorted(labels.items()))) in samples


def test_tombstones_go_after_delete_retention_ms(compacting_broker, topic):
    b = compacting_broker
    clients.create_topic(b.bootstrap, topic, 1, config={**COMPACTED, "delete.retention.ms": "2000"})
    records = rounds(3, "v") + [(k, None) for k in KEYS[:4]]
    offsets = write(b.bootstrap, topic, records)
    want = latest(records, offsets)
    write(b.bootstrap, topic, filler(60))
    seen = wait_compacted(b.bootstrap, topic, KEYS)
    assert {k: (o, v) for o, k, v in seen if k in want} == want
    # Later passes (new dirty data) after the horizon remove them.
    deadline = time.monotonic() + CLEAN_DEADLINE_S
    while True:
        write(b.bootstrap, topic, filler(30))
        seen = read_all(b.bootstrap, topic)
        tombstones = [k for _, k, v in seen if k in KEYS[:4]]
        if not tombstones:
            break
        assert time.monotonic() < deadline, f"tombstones still there: {tombstones}"
        time.sleep(1)
    kept = {k: (o, v) for o, k, v in seen if k in want}
    assert kept == {k: w for k, w in want.items() if k not in KEYS[:4]}


def test_tombstones_go_after_a_restart_without_new_writes(compacting_broker, topic):
    """A pass keeps tombstones with a delete horizon; the broker restarts;
    the horizon passes with nothing written: the tombstones go all the
    same (the horizon the pass kept outlives the process)."""
    b = compacting_broker
    if b.kind != "helix":
        pytest.skip("restarts the suite's Helix broker")
    clients.create_topic(b.bootstrap, topic, 1, config={**COMPACTED, "delete.retention.ms": "8000"})
    records = rounds(3, "v") + [(k, None) for k in KEYS[:4]]
    offsets = write(b.bootstrap, topic, records)
    want = latest(records, offsets)
    write(b.bootstrap, topic, filler(60))
    seen = wait_compacted(b.bootstrap, topic, KEYS)
    assert {k: (o, v) for o, k, v in seen if k in want} == want
    b.restart()
    deadline = time.monotonic() + CLEAN_DEADLINE_S
    while True:
        seen = read_all(b.bootstrap, topic)
        tombstones = [k for _, k, v in seen if k in KEYS[:4]]
        if not tombstones:
            break
        assert time.monotonic() < deadline, f"tombstones still there after the restart: {tombstones}"
        time.sleep(1)
    kept = {k: (o, v) for o, k, v in seen if k in want}
    assert kept == {k: w for k, w in want.items() if k not in KEYS[:4]}


def test_several_partitions_cleaned_at_once_each_keep_their_latest_values(tmp_path, topic):
    """log.cleaner.threads=3 with four topics made compacted at once: the
    cleaner takes three in one round, then the fourth; each ends with its
    own latest value per key. A small log.cleaner.io.buffer.size (write
    buffers of 4096 / 3 / 2 bytes, smaller than most entries) changes no
    byte that is read."""
    if harness.external_bootstrap() or os.environ.get("HELIX_TEST_KAFKA_LIBS"):
        pytest.skip("starts a Helix broker with its own cleaner flags")
    b = harness.HelixBroker(harness.helix_binary(), tmp_path / "broker",
                            ["--log-cleaner-backoff-ms", "200", "--log-cleaner-threads", "3",
                             "--log-cleaner-io-buffer-size", "4096"])
    b.start()
    try:
        names = [f"{topic}-{i}" for i in range(4)]
        wants = {}
        for i, name in enumerate(names):
            clients.create_topic(b.bootstrap, name, 1, config={**COMPACTED, "cleanup.policy": "delete"})
            records = rounds(5, f"t{i}") + [(KEYS[i], None)]
            wants[name] = latest(records, write(b.bootstrap, name, records))
            write(b.bootstrap, name, filler(60))
        a = clients.admin(b.bootstrap)
        for fut in a.alter_configs([ConfigResource("TOPIC", n, set_config=COMPACTED) for n in names],
                                   request_timeout=30).values():
            fut.result(timeout=30)
        for name in names:
            seen = wait_compacted(b.bootstrap, name, KEYS)
            assert {k: (o, v) for o, k, v in seen if k in wants[name]} == wants[name], name
        text = b.log.read_text(errors="replace")
        assert "log cleaning failed" not in text
        from test_operations import scrape, value
        samples = scrape(b.metrics_port)
        assert value(samples, "helix_uncleanable_partitions") == 0
        for name in names:
            labels = {"topic": name, "partition": "0"}
            assert value(samples, "helix_compaction_partition_bytes_reclaimed_total", **labels) > 0, name
    finally:
        b.stop()


def test_a_keyless_record_is_refused_on_a_compacted_topic(compacting_broker, topic):
    b = compacting_broker
    clients.create_topic(b.bootstrap, topic, 1, config=COMPACTED)
    p = Producer({**clients.RDKAFKA, "bootstrap.servers": b.bootstrap, "acks": "all", "retries": 0,
                  "message.timeout.ms": 20_000})
    result: list = []
    p.produce(topic, value=b"no key", on_delivery=lambda err, msg: result.append(err))
    p.flush(30)
    # Its own batch: a batch holding a keyless record is refused whole.
    p.produce(topic, key=b"k", value=b"keyed", on_delivery=lambda err, msg: result.append(err))
    p.flush(30)
    assert len(result) == 2
    assert result[0] is not None and result[0].code() == KafkaError.INVALID_RECORD, result[0]
    assert result[1] is None, result[1]


def test_keyless_records_are_named_and_the_rest_of_their_batch_retried(compacting_broker, topic):
    """KIP-467, as librdkafka's own test 0011 (test_message_single_partition_record_fail)
    checks it: the topic becomes compacted by IncrementalAlterConfigs APPEND
    (cleanup.policy "delete" -> "delete,compact"); one batch of 100 records,
    every tenth without a key: the broker names those ten in `record_errors`,
    so the client fails exactly them with INVALID_RECORD and the other 90 with
    _INVALID_DIFFERENT_RECORD (they were in a refused batch, not invalid).
    Before: APPEND was refused and every record failed with INVALID_RECORD."""
    b = compacting_broker
    clients.create_topic(b.bootstrap, topic, 1)
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    resource = ConfigResource("topic", topic, incremental_configs=[
        ConfigEntry("cleanup.policy", "compact", incremental_operation=AlterConfigOpType.APPEND)])
    admin.incremental_alter_configs([resource])[resource].result(30)
    described = admin.describe_configs([ConfigResource("topic", topic)])[ConfigResource("topic", topic)].result(30)
    assert described["cleanup.policy"].value == "delete,compact"
    p = Producer({**clients.RDKAFKA, "bootstrap.servers": b.bootstrap, "acks": "all", "retries": 0,
                  "linger.ms": 1000, "batch.num.messages": 1000, "message.timeout.ms": 20_000})
    result: dict[int, KafkaError | None] = {}
    for i in range(100):
        p.produce(topic, partition=0, value=f"v{i}".encode(), key=None if i % 10 == 0 else f"k{i}".encode(),
                  on_delivery=lambda err, msg, i=i: result.__setitem__(i, err))
    assert p.flush(30) == 0
    assert len(result) == 100
    invalid = sorted(i for i, e in result.items() if e is not None and e.code() == KafkaError.INVALID_RECORD)
    assert invalid == list(range(0, 100, 10)), result
    others = [e.code() if e else None for i, e in result.items() if i % 10 != 0]
    assert set(others) == {KafkaError._INVALID_DIFFERENT_RECORD}, others


def test_kill9_during_and_after_cleaning_keeps_the_latest_value_per_key(compacting_broker, topic):
    b = compacting_broker
    if b.kind != "helix":
        pytest.skip("kill -9 of the suite's Helix broker")
    clients.create_topic(b.bootstrap, topic, 1, config=COMPACTED)
    records = rounds(8, "a")
    offsets = write(b.bootstrap, topic, records)
    write(b.bootstrap, topic, filler(60))
    # Likely mid-pass: the cleaner looks every 200 ms.
    time.sleep(0.3)
    b.restart()
    want = latest(records, offsets)
    seen = read_all(b.bootstrap, topic)
    last = {}
    for o, k, v in seen:
        if k in want:
            last[k] = (o, v)
    assert last == want, "after kill -9 mid-cleaning the latest value per key is what it was"

    seen = wait_compacted(b.bootstrap, topic, KEYS)
    assert {k: (o, v) for o, k, v in seen if k in want} == want
    more = rounds(2, "b")
    more_offsets = write(b.bootstrap, topic, more)
    want = latest(records + more, offsets + more_offsets)
    write(b.bootstrap, topic, filler(60))
    seen = wait_compacted(b.bootstrap, topic, KEYS)
    assert {k: (o, v) for o, k, v in seen if k in want} == want
    b.restart()
    seen = read_all(b.bootstrap, topic)
    assert {k: (o, v) for o, k, v in seen if k in want} == want, "after kill -9 once cleaned"
    assert sum(1 for _, k, _ in seen if k in want) == len(KEYS)


def test_damage_met_while_cleaning_marks_the_replica_damaged(tmp_path, topic):
    """ADR 0027 §4: a segment that fails its checks while the cleaner reads
    it is the damage rule of ADR 0001 (as the scrubber's reads): one ERROR
    line, no more writes, nothing swapped, what lies before still served."""
    if harness.external_bootstrap() or os.environ.get("HELIX_TEST_KAFKA_LIBS"):
        pytest.skip("flips bytes in the suite's Helix broker's files")
    import kwire
    b = harness.HelixBroker(harness.helix_binary(), tmp_path / "broker",
                            ["--scrub-bytes-per-second", "0", "--log-cleaner-enable", "false"])
    b.start()
    try:
        clients.create_topic(b.bootstrap, topic, 1, config=COMPACTED)
        write(b.bootstrap, topic, rounds(4, "v") + filler(40))
        assert b.stop() == 0
        logs = sorted((b.data_dir / "topics").glob("*/0/wal/*.log"))
        assert len(logs) > 3, f"expected several segments: {logs}"
        first = logs[0]
        raw = bytearray(first.read_bytes())
        raw[len(raw) * 3 // 4] ^= 0x5A
        first.write_bytes(bytes(raw))

        b.extra_args = ["--scrub-bytes-per-second", "0", "--log-cleaner-backoff-ms", "200"]
        b.start()
        deadline = time.monotonic() + 30
        while "log cleaning failed" not in b.log.read_text(errors="replace"):
            assert time.monotonic() < deadline, f"the cleaner did not meet the damage\n{b.log_tail()}"
            time.sleep(0.2)
        text = b.log.read_text(errors="replace")
        found = [line for line in text.splitlines() if "damaged data found on read" in line]
        assert len(found) == 1 and str(first) in found[0], found
        assert "log cleaned" not in text, "a pass over damaged data swapped something in"
        from test_operations import scrape, value
        assert value(scrape(b.metrics_port), "helix_uncleanable_partitions") == 1
        with kwire.Conn(b.host, b.port) as conn:
            batch = kwire.record_batch([kwire.Record(key=b"k", value=b"after-damage")])
            answers = conn.produce(topic, {0: batch}, acks=-1, timeout_ms=5000)
            assert answers[0][0] == 56, f"a write after damage was found: {answers}"  # KAFKA_STORAGE_ERROR
            err, _hw, data = conn.fetch(topic, 0, 0)
            assert err == kwire.ERR_NONE and data, f"the bytes before the damage are not served: error {err}"
        assert not list(first.parent.glob("*.cleaned")), "the abandoned pass left files"
    finally:
        b.stop()
