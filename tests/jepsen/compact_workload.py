"""The clients of the compaction workload (``--workload compact``, issue 33):
idempotent producers writing keyed records and tombstones to a compacted
topic, readers that read every partition from the beginning again and
again, and a sampler of the nodes' cleaner metrics (the run must show that
passes ran, or it proves nothing).

Every write is unique: its id ``k037:p1:000123`` (key, writer, sequence)
is the value of a write and, for a tombstone (value None), travels in the
record header ``id`` (every record carries it), so a read names the write it
saw. A key always goes to the same partition (its number modulo the
partitions). Send ops record ``key`` and ``tombstone`` beside the id.

A read (``read`` op, one per partition per pass) is what one consumer got
from the log start to the high watermark it asked for first:
``{"log_start", "high_watermark", "next_offset", "records": [[offset, key,
value, id], ...]}``, ``ok`` when it reached the high watermark, ``info``
when its time ran out first. The final read is the same with ``f`` =
``final-read``, once every fault is healed and the cleaners have cleaned
what they could with every node up.
"""

from __future__ import annotations

import random
import threading
import time
import uuid

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, TopicPartition

import harness

from . import compact_checker
from .final import _metric
from .history import INFO, OK, History
from .workload import LOG, Client, IdempotentProducer, close_within

KEYS = 100
TOMBSTONE_P = 0.1
# The topic's configs: small segments roll every second or two, any dirt
# is worth a pass, tombstones may go two seconds after a pass keeps them.
TOPIC_CONFIG = {
    "cleanup.policy": "compact",
    "segment.bytes": "8192",
    "segment.ms": "2000",
    "min.cleanable.dirty.ratio": "0.01",
    "min.compaction.lag.ms": "0",
    "delete.retention.ms": "2000",
}
# The cleaner looks every 200 ms (Kafka's default is 15 s: no pass would
# run in a 35 s run under faults).
SERVER_ARGS = ["--log-cleaner-backoff-ms", "200"]
# A batch never larger than a segment (a broker refuses a batch larger than
# segment.bytes, RECORD_LIST_TOO_LARGE, as Kafka does).
PRODUCER_CONF = {"batch.size": 4096, "compression.type": "none"}
READ_TIMEOUT_S = 10.0
FINAL_READ_TIMEOUT_S = 120.0
# After the heal, how long the cleaners may take to leave nothing
# cleanable on any node (told in the history when they do not).
SETTLE_COMPACTION_S = 30.0


def key_of(write_id: str) -> str:
    return write_id.split(":", 1)[0]


class CompactProducer(IdempotentProducer):
    """Keyed writes over KEYS keys, a tenth of them tombstones (seeded)."""

    EXTRA_CONF = PRODUCER_CONF

    def record(self, seq: int) -> tuple[str, int, dict, dict]:
        k = self.rng.randrange(KEYS)
        key = f"k{k:03d}"
        write_id = f"{key}:p{self.idx}:{seq:06d}"
        tombstone = self.rng.random() < TOMBSTONE_P
        record = {"key": key.encode(), "value": None if tombstone else write_id.encode(),
                  "headers": [("id", write_id.encode())]}
        return write_id, k % self.partitions, record, {"key": key, "tombstone": tombstone}


def read_once(consumer: Consumer, topic: str, partitions: int, timeout_s: float,
              stopping: threading.Event | None = None) -> dict[int, dict]:
    """One read of every partition from its log start to the high
    watermark asked for first: {partition: read value}."""
    marks = {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=5) for p in range(partitions)}
    records: dict[int, list] = {p: [] for p in range(partitions)}
    nxt = {p: low for p, (low, _) in marks.items()}
    errors: list[str] = []
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
    deadline = time.monotonic() + timeout_s
    try:
        while (any(nxt[p] < marks[p][1] for p in nxt) and time.monotonic() < deadline
               and not (stopping and stopping.is_set())):
            for m in consumer.consume(num_messages=1000, timeout=0.5):
                err = m.error()
                p = m.partition()
                if err is None:
                    headers = dict(m.headers() or ())
                    wid = headers.get("id")
                    records[p].append([m.offset(), None if m.key() is None else m.key().decode(),
                                       None if m.value() is None else m.value().decode(),
                                       None if wid is None else wid.decode()])
                    nxt[p] = m.offset() + 1
                elif err.code() == KafkaError._PARTITION_EOF:
                    nxt[p] = max(nxt[p], m.offset())
                elif len(errors) < 10:
                    errors.append(str(err))
    finally:
        consumer.unassign()
    return {p: {"log_start": marks[p][0], "high_watermark": marks[p][1], "next_offset": nxt[p],
                "records": records[p], "errors": errors} for p in range(partitions)}


