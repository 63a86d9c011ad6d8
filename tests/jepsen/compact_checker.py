"""Checks a history of the compaction workload (compact_workload.py).

Compaction removes records a reader is allowed to miss (ADR 0027): an
offset may be empty in one read and hold a record in another, and a key's
older values come and go. What must hold, whatever the cleaners did:

- ``lost-latest``: in the final read, a key's last record (in offset
  order) sits below the offset of the key's last acknowledged write, or
  the key is absent though that write was not a tombstone (a tombstone may
  be gone after delete.retention.ms). A last record above it is a write
  attempted after it (possibly written).
- ``phantom``: a record (read, or stored by a replica) whose id no
  producer sent, or whose key or value is not what that send wrote (a
  tombstone's value is None).
- ``aborted-read``: a record (read or stored) whose send definitely failed.
- ``per-key-reorder``: one producer's writes of one key, in the order it
  sent them, sit at offsets that do not increase (the offsets any ack or
  read gave them).
- ``inconsistent-offsets``: two observations (acks and reads, any time)
  of one offset name different writes, or a replica stores at an offset
  another write than an ack or a read put there: compaction removes
  records, it never changes what an offset holds.
- ``duplicate``: one write at two offsets (the producers are idempotent).
- ``nonmonotonic-read``: one read's offsets of a partition do not strictly
  increase.
- ``final-read-incomplete``: the final read did not reach the high
  watermark (its partition's latest values cannot be judged).
- ``replica-disagreement``: two replicas' stored logs (read once the
  cluster is stopped, ``replica-records`` ops) hold different records at
  an offset both hold. Replicas clean on their own, so their bytes differ
  and an offset may be held by one and not the other.
- ``replica-latest-differs``: the latest value per key (a tombstone
  counting as absent) differs between replicas, or from the final read's.
- ``replica-unreadable``: a replica's stored segments could not be
  parsed into records.
- ``cleaner-idle``: the run saw no cleaner pass on any node (``cleaner``
  op): it proved nothing about compaction.

Informational: ``producer-fatal`` and ``ack-without-offset`` as in
checker.py; ``compacted-away`` (acknowledged writes the final read no
longer holds); ``replica-bytes-differ`` (replicas whose stored bytes
differ, expected when they cleaned differently).
"""

from __future__ import annotations

from collections import defaultdict

from . import checker
from .history import FAIL, INVOKE, OK

ANOMALIES = ("lost-latest", "phantom", "aborted-read", "per-key-reorder", "inconsistent-offsets", "duplicate",
             "nonmonotonic-read", "final-read-incomplete", "replica-disagreement", "replica-latest-differs",
             "replica-unreadable", "cleaner-idle")
INFORMATIONAL = ("compacted-away", "producer-fatal", "ack-without-offset", "replica-bytes-differ")
READS = ("read", "final-read")


def _records(op: dict):
    """(partition, offset, key, value, id) of every record a read returned."""
    if op["f"] in READS and op["type"] != INVOKE:
        for o, k, v, wid in op["value"]["records"]:
            yield op["partition"], o, k, v, wid


def check(ops: list[dict]) -> checker.Result:
    r = checker.Result(ANOMALIES, INFORMATIONAL)
    writes = {op["value"]: op for op in ops if op["f"] == "send" and op["type"] == INVOKE}
    done = {op["invoke"]: op for op in ops if op["f"] == "send" and op["type"] != INVOKE}
    acked = [op for op in ops if op["f"] == "send" and op["type"] == OK]
    failed = {op["value"] for op in done.values() if op["type"] == FAIL}

    # partition -> offset -> {id: index of the first op that placed it there}
    at: dict[int, dict[int, dict[str, int]]] = defaultdict(lambda: defaultdict(dict))
    for op in acked:
        if op.get("offset") is None:
            r.add("ack-without-offset", op["partition"], value=op["value"], index=op["index"])
        else:
            at[op["partition"]][op["offset"]].setdefault(op["value"], op["index"])
    for op in ops:
        last = None
        for p, o, k, v, wid in _records(op):
            if last is not None and o <= last:
                r.add("nonmonotonic-read", p, process=op["process"], offsets=[last, o], index=op["index"])
            last = o
            _judge_record(writes, failed, p, o, k, v, wid, op, r)
            at[p][o].setdefault(wid, op["index"])
    _offsets(at, r)
    _per_key_order(writes, at, r)
    _latest(ops, writes, acked, r)
    _replicas(ops, writes, failed, at, r)
    for op in ops:
        if op["f"] == "fatal":
            r.add("producer-fatal", None, process=op["process"], error=op["value"], index=op["index"])
        if op["f"] == "replicas" and not op["value"]["identical"]:
            r.add("replica-bytes-differ", op["partition"], detail=op["value"], index=op["index"])
    cleaner = [op for op in ops if op["f"] == "cleaner"]
    if not any(n for op in cleaner for parts in op["value"]["passes"].values() for n in parts.values()):
        r.add("cleaner-idle", None, detail=[op["value"] for op in cleaner],
              index=cleaner[-1]["index"] if cleaner else len(ops) - 1)
    r.unavailability = checker.unavailability(ops)
    r.stats = checker.stats(ops)
    r.stats["cleaner_passes"] = sum(n for op in cleaner for parts in op["value"]["passes"].values()
                                    for n in parts.values())
    return r


def _judge_record(writes, failed, p, o, k, v, wid, op, r) -> None:
    sent = writes.get(wid)
    if sent is None or sent["key"] != k or sent["partition"] != p or v != (None if sent["tombstone"] else wid):
        r.add("phantom", p, offset=o, record=[k, v, wid], process=op["process"], index=op["index"])
    elif wid in failed:
        r.add("aborted-read", p, offset=o, value=wid, index=op["index"])


