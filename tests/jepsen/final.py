"""The end of a run, after every fault is healed: a fresh consumer reads
every partition from its log start to its high watermark (``final-read``
ops), the replicas are awaited until each reports the same log end and high
watermark, and once the cluster is stopped their stored bytes are compared
(``replicas`` ops; a difference is ``replica-divergence``)."""

from __future__ import annotations

import json
import re
import struct
import time
import uuid

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, TopicCollection, TopicPartition
from confluent_kafka.admin import AdminClient

import harness
import kwire

from .history import INFO, OK, History
from .workload import LOG, close_within

READ_TIMEOUT_S = 120.0
SETTLE_TIMEOUT_S = 60.0


def watermarks(bootstrap: str, topic: str, partitions: int, history: History,
               timeout_s: float = 60.0, isolation: str = "read_uncommitted") -> dict[int, tuple[int, int]]:
    """Low and high watermark of every partition, asked again (bounded)
    while a node answers without the partition; each refusal is noted in
    the history (``watermarks`` info: a healed cluster should not). Asked
    at read_uncommitted: at read_committed ListOffsets answers the last
    stable offset instead of the high watermark (the same without
    transactions)."""
    c = Consumer({"logger": LOG, "bootstrap.servers": bootstrap, "group.id": f"marks-{uuid.uuid4().hex[:8]}",
                  "isolation.level": isolation})
    deadline = time.monotonic() + timeout_s
    try:
        while True:
            try:
                return {p: c.get_watermark_offsets(TopicPartition(topic, p), timeout=10) for p in range(partitions)}
            except KafkaException as e:
                history.add("final", INFO, "watermarks", str(e))
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.5)
    finally:
        close_within(c, "watermarks")


def final_read(bootstrap: str, topic: str, partitions: int, history: History,
               timeout_s: float = READ_TIMEOUT_S, isolation: str = "read_committed",
               key=lambda topic, p: p) -> None:
    """Reads every partition from its log start to its high watermark at
    `isolation`; one ``final-read`` op per partition, placed by
    ``key(topic, p)`` (the partition number by default). A partition's end
    (EOF) counts as read up to its offset: a read_committed reader passes
    aborted records and control markers without returning them."""
    try:
        marks = watermarks(bootstrap, topic, partitions, history)
    except KafkaException as e:  # nothing readable: every partition's final read is incomplete
        for p in range(partitions):
            history.add("final", INFO, "final-read", {"log_start": None, "high_watermark": None, "next_offset": 0,
                                                      "records": [], "errors": [str(e)]},
                        partition=key(topic, p), isolation=isolation)
        return
    c = Consumer({"logger": LOG, "bootstrap.servers": bootstrap, "group.id": f"final-{uuid.uuid4().hex[:8]}",
                  "enable.auto.commit": False, "auto.offset.reset": "error",
                  "enable.partition.eof": True, "isolation.level": isolation})
    try:
        records: dict[int, list] = {p: [] for p in range(partitions)}
        nxt = {p: low for p, (low, _) in marks.items()}
        c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
        deadline = time.monotonic() + timeout_s
        errors: list[str] = []
        while any(nxt[p] < marks[p][1] for p in nxt) and time.monotonic() < deadline:
            for m in c.consume(num_messages=5000, timeout=1.0):
                err = m.error()
                if err is None:
                    records[m.partition()].append([m.offset(), m.value().decode()])
                    nxt[m.partition()] = m.offset() + 1
                elif err.code() == KafkaError._PARTITION_EOF:
                    nxt[m.partition()] = max(nxt[m.partition()], m.offset())
                elif len(errors) < 10:
                    errors.append(str(err))
    finally:
        close_within(c, "final read")
    stable: dict = {}
    if isolation == "read_committed" and any(nxt[p] < marks[p][1] for p in nxt):
        # Where a read_committed read stopped short, what the broker gives
        # as the last stable offset says why (a transaction it holds open).
        try:
            stable = {p: high for p, (_, high) in watermarks(bootstrap, topic, partitions, history,
                                                             isolation="read_committed").items()}
        except KafkaException as e:
            errors.append(f"last stable offset: {e}")
    for p in range(partitions):
        low, high = marks[p]
        done = nxt[p] >= high
        extra = {"last_stable_offset": stable[p]} if not done and p in stable else {}
        history.add("final", OK if done else INFO, "final-read",
                    {"log_start": low, "high_watermark": high, "next_offset": nxt[p],
                     "records": records[p], "errors": errors, **extra}, partition=key(topic, p), isolation=isolation)


