"""Damage inside data the broker had flushed is refused, never cut
(issue 18 item 3, ADR 0001): the repro from the issue, on the real binary.

2,000 records acknowledged (acks=all), SIGTERM (the clean close flushes the
log and writes a checkpoint that says so), 100 bytes cut off the end of the
partition's `.log`, restart: the partition must not serve and must not take
writes (a new write acknowledged at offset 0 would reuse offsets of
acknowledged records), the broker says so in one log line with the file and
position, the bytes on disk are left as they were, and the rest of the node
serves."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest
from confluent_kafka import Producer

import clients
import kwire

pytestmark = [pytest.mark.managed,
              pytest.mark.skipif(os.environ.get("HELIX_TEST_KAFKA_LIBS") is not None,
                                 reason="Helix's data directory layout and ADR 0001's policy")]

KAFKA_STORAGE_ERROR = 56


def produce(bootstrap: str, topic: str, n: int) -> None:
    p = Producer({**clients.RDKAFKA, "bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5})
    acked = []
    for i in range(n):
        p.produce(topic, value=b"%06d" % i, partition=0,
                  on_delivery=lambda err, msg: acked.append(err is None))
    assert p.flush(60) == 0
    assert len(acked) == n and all(acked)


def test_a_log_cut_inside_flushed_data_is_refused_and_the_node_serves_the_rest(fresh_broker, topic):
    b = fresh_broker
    clients.create_topic(b.bootstrap, topic, 1)
    produce(b.bootstrap, topic, 2000)
    assert b.stop() == 0, "clean SIGTERM"
    logs = sorted((b.data_dir / "topics").glob("*/0/wal/*.log"))
    assert len(logs) == 1, logs
    victim = logs[0]
    before = victim.stat().st_size
    os.truncate(victim, before - 100)

    b.start()
    with kwire.Conn(b.host, b.port) as conn:
        batch = kwire.record_batch([kwire.Record(key=None, value=b"after-damage")])
        answers = conn.produce(topic, {0: batch}, acks=-1, timeout_ms=5000)
        assert answers[0][0] == KAFKA_STORAGE_ERROR, f"a write to the damaged partition: {answers}"
        err, _, _ = conn.fetch(topic, 0, 0)
        assert err == KAFKA_STORAGE_ERROR, f"a fetch from the damaged partition: error {err}"
    assert victim.stat().st_size == before - 100, "recovery changed the damaged log"
    log = b.log.read_text(errors="replace")
    refused = [line for line in log.splitlines() if "replica refused" in line]
    assert len(refused) == 1, f"one line naming the damage:\n{b.log_tail()}"
    assert str(victim) in refused[0] and f"position={before - 100}" in refused[0], refused[0]
    assert "torn or corrupt tail cut" not in log

    # The rest of the node serves: a new topic takes writes and reads them.
    other = topic + "-ok"
    clients.create_topic(b.bootstrap, other, 1)
    produce(b.bootstrap, other, 10)
    with kwire.Conn(b.host, b.port) as conn:
        deadline = time.monotonic() + 10
        while True:
            err, hw, _ = conn.fetch(other, 0, 0)
            if (err, hw) == (kwire.ERR_NONE, 10) or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        assert (err, hw) == (kwire.ERR_NONE, 10)


def test_damage_found_by_the_scrubber_stops_writes_and_reads_before_it_still_work(tmp_path, topic):
    """Issue 18 item 4: flipped bytes inside a sealed segment. The scrubber
    finds them without any consumer reading; from then on the partition
    acknowledges nothing more (offsets past damage could never be read),
    says so in one log line, and still serves what lies before the damage."""
    import harness
    b = harness.HelixBroker(harness.helix_binary(), tmp_path / "broker",
                            ["--scrub-bytes-per-second", "100000000"])
    b.start()
    try:
        clients.create_topic(b.bootstrap, topic, 1, config={"segment.bytes": "4096"})
        p = Producer({**clients.RDKAFKA, "bootstrap.servers": b.bootstrap, "acks": "all", "linger.ms": 0,
                      "max.in.flight.requests.per.connection": 1})
        for i in range(200):
            p.produce(topic, value=b"%06d" % i + b"x" * 100, partition=0)
            p.poll(0)
            if i % 10 == 9:
                assert p.flush(30) == 0
        assert p.flush(30) == 0
        assert b.stop() == 0
        logs = sorted((b.data_dir / "topics").glob("*/0/wal/*.log"))
        assert len(logs) > 2, f"expected several segments: {logs}"
        first = logs[0]
        raw = bytearray(first.read_bytes())
        at = len(raw) * 3 // 4
        raw[at] ^= 0x5A
        first.write_bytes(bytes(raw))

        b.start()
        deadline = time.monotonic() + 30
        while "damaged data found on read" not in b.log.read_text(errors="replace"):
            assert time.monotonic() < deadline, f"the scrubber did not find the damage\n{b.log_tail()}"
            time.sleep(0.2)
        found = [line for line in b.log.read_text(errors="replace").splitlines()
                 if "damaged data found on read" in line]
        assert len(found) == 1 and str(first) in found[0], found
        with kwire.Conn(b.host, b.port) as conn:
            batch = kwire.record_batch([kwire.Record(key=None, value=b"after-damage")])
            answers = conn.produce(topic, {0: batch}, acks=-1, timeout_ms=5000)
            assert answers[0][0] == KAFKA_STORAGE_ERROR, f"a write after damage was found: {answers}"
            err, _hw, data = conn.fetch(topic, 0, 0)
            assert err == kwire.ERR_NONE and data, f"the bytes before the damage are not served: error {err}"
            first_value = kwire.decode_records(kwire.parse_batches(data)[0])[0].value
            assert first_value.startswith(b"000000"), first_value
    finally:
        b.stop()


def produce_batches(bootstrap: str, topic: str, partition: int, n: int) -> None:
    """n records, ten to a batch, ~1 kB a batch: several 4 kB segments."""
    p = Producer({**clients.RDKAFKA, "bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 0})
    acked = []
    for i in range(n):
        p.produce(topic, value=b"%06d" % i + b"x" * 100, partition=partition,
                  on_delivery=lambda err, msg: acked.append(err is None))
        if i % 10 == 9:
            assert p.flush(30) == 0
    assert p.flush(30) == 0
    assert len(acked) == n and all(acked)


def _cut_active_log(wal: Path) -> Path:
    victim = sorted(wal.glob("*.log"))[-1]
    os.truncate(victim, victim.stat().st_size - 100)
    return victim


def _flip_entries_slot(wal: Path) -> Path:
    victim = sorted(wal.glob("*.entries"))[-1]
    raw = bytearray(victim.read_bytes())
    raw[20] ^= 0x10  # the active segment's first entry record (48 bytes each): it always has one
    victim.write_bytes(bytes(raw))
    return sorted(wal.glob("*.log"))[-1]


def _cut_sealed_log(wal: Path) -> Path:
    victim = sorted(wal.glob("*.log"))[0]
    os.truncate(victim, victim.stat().st_size - 100)
    return victim


@pytest.mark.parametrize("damage", [_cut_active_log, _flip_entries_slot, _cut_sealed_log],
                         ids=["active-log-cut", "entries-slot", "sealed-log-cut"])
def test_damage_at_each_place_refuses_that_partition_and_clients_use_the_rest(fresh_broker, topic, damage):
    """Damage injected into a stopped broker's files at each place inside
    what it had flushed: the damaged partition is refused (no write is
    acknowledged at a reused offset), one log line names the file, and
    confluent-kafka and kcat produce and consume the node's other
    partition as before."""
    b = fresh_broker
    clients.create_topic(b.bootstrap, topic, 2, config={"segment.bytes": "4096"})
    produce_batches(b.bootstrap, topic, 0, 200)
    produce_batches(b.bootstrap, topic, 1, 50)
    assert b.stop() == 0, "clean SIGTERM"
    wal = next((b.data_dir / "topics").glob("*/0/wal"))
    assert len(list(wal.glob("*.log"))) > 2
    named = damage(wal)

    b.start()
    with kwire.Conn(b.host, b.port) as conn:
        batch = kwire.record_batch([kwire.Record(key=None, value=b"after-damage")])
        answers = conn.produce(topic, {0: batch}, acks=-1, timeout_ms=5000)
        assert answers[0][0] == KAFKA_STORAGE_ERROR, f"a write to the damaged partition: {answers}"
    log = b.log.read_text(errors="replace")
    refused = [line for line in log.splitlines() if "replica refused" in line]
    assert len(refused) == 1 and str(named.parent) in refused[0], f"{refused}\n{b.log_tail()}"
    assert "torn or corrupt tail cut" not in log
    assert sum(str(named) in line for line in log.splitlines()) == 1, "the damage is told once"

    # confluent-kafka: a producer with a short timeout gets the storage error.
    p = Producer({**clients.RDKAFKA, "bootstrap.servers": b.bootstrap, "acks": "all",
                  "message.timeout.ms": 3000})
    errs: list = []
    p.produce(topic, value=b"refused", partition=0, on_delivery=lambda err, msg: errs.append(err))
    p.flush(20)
    assert len(errs) == 1 and errs[0] is not None, errs

    # The other partition: confluent-kafka produces, kcat reads everything.
    produce_batches(b.bootstrap, topic, 1, 20)
    out = subprocess.run(["kcat", "-b", b.bootstrap, "-C", "-t", topic, "-p", "1", "-o", "beginning", "-e",
                          "-f", "%s\\n"], capture_output=True, timeout=60)
    assert out.returncode == 0, out.stderr
    values = out.stdout.decode().split()
    assert len(values) == 70 and values[0].startswith("000000") and values[-1].startswith("000019"), values[-3:]