def new_consumer(bootstrap: str) -> Consumer:
    return Consumer({"logger": LOG, "bootstrap.servers": bootstrap, "group.id": f"compact-{uuid.uuid4().hex[:8]}",
                     "enable.auto.commit": False, "auto.offset.reset": "earliest",
                     "enable.partition.eof": True, "topic.metadata.refresh.interval.ms": 1000})


class CompactReader(Client):
    """Reads every partition from the beginning, again and again; one
    ``read`` op per partition per pass (``info`` when the pass ran out of
    time, as under a partition)."""

    def __init__(self, idx: int, bootstrap: str, topic: str, partitions: int, history: History):
        super().__init__(f"reader-{idx}", bootstrap, topic, partitions, history)
        self.draining = threading.Event()
        self.position: dict[int, int] = {}  # partition -> where the last pass ended

    def caught_up(self, ends: dict[int, int]) -> bool:
        return all(self.position.get(p, 0) >= end for p, end in ends.items() if end > 0)

    def body(self) -> None:
        consumer = new_consumer(self.bootstrap)
        try:
            while not self.stopping.is_set():
                try:
                    reads = read_once(consumer, self.topic, self.partitions, READ_TIMEOUT_S, self.stopping)
                except KafkaException as e:  # no watermarks (a node down): asked again
                    self.history.add(self.proc, INFO, "watermarks", str(e))
                    time.sleep(0.5)
                    continue
                for p, value in reads.items():
                    done = value["next_offset"] >= value["high_watermark"]
                    self.history.add(self.proc, OK if done else INFO, "read", value, partition=p)
                    self.position[p] = value["next_offset"]
        finally:
            close_within(consumer, self.proc)


def final_read(bootstrap: str, topic: str, partitions: int, history: History) -> None:
    consumer = new_consumer(bootstrap)
    try:
        reads = read_once(consumer, topic, partitions, FINAL_READ_TIMEOUT_S)
    except KafkaException as e:
        reads = {p: {"log_start": None, "high_watermark": None, "next_offset": 0, "records": [],
                     "errors": [str(e)]} for p in range(partitions)}
    finally:
        close_within(consumer, "final read")
    for p, value in reads.items():
        done = value["high_watermark"] is not None and value["next_offset"] >= value["high_watermark"]
        history.add("final", OK if done else INFO, "final-read", value, partition=p)


def scrape(port: int, topic: str) -> dict[str, dict[int, float]]:
    """The cleaner's per-partition metrics of `topic` on one node."""
    _, text = harness.http_get(port, "/metrics", timeout=2)
    return {name: _metric(text, f"helix_compaction_{name}", topic)
            for name in ("last_clean_timestamp_ms", "cleanable_bytes")}


class CleanerSampler(threading.Thread):
    """Scrapes every node's cleaner metrics every second: the passes seen
    are the distinct last-clean times per node and partition (a restarted
    node starts again from none). A node down or paused is skipped."""

    def __init__(self, cluster, topic: str):
        super().__init__(daemon=True, name="cleaner-sampler")
        self.cluster = cluster
        self.topic = topic
        self.stopping = threading.Event()
        self.seen: dict[int, dict[int, set]] = {n.id: {} for n in cluster.nodes}

    def sample(self) -> None:
        for n in self.cluster.nodes:
            try:
                stamps = scrape(n.metrics_port, self.topic)["last_clean_timestamp_ms"]
            except OSError:
                continue
            for p, ms in stamps.items():
                if ms > 0:
                    self.seen[n.id].setdefault(p, set()).add(ms)

    def run(self) -> None:
        while not self.stopping.wait(1.0):
            self.sample()

    def passes(self) -> dict[str, dict[str, int]]:
        return {str(n): {str(p): len(s) for p, s in sorted(parts.items())} for n, parts in self.seen.items()}


