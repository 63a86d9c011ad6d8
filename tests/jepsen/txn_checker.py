"""Reads the history of the transactional workload (txn_workload.py) and
names what went wrong, per key (``topic/partition``), with the names of
Jepsen's Kafka checker (jepsen.tests.kafka) where it has one.

A transaction's outcome is its ``txn`` completion: ``ok`` committed,
``fail`` never committed (commit_transaction was not called), ``info`` (or
no completion) indeterminate. Every consumer reads at read_committed; the
final read reads every partition twice, read_committed and
read_uncommitted. A transaction *must have committed* when its commit was
acknowledged, or when any read_committed reader returned one of its values
(as Jepsen's ``must-have-committed?``): an indeterminate transaction may go
either way, but then wholly.

- ``G1a`` (aborted read): a value of a transaction that never committed was
  returned by a read_committed reader (a consumer poll or the
  read_committed final read).
- ``lost-write``: a value of a transaction that must have committed is
  absent from the read_committed final read of its partition (where that
  read reached the offset).
- ``torn-transaction``: a transaction that some read_committed reader saw
  (any of its values) has another value absent from the read_committed
  final read: visible on some partitions and not on others, or read once
  and gone after everything was drained. Counted once per transaction.
- ``duplicate``: one value at two offsets (or in two partitions), as any
  reader or acknowledgement placed it.
- ``inconsistent-offsets``: one offset, two different values.
- ``nonmonotonic-poll``: one consumer's successive reads of a partition go
  backwards or repeat, with no assign/subscribe/rebalance in between.
- ``poll-skip``: one consumer's successive reads of a partition jump over an
  offset holding a value some read_committed reader returned (a committed
  value; not one of an aborted transaction, whose read is G1a), with no
  assign/subscribe/rebalance in between.
- ``final-read-incomplete``: a final read (either isolation) did not reach
  the high watermark.
- ``replica-divergence``: replicas of one partition store different bytes.
- ``txn-index-divergence``: replicas of one partition, stopped with
  producer snapshots covering the same log end, hold different aborted or
  open transactions (final.compare_txn_indexes): derived from identical
  logs, they must agree; a leader missing an abort serves its records as
  committed (G1a), one with a transaction wrongly open holds the last
  stable offset back.
- ``duplicate-copy``: the copier (txn_copier.py, consume-transform-produce
  with send_offsets_to_transaction) has two copies of one source value in
  the read_committed final read: its offsets were not committed atomically
  with its writes (exactly-once broken).

Informational: ``indeterminate`` (transactions whose outcome is unknown),
``aborted-in-log`` (values of aborted transactions present in the
read_uncommitted final read: the read_committed filter had something to
filter), ``unseen`` (committed values no consumer polled before the final
read), ``producer-replaced`` (a producer instance fenced or stuck, replaced).
"""

from __future__ import annotations

from collections import defaultdict

from . import checker
from .history import FAIL, INFO, INVOKE, OK

ANOMALIES = ("G1a", "lost-write", "torn-transaction", "duplicate", "inconsistent-offsets",
             "nonmonotonic-poll", "poll-skip", "final-read-incomplete", "replica-divergence",
             "txn-index-divergence", "duplicate-copy")
INFORMATIONAL = ("indeterminate", "aborted-in-log", "unseen", "producer-replaced")


class Txn:
    """One transaction: its writes ([key, value]), outcome and the ops."""

    def __init__(self, invoke: dict):
        self.invoke = invoke
        self.id = invoke["value"]["id"]
        self.writes: list[list] = invoke["value"]["writes"]
        self.completion: dict | None = None

    @property
    def type(self) -> str:
        return self.completion["type"] if self.completion else INFO

    @property
    def index(self) -> int:
        return (self.completion or self.invoke)["index"]


def transactions(ops: list[dict]) -> tuple[dict[str, Txn], dict[str, Txn]]:
    """txn id -> Txn, and value -> its Txn."""
    by_id: dict[str, Txn] = {}
    by_invoke: dict[int, Txn] = {}
    for op in ops:
        if op["f"] != "txn":
            continue
        if op["type"] == INVOKE:
            t = Txn(op)
            by_id[t.id] = by_invoke[op["index"]] = t
        elif op.get("invoke") in by_invoke:
            by_invoke[op["invoke"]].completion = op
    return by_id, {v: t for t in by_id.values() for _, v in t.writes}


