"""Load and checks for the cluster tests: a paced, idempotent producer whose
every acknowledgement is recorded, and a read-back that proves every
acknowledged record is present exactly once, in order, at its offset."""

from __future__ import annotations

import threading
import time
import uuid
from dataclasses import dataclass, field

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, Producer, TopicPartition

import clients


@dataclass
class Acked:
    partition: int
    offset: int
    at: float


@dataclass
class LoadResult:
    acked: dict[int, Acked] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)
    sent: int = 0

    def longest_gap_per_partition(self) -> dict[int, float]:
        """Per partition, the longest time between consecutive acknowledgements
        (that partition's unavailability while the load ran)."""
        times: dict[int, list[float]] = {}
        for a in self.acked.values():
            times.setdefault(a.partition, []).append(a.at)
        gaps = {}
        for p, ts in times.items():
            ts.sort()
            gaps[p] = max((b - a for a, b in zip(ts, ts[1:])), default=0.0)
        return gaps


class PacedProducer(threading.Thread):
    """Produces `rate` records/s round robin over `partitions` for `seconds`,
    idempotent with acks=all; value = sequence number. Retriable errors are
    the client's business; only what is finally acknowledged or failed is
    recorded."""

    def __init__(self, bootstrap: str, topic: str, partitions: int, rate: int, seconds: float,
                 extra: dict | None = None, first_seq: int = 0):
        super().__init__(daemon=True)
        self.first_seq = first_seq
        self.topic = topic
        self.partitions = partitions
        self.rate = rate
        self.seconds = seconds
        self.result = LoadResult()
        self.lock = threading.Lock()
        self.producer = Producer({
            **clients.RDKAFKA, "bootstrap.servers": bootstrap,
            "enable.idempotence": True, "acks": "all", "linger.ms": 2,
            "message.timeout.ms": 120_000, "retry.backoff.ms": 50,
            "topic.metadata.refresh.interval.ms": 1000,
            **(extra or {}),
        })

    def _delivered(self, err, msg) -> None:
        seq = int(msg.value())
        with self.lock:
            if err is not None:
                self.result.errors.append(f"seq {seq}: {err}")
            else:
                self.result.acked[seq] = Acked(msg.partition(), msg.offset(), time.monotonic())

    def run(self) -> None:
        start = time.monotonic()
        seq = 0
        base = self.first_seq
        while True:
            now = time.monotonic()
            if now - start >= self.seconds:
                break
            due = int((now - start) * self.rate)
            while seq < due:
                try:
                    self.producer.produce(self.topic, value=b"%012d" % (base + seq),
                                          partition=seq % self.partitions, on_delivery=self._delivered)
                    seq += 1
                except BufferError:
                    self.producer.poll(0.05)
            self.producer.poll(0.005)
        self.result.sent = seq
        remaining = self.producer.flush(150)
        if remaining:
            self.result.errors.append(f"{remaining} records never answered")


def read_all(bootstrap: str, topic: str, partitions: int, timeout: float = 120.0) -> dict[int, list[tuple[int, bytes]]]:
    """Every record of every partition, from the beginning to the end:
    partition -> [(offset, value)]."""
    c = Consumer({
        **clients.RDKAFKA, "bootstrap.servers": bootstrap,
        "group.id": f"verify-{uuid.uuid4().hex[:8]}", "enable.auto.commit": False,
        "enable.partition.eof": True, "auto.offset.reset": "error",
        "isolation.level": "read_uncommitted",
    })
    out: dict[int, list[tuple[int, bytes]]] = {p: [] for p in range(partitions)}
    try:
        c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
        eof: set[int] = set()
        deadline = time.monotonic() + timeout
        while len(eof) < partitions and time.monotonic() < deadline:
            for m in c.consume(num_messages=5000, timeout=1.0):
                err = m.error()
                if err is None:
                    out[m.partition()].append((m.offset(), m.value()))
                    eof.discard(m.partition())
                elif err.code() == KafkaError._PARTITION_EOF:
                    eof.add(m.partition())
                elif err.retriable():
                    continue
                else:
                    raise AssertionError(f"consume error: {err}")
        assert len(eof) == partitions, f"EOF on partitions {sorted(eof)} only"
    finally:
        c.close()
    return out


def verify_exactly_once_in_order(result: LoadResult, stored: dict[int, list[tuple[int, bytes]]]) -> None:
    """Every acknowledged record is stored exactly once, at its acknowledged
    offset, and each partition holds its records in send order with dense
    offsets (no offset reused or skipped)."""
    seen: dict[int, tuple[int, int]] = {}
    for p, records in stored.items():
        offsets = [o for o, _ in records]
        if offsets:
            assert offsets == list(range(offsets[0], offsets[0] + len(offsets))), \
                f"partition {p}: offsets not dense"
        seqs = [int(v) for _, v in records]
        assert seqs == sorted(seqs), f"partition {p}: records out of send order"
        for (offset, _), s in zip(records, seqs):
            assert s not in seen, f"seq {s} stored twice: {seen[s]} and {(p, offset)}"
            seen[s] = (p, offset)
    missing = [s for s in result.acked if s not in seen]
    assert not missing, f"{len(missing)} acknowledged records lost, e.g. {missing[:10]}"
    moved = [(s, a.partition, a.offset, seen[s]) for s, a in result.acked.items()
             if (a.partition, a.offset) != seen[s]]
    assert not moved, f"acknowledged records stored elsewhere than acknowledged: {moved[:10]}"