def settle_compaction(cluster, topic: str, partitions: int, history: History,
                      timeout_s: float = SETTLE_COMPACTION_S) -> None:
    """Until every node reports every partition with nothing cleanable
    left (its cleaner has caught up with the sealed segments), bounded;
    a ``compaction-settled`` op says whether it came and what each node
    last reported."""
    deadline = time.monotonic() + timeout_s
    view: dict = {}
    while True:
        view = {}
        for n in cluster.nodes:
            try:
                view[n.id] = scrape(n.metrics_port, topic)["cleanable_bytes"]
            except OSError as e:
                view[n.id] = repr(e)
        replicas = min(3, len(cluster.nodes))  # with 5 nodes a partition lives on 3
        holders = [sum(1 for v in view.values() if isinstance(v, dict) and p in v) for p in range(partitions)]
        settled = (all(isinstance(v, dict) and not any(v.values()) for v in view.values())
                   and all(h >= replicas for h in holders))
        if settled or time.monotonic() > deadline:
            break
        time.sleep(0.3)
    history.add("final", OK if settled else INFO, "compaction-settled",
                {str(n): v if isinstance(v, str) else {str(p): b for p, b in v.items()} for n, v in view.items()})


def stored_records(raw: bytes) -> list[list]:
    """[offset, key, value, id] of every record in a replica's stored
    segments (kwire's batch parser; control batches left out)."""
    import kwire
    out = []
    for b in kwire.parse_batches(raw):
        if b.attributes & 0x20:
            continue
        if b.compression != 0:
            raise ValueError(f"batch at {b.base_offset} is compressed ({b.compression}); the workload sends none")
        for r in kwire.decode_records(b):
            headers = dict(r.headers)
            wid = headers.get("id")
            out.append([b.base_offset + r.offset_delta, None if r.key is None else r.key.decode(),
                        None if r.value is None else r.value.decode(), None if wid is None else wid.decode()])
    return out


class CompactWorkload:
    """run.py's face of this workload: a compacted topic (TOPIC_CONFIG),
    nodes whose cleaners look every 200 ms, CompactProducers and
    CompactReaders, the sampler, a final read once the cleaners settled,
    and the replicas' stored records (compact_checker.py)."""

    anomalies, informational = compact_checker.ANOMALIES, compact_checker.INFORMATIONAL
    shown = ("producer-fatal",)

    def __init__(self, opts):
        self.opts = opts
        self.topic = f"jepsen-{opts.seed}-compact"
        self.topics = {self.topic: opts.partitions}
        self.topic_config = {self.topic: TOPIC_CONFIG}
        self.notes: list[str] = []
        opts.server_args = opts.server_args + SERVER_ARGS
        self.cluster = None
        self.sampler: CleanerSampler | None = None

    def key(self, topic: str, p: int):
        return p

    def prepare(self, cluster) -> None:
        self.cluster = cluster
        self.sampler = CleanerSampler(cluster, self.topic)
        self.sampler.start()

    def clients(self, bootstrap: str, history: History, rng: random.Random) -> tuple[list, list]:
        o = self.opts
        max_records = int(o.rate * o.duration_s) + 1
        producers = [CompactProducer(i, bootstrap, self.topic, o.partitions, history, rate=o.rate,
                                     max_records=max_records, rng=random.Random(rng.random()))
                     for i in range(o.producers)]
        readers = [CompactReader(i, bootstrap, self.topic, o.partitions, history)
                   for i in range(max(1, o.assign_consumers + o.group_consumers))]
        return producers, readers

    def final_read(self, bootstrap: str, history: History) -> None:
        settle_compaction(self.cluster, self.topic, self.opts.partitions, history)
        self.sampler.stopping.set()
        self.sampler.join(timeout=10)
        self.sampler.sample()
        history.add("cleaner", OK, "cleaner", {"passes": self.sampler.passes()})
        final_read(bootstrap, self.topic, self.opts.partitions, history)

    def after_stop(self, cluster, dirs: dict[str, str], history: History) -> None:
        stored = cluster.stored_logs(dirs.get(self.topic))
        for p in sorted({p for logs in stored.values() for p in logs}):
            replicas = {}
            for node, logs in stored.items():
                if p in logs:
                    try:
                        replicas[str(node)] = stored_records(logs[p])
                    except Exception as e:  # unreadable: an anomaly of its own (compact_checker)
                        history.add("final", INFO, "replica-records", {"error": repr(e)}, partition=p)
                        replicas = None
                        break
            if replicas is not None:
                history.add("final", OK, "replica-records", {"replicas": replicas}, partition=p)

    def check(self, ops: list[dict]):
        return compact_checker.check(ops)