def committed_reads(ops: list[dict]):
    """(key, offset, value, op) of every record a read_committed reader
    returned: consumer polls and the read_committed final read."""
    for op in ops:
        if op["f"] == "poll" and op["type"] == OK:
            for k, o, v in op["value"] or ():
                yield k, o, v, op
        elif op["f"] == "final-read" and op.get("isolation") == "read_committed" and op["type"] in (OK, INFO):
            for o, v in op["value"]["records"]:
                yield op["partition"], o, v, op


def all_placements(ops: list[dict], txns: dict[str, Txn]):
    """(key, offset, value, op index): every read (either isolation) and
    every acknowledged write's offset."""
    for k, o, v, op in committed_reads(ops):
        yield k, o, v, op["index"]
    for op in ops:
        if op["f"] == "final-read" and op.get("isolation") == "read_uncommitted" and op["type"] in (OK, INFO):
            for o, v in op["value"]["records"]:
                yield op["partition"], o, v, op["index"]
    for t in txns.values():
        for (k, v), o in zip(t.writes, (t.completion or {}).get("value", {}).get("offsets") or ()):
            if o is not None:
                yield k, o, v, t.index


def check(ops: list[dict]) -> checker.Result:
    r = checker.Result(ANOMALIES, INFORMATIONAL)
    txns, writer = transactions(ops)
    finals = {(op["partition"], op.get("isolation")): op for op in ops if op["f"] == "final-read"}
    rc_final = {k: op for (k, iso), op in finals.items() if iso == "read_committed"}
    rc_final_values = {k: {v for _, v in op["value"]["records"]} for k, op in rc_final.items()}

    # Which values read_committed readers returned, and the first read.
    seen: dict[str, tuple[str, int, dict]] = {}
    polled: set[str] = set()
    for k, o, v, op in committed_reads(ops):
        seen.setdefault(v, (k, o, op))
        if op["f"] == "poll":
            polled.add(v)

    _placements(ops, txns, r)
    _final_reads(ops, txns, finals, r)
    for v, (k, o, op) in seen.items():
        t = writer.get(v)
        if t is not None and t.type == FAIL:
            r.add("G1a", k, value=v, offset=o, txn=t.id, reader=op["process"], writer_index=t.index,
                  index=op["index"])
    for t in txns.values():
        # A read of a transaction that never committed is G1a, not a
        # reason to expect the rest of it.
        must = t.type == OK or (t.type == INFO and any(v in seen for _, v in t.writes))
        if t.type == INFO:
            r.add("indeterminate", t.writes[0][0], txn=t.id, seen=any(v in seen for _, v in t.writes),
                  index=t.index)
        if not must:
            continue
        why = "commit acknowledged" if t.type == OK else "indeterminate, and read by a read_committed reader"
        missing = [[k, v] for k, v in t.writes if _covers(rc_final.get(k), t, v) and v not in rc_final_values[k]]
        for k, v in missing:
            r.add("lost-write", k, value=v, txn=t.id, why=why, index=t.index)
        read = [[k, v, seen[v][2]["process"]] for k, v in t.writes if v in seen]
        if missing and read:
            r.add("torn-transaction", missing[0][0], txn=t.id, outcome=t.type, read=read, missing=missing,
                  index=seen[read[0][1]][2]["index"])
        if t.type == OK:
            for k, v in t.writes:
                if v not in polled and [k, v] not in missing:
                    r.add("unseen", k, value=v, txn=t.id, index=t.index)
    for op in ops:
        if op["f"] == "replace":
            r.add("producer-replaced", None, process=op["process"], why=op["value"], index=op["index"])
        if op["f"] == "replicas" and not op["value"]["identical"]:
            r.add("replica-divergence", op["partition"], detail=op["value"], index=op["index"])
        if op["f"] == "txn-index" and op["value"].get("comparable") and not op["value"]["identical"]:
            r.add("txn-index-divergence", op["partition"], detail=op["value"], index=op["index"])
    _copies(txns, rc_final_values, r)
    r.unavailability = checker.unavailability(ops, f="txn", place=lambda op: "transactions")
    r.stats = stats(ops, txns)
    return r