def _offsets(at: dict, r) -> None:
    where: dict[str, set] = defaultdict(set)
    for p, offsets in at.items():
        for o, ids in offsets.items():
            if len(ids) > 1:
                r.add("inconsistent-offsets", p, offset=o, values=sorted(map(str, ids)), index=min(ids.values()))
            for wid in ids:
                where[wid].add((p, o))
    for wid, places in where.items():
        if len(places) > 1:
            p = min(places)[0]
            r.add("duplicate", p, value=wid, at=sorted(places), index=min(at[p][o][wid] for p, o in places))


def _per_key_order(writes: dict, at: dict, r) -> None:
    """Each producer's writes of a key, in its send order, at increasing
    offsets (where an ack or a read placed them)."""
    placed: dict[str, tuple[int, int]] = {}  # id -> (offset, index of the op that placed it)
    for offsets in at.values():
        for o, ids in offsets.items():
            for wid, idx in ids.items():
                if wid not in placed or idx < placed[wid][1]:
                    placed[wid] = (o, idx)
    last: dict[tuple[str, str], tuple[str, int]] = {}
    for wid, inv in sorted(writes.items(), key=lambda kv: kv[1]["index"]):
        if wid not in placed:
            continue
        o, idx = placed[wid]
        key = (inv["process"], inv["key"])
        prev = last.get(key)
        if prev is not None and o <= prev[1]:
            r.add("per-key-reorder", inv["partition"], process=inv["process"], key=inv["key"],
                  values=[prev[0], wid], offsets=[prev[1], o], index=idx)
        last[key] = (wid, o)


def _latest(ops: list[dict], writes: dict, acked: list[dict], r) -> None:
    final = {op["partition"]: op for op in ops if op["f"] == "final-read"}
    for p in sorted({op["partition"] for op in acked} - set(final)):
        r.add("final-read-incomplete", p, detail="no final read", index=len(ops) - 1)
    judged = set()
    for p, op in sorted(final.items()):
        if op["type"] != OK:
            r.add("final-read-incomplete", p, detail={k: v for k, v in op["value"].items() if k != "records"},
                  index=op["index"])
        else:
            judged.add(p)
    last_acked: dict[str, dict] = {}
    for op in acked:
        if op.get("offset") is not None:
            k = writes[op["value"]]["key"]
            if k not in last_acked or op["offset"] > last_acked[k]["offset"]:
                last_acked[k] = op
    latest: dict[str, tuple[int, str]] = {}
    held = set()
    for p in judged:
        for _, o, k, _, wid in _records(final[p]):
            latest[k] = (o, wid)
            held.add(wid)
    for k, ack in sorted(last_acked.items()):
        if ack["partition"] not in judged:
            continue
        got = latest.get(k)
        if got is None and not writes[ack["value"]]["tombstone"]:
            r.add("lost-latest", ack["partition"], key=k, acked=ack["value"], offset=ack["offset"],
                  read=None, index=ack["index"])
        elif got is not None and got[0] < ack["offset"]:
            r.add("lost-latest", ack["partition"], key=k, acked=ack["value"], offset=ack["offset"],
                  read=list(got), index=ack["index"])
    for op in acked:
        if op["partition"] in judged and op["value"] not in held:
            r.add("compacted-away", op["partition"], value=op["value"], offset=op.get("offset"), index=op["index"])


def latest_view(records) -> dict[str, str]:
    """key -> the id of its last record, keys whose last record is a
    tombstone left out (a tombstone may be gone on one replica and not
    yet on another)."""
    out: dict[str, tuple[int, str | None, str]] = {}
    for o, k, v, wid in records:
        if k not in out or o > out[k][0]:
            out[k] = (o, v, wid)
    return {k: wid for k, (_, v, wid) in out.items() if v is not None}


def _replicas(ops: list[dict], writes: dict, failed: set, at: dict, r) -> None:
    final = {op["partition"]: op for op in ops if op["f"] == "final-read" and op["type"] == OK}
    for op in ops:
        if op["f"] != "replica-records":
            continue
        p = op["partition"]
        if op["type"] != OK:
            r.add("replica-unreadable", p, detail=op["value"], index=op["index"])
            continue
        stored = op["value"]["replicas"]
        nodes = sorted(stored)
        for n in nodes:  # what a replica stores was written too, as what a read returns
            for o, k, v, wid in stored[n]:
                _judge_record(writes, failed, p, o, k, v, wid, dict(op, process=f"replica-{n}"), r)
                seen = at.get(p, {}).get(o)
                if seen and wid not in seen:  # an ack or a read put another write there
                    r.add("inconsistent-offsets", p, offset=o, values=sorted(map(str, seen)) + [str(wid)],
                          replica=n, index=min(seen.values()))
        held = {n: {o: (k, v, wid) for o, k, v, wid in stored[n]} for n in nodes}
        for i, a in enumerate(nodes):
            for b in nodes[i + 1:]:
                differ = sorted(o for o in held[a].keys() & held[b].keys() if held[a][o] != held[b][o])
                if differ:
                    o = differ[0]
                    r.add("replica-disagreement", p, nodes=[a, b], offset=o, count=len(differ),
                          records=[list(held[a][o]), list(held[b][o])], index=op["index"])
        views = {n: latest_view(stored[n]) for n in nodes}
        if p in final:
            views["final-read"] = latest_view(final[p]["value"]["records"])
        distinct = {tuple(sorted(v.items())) for v in views.values()}
        if len(distinct) > 1:
            keys = sorted({k for v in views.values() for k in v})
            first = next(k for k in keys if len({v.get(k) for v in views.values()}) > 1)
            r.add("replica-latest-differs", p, key=first, views={n: v.get(first) for n, v in views.items()},
                  index=op["index"])