def topic_dirs(bootstrap: str, topics: list[str], timeout_s: float = 15.0) -> dict[str, str]:
    """name -> the directory a node stores the topic under (its topic id,
    32 hex digits), from DescribeTopics."""
    mask = (1 << 64) - 1
    admin = AdminClient({"logger": LOG, "bootstrap.servers": bootstrap})
    futures = admin.describe_topics(TopicCollection(list(topics)), request_timeout=timeout_s)
    out = {}
    for name, f in futures.items():
        u = f.result(timeout=timeout_s).topic_id
        out[name] = f"{u.get_most_significant_bits() & mask:016x}{u.get_least_significant_bits() & mask:016x}"
    return out


def _metric(text: str, name: str, topic: str) -> dict[int, float]:
    pat = re.compile(r'^' + name + r'\{([^}]*)\} (\S+)$', re.M)
    out = {}
    for labels, value in pat.findall(text):
        fields = dict(re.findall(r'(\w+)="([^"]*)"', labels))
        if fields.get("topic") == topic:
            out[int(fields["partition"])] = float(value)
    return out


def await_replicas_settled(cluster, topic: str, partitions: int, timeout_s: float = SETTLE_TIMEOUT_S) -> dict:
    """Until every node reports, for every partition, the same log end
    offset and a high watermark equal to it (the last commit index has
    reached the followers). Returns the last view (bounded wait)."""
    deadline = time.monotonic() + timeout_s
    view: dict = {}
    while time.monotonic() < deadline:
        view = {}
        try:
            for n in cluster.nodes:
                _, text = harness.http_get(n.metrics_port, "/metrics", timeout=5)
                view[n.id] = (_metric(text, "helix_partition_log_end_offset", topic),
                              _metric(text, "helix_partition_high_watermark", topic))
        except OSError:
            time.sleep(0.2)
            continue
        replicas = min(3, len(cluster.nodes))  # RF 3: with 5 nodes a partition lives on 3

        def agreed(p: int) -> bool:
            holders = [n for n in view if p in view[n][0]]
            marks = {view[n][0][p] for n in holders} | {view[n][1].get(p) for n in holders}
            return len(holders) >= replicas and len(marks) == 1
        settled = all(agreed(p) for p in range(partitions))
        if settled:
            return {"settled": True}
        time.sleep(0.2)
    raw = {}
    for n in cluster.nodes:
        try:
            _, text = harness.http_get(n.metrics_port, "/metrics", timeout=5)
            raw[n.id] = [line for line in text.splitlines() if topic in line and "offset" in line or
                         topic in line and "watermark" in line or topic in line and "leader" in line]
        except OSError as e:
            raw[n.id] = [repr(e)]
    return {"settled": False, "view": {n: {"log_end": v[0], "hw": v[1]} for n, v in view.items()},
            "metrics": raw}