def _covers(final: dict | None, t: Txn, value: str) -> bool:
    """Whether the read_committed final read of a key vouches for `value`:
    complete, or reached past the value's acknowledged offset."""
    if final is None:
        return False  # told as final-read-incomplete
    if final["type"] == OK:
        return True
    offsets = dict(zip((v for _, v in t.writes), (t.completion or {}).get("value", {}).get("offsets") or ()))
    o = offsets.get(value)
    return o is not None and o < final["value"]["next_offset"]


def _placements(ops: list[dict], txns: dict[str, Txn], r: checker.Result) -> None:
    """inconsistent-offsets, duplicate, and the consumers' order
    (nonmonotonic-poll, poll-skip against committed values)."""
    log: dict = defaultdict(lambda: defaultdict(dict))  # key -> offset -> {value: first op index}
    for k, o, v, index in all_placements(ops, txns):
        log[k][o].setdefault(v, index)
    where: dict[str, set] = defaultdict(set)
    for k, offsets in log.items():
        for o, values in offsets.items():
            if len(values) > 1:
                r.add("inconsistent-offsets", k, offset=o, values=sorted(values), index=min(values.values()))
            for v in values:
                where[v].add((k, o))
    for v, places in where.items():
        if len(places) > 1:
            k, o = min(places)
            r.add("duplicate", k, value=v, at=sorted(places), index=min(log[k2][o2][v] for k2, o2 in places))
    # Values some read_committed reader returned, less those of aborted
    # transactions: skipping one of those is right (reading it is G1a).
    aborted = {v for t in txns.values() if t.type == FAIL for _, v in t.writes}
    committed_log: dict = defaultdict(dict)
    for k, o, v, op in committed_reads(ops):
        if v not in aborted:
            committed_log[k].setdefault(o, {v: op["index"]})
    consumer_ops = [op for op in ops if not (op["f"] == "final-read" and op.get("isolation") != "read_committed")]
    checker._poll_order(consumer_ops, committed_log, {}, r)


def _final_reads(ops: list[dict], txns: dict[str, Txn], finals: dict, r: checker.Result) -> None:
    written = {k for t in txns.values() for k, _ in t.writes}
    for iso in ("read_committed", "read_uncommitted"):
        for k in sorted(written - {k for k, i in finals if i == iso}):
            r.add("final-read-incomplete", k, detail=f"no {iso} final read", index=len(ops) - 1)
    for (k, iso), op in sorted(finals.items(), key=lambda kv: (str(kv[0][0]), str(kv[0][1]))):
        if op["type"] != OK:
            r.add("final-read-incomplete", k, isolation=iso,
                  detail={n: x for n, x in op["value"].items() if n != "records"}, index=op["index"])
    aborted = {v for t in txns.values() if t.type == FAIL for _, v in t.writes}
    for (k, iso), op in finals.items():
        if iso == "read_uncommitted":
            for o, v in op["value"]["records"]:
                if v in aborted:
                    r.add("aborted-in-log", k, value=v, offset=o, index=op["index"])


def _copies(txns: dict[str, Txn], rc_final_values: dict[str, set], r: checker.Result) -> None:
    """duplicate-copy: a source value with more than one copy in the
    read_committed final read."""
    final_values = set().union(*rc_final_values.values()) if rc_final_values else set()
    copies: dict[str, list] = defaultdict(list)
    for t in txns.values():
        for source, copy in t.invoke["value"].get("copies") or ():
            if copy in final_values:
                copies[source].append([t.id, copy, t.index])
    for source, found in copies.items():
        if len(found) > 1:
            key = next(k for t in txns.values() for k, v in t.writes if v == found[0][1])
            r.add("duplicate-copy", key, source=source, copies=[c[:2] for c in found], index=found[1][2])


def stats(ops: list[dict], txns: dict[str, Txn]) -> dict:
    st = checker.stats(ops)
    outcomes = defaultdict(int)
    for t in txns.values():
        outcomes[t.type] += 1
    st["transactions"] = {"committed": outcomes[OK], "aborted": outcomes[FAIL], "indeterminate": outcomes[INFO]}
    # What the runner and CI call acknowledged: values of committed transactions.
    st["acknowledged"] = sum(len(t.writes) for t in txns.values() if t.type == OK)
    return st