def compare_replicas(stored: dict[int, dict[int, bytes]], history: History) -> None:
    """One ``replicas`` op per partition. Replicas are compared from the
    highest first batch any of them holds (a DeleteRecords may let one
    replica drop a segment another keeps); from there every batch must be
    the same bytes and every replica must end at the same offset."""
    for p in sorted({p for n in stored for p in stored[n]}):
        nodes = sorted(n for n in stored if p in stored[n])  # its replicas only
        raw = {n: stored[n][p] for n in nodes}
        value: dict = {"bytes": {str(n): len(b) for n, b in raw.items()}}
        if len(set(raw.values())) == 1:
            value["identical"] = True
        else:
            batches = {n: _batches(raw[n]) for n in nodes}
            start = max((min(bs) for bs in batches.values() if bs), default=0)
            tails = {n: sorted((o, b) for o, b in bs.items() if o >= start) for n, bs in batches.items()}
            value["identical"] = len({tuple(t) for t in tails.values()}) == 1
            value["compared_from"] = start
            if not value["identical"]:
                value["first_difference"] = _first_difference(tails)
        history.add("final", OK, "replicas", value, partition=p)


def _batches(raw: bytes) -> dict[int, bytes]:
    """base offset -> the whole stored batch (a torn tail is left out)."""
    out = {}
    pos = 0
    while pos + 12 <= len(raw):
        base, length = struct.unpack_from(">qi", raw, pos)
        end = pos + 12 + length
        if length <= 0 or end > len(raw):
            break
        out[base] = raw[pos:end]
        pos = end
    return out


def _first_difference(tails: dict) -> dict:
    nodes = sorted(tails)
    for i in range(max(len(t) for t in tails.values())):
        at = {n: tails[n][i] if i < len(tails[n]) else None for n in nodes}
        if len({v for v in at.values()}) > 1:
            out = {}
            for n, v in at.items():
                if v is None:
                    out[str(n)] = None
                    continue
                info = kwire.parse_batches(v[1])
                b = info[0] if info else None
                out[str(n)] = {"base_offset": v[0], "bytes": len(v[1]),
                               "records": b.record_count if b else None,
                               "producer_id": b.producer_id if b else None,
                               "base_sequence": b.base_sequence if b else None}
            return out
    return {}


# How many entries a txn-index op names per replica (the counts are exact).
INDEX_EXAMPLES = 10


def compare_txn_indexes(cluster, topic: str, topic_dir: str, history: History, key=lambda topic, p: p) -> None:
    """One ``txn-index`` op per partition of `topic` (stored in directory
    `topic_dir`), once the cluster is stopped: each replica's aborted
    transactions and open transactions as its producer snapshot
    (``derived-state.json``, written at shutdown) holds them. They derive
    from the log alone, so replicas whose snapshots cover the same log end
    must hold the same; a replica missing an abort serves those records as
    committed when it leads. Snapshots covering different ends are told,
    not compared."""
    views: dict[int, dict[int, dict]] = {}
    for n in cluster.nodes:
        for p, wal in cluster.wal_dirs(n, topic_dir).items():
            f = wal.parent / "derived-state.json"
            try:
                d = json.loads(f.read_text())
                table = d["producers"]
                views.setdefault(p, {})[n.id] = {
                    "covers": d["covers"],
                    "aborted": {(a["producer_id"], a["first_offset"], a["last_offset"]) for a in table["aborted"]},
                    "open": {tuple(o) for o in table["open_txns"]}}
            except (OSError, ValueError, KeyError, TypeError) as e:
                views.setdefault(p, {})[n.id] = {"error": repr(e)}
    for p, by_node in sorted(views.items()):
        value: dict = {"covers": {str(n): v.get("covers") for n, v in by_node.items()}}
        errors = {str(n): v["error"] for n, v in by_node.items() if "error" in v}
        if errors or len(set(value["covers"].values())) != 1:
            value.update(comparable=False, errors=errors)
        else:
            value["comparable"] = True
            for what in ("aborted", "open"):
                union = set().union(*(v[what] for v in by_node.values()))
                lacking = {str(n): sorted(union - v[what], key=lambda e: e[1])[:INDEX_EXAMPLES]
                           for n, v in by_node.items() if union - v[what]}
                if lacking:
                    value[f"{what}_lacking"] = lacking
            value["identical"] = not any(k.endswith("_lacking") for k in value)
        history.add("final", OK, "txn-index", value, partition=key(topic, p))
