"""Reads a whole history (history.py) and names what went wrong, per
partition, with the names of Jepsen's Kafka checker (jepsen.tests.kafka).

The version order of a partition is what every acknowledged send and every
read (consumer polls and the final read) say sits at each offset. From it:

- ``inconsistent-offsets``: one offset, two different values.
- ``duplicate``: one value at two offsets (or in two partitions).
- ``lost-write``: a send acknowledged at an offset the final read covers
  (at or above any log start the nemesis moved with DeleteRecords), whose
  value the final read does not hold.
- ``unseen`` (informational, as in Jepsen): acknowledged, never returned by
  any consumer poll before the final read.
- ``producer-fatal`` (informational): an idempotent producer got a fatal
  error (OUT_OF_ORDER_SEQUENCE_NUMBER, ...) and was replaced; with a correct
  broker its sequence state never desynchronises.
- ``ack-without-offset`` (informational): a send reported delivered with no
  offset (the client's answer to DUPLICATE_SEQUENCE_NUMBER; Kafka answers a
  retry of a recent batch with its offset instead). The value must still be
  in the final read; it has no place in the version order.
- ``nonmonotonic-send``: one producer's acknowledged offsets for a
  partition do not increase in the order it sent them.
- ``nonmonotonic-poll``: a consumer's successive reads of a partition go
  backwards or repeat, with no assign/subscribe/rebalance in between.
- ``poll-skip``: a consumer's successive reads of a partition jump over an
  offset that holds a known value (one someone sent or read), with no
  assign/subscribe/rebalance in between and not below a DeleteRecords point.
- ``commit-backwards``: a group's committed offset for a partition is lower
  than one acknowledged before this commit was sent.
- ``aborted-read``: a value whose send definitely failed was read.
- ``final-read-incomplete``: the final read did not reach the high watermark
  (nothing else about that partition can then be trusted).
- ``replica-divergence``: replicas of one partition store different bytes
  (inconsistent offsets at the storage level).

And per partition the longest unavailability: the longest time without an
acknowledged send while sends to it were being attempted.
"""

from __future__ import annotations

import bisect
from collections import defaultdict

from .history import FAIL, INFO, INVOKE, OK

ANOMALIES = ("lost-write", "duplicate", "inconsistent-offsets", "nonmonotonic-send",
             "nonmonotonic-poll", "poll-skip", "commit-backwards", "aborted-read",
             "final-read-incomplete", "replica-divergence")
INFORMATIONAL = ("unseen", "producer-fatal", "ack-without-offset")
RESETS = ("assign", "subscribe", "rebalance")
# How many examples of each anomaly a result keeps (the counts are exact).
MAX_CASES = 50


class Result:
    """Counts and example cases of every anomaly (`anomalies`) and piece
    of information (`informational`) a checker names; valid when no
    anomaly was counted."""

    def __init__(self, anomalies: tuple[str, ...] = ANOMALIES, informational: tuple[str, ...] = INFORMATIONAL):
        self.anomalies = anomalies
        self.counts: dict[str, int] = {name: 0 for name in anomalies + informational}
        self.per_partition: dict[int, dict[str, int]] = defaultdict(lambda: defaultdict(int))
        self.cases: dict[str, list[dict]] = defaultdict(list)
        self.unavailability: dict[int, dict] = {}
        self.stats: dict = {}

    def add(self, name: str, partition: int | None, **case) -> None:
        self.counts[name] += 1
        self.per_partition[-1 if partition is None else partition][name] += 1
        if len(self.cases[name]) < MAX_CASES:
            self.cases[name].append({"partition": partition, **case})

    @property
    def valid(self) -> bool:
        return all(self.counts[name] == 0 for name in self.anomalies)

    def to_json(self) -> dict:
        return {"valid": self.valid, "counts": self.counts,
                "per_partition": {str(p): dict(c) for p, c in sorted(self.per_partition.items(),
                                                                     key=lambda pc: str(pc[0]))},
                "cases": dict(self.cases), "unavailability_s": self.unavailability,
                "stats": self.stats}


def _reads(op: dict):
    """(partition, offset, value) of every record a poll or final read returned."""
    if op["f"] == "poll" and op["type"] == OK:
        for p, o, v in op["value"] or ():
            yield p, o, v
    elif op["f"] == "final-read" and op["type"] in (OK, INFO):
        for o, v in op["value"]["records"]:
            yield op["partition"], o, v


def check(ops: list[dict]) -> Result:
    r = Result()
    invokes = {op["index"]: op for op in ops if op["type"] == INVOKE}
    sends = [op for op in ops if op["f"] == "send" and op["type"] != INVOKE]
    acked = [op for op in ops if op["f"] == "send" and op["type"] == OK]
    failed_values = {op["value"] for op in sends if op["type"] == FAIL}
    trims = _trim_points(ops)

    # Version order: partition -> offset -> {value: first op index seen}.
    log: dict[int, dict[int, dict[str, int]]] = defaultdict(lambda: defaultdict(dict))
    for op in acked:
        if op["offset"] is None:
            r.add("ack-without-offset", op["partition"], value=op["value"], index=op["index"])
        else:
            log[op["partition"]][op["offset"]].setdefault(op["value"], op["index"])
    for op in ops:
        for p, o, v in _reads(op):
            log[p][o].setdefault(v, op["index"])

    where: dict[str, set] = defaultdict(set)
    for p, offsets in log.items():
        for o, values in offsets.items():
            if len(values) > 1:
                r.add("inconsistent-offsets", p, offset=o, values=sorted(values),
                      index=min(values.values()))
            for v in values:
                where[v].add((p, o))
    for v, places in where.items():
        if len(places) > 1:
            p = min(places)[0]
            r.add("duplicate", p, value=v, at=sorted(places), index=min(log[p][o][v] for p, o in places))
        if v in failed_values:
            p, o = min(places)
            r.add("aborted-read", p, value=v, offset=o, index=log[p][o][v])

    _lost_and_unseen(ops, acked, trims, r)
    _nonmonotonic_send([op for op in acked if op["offset"] is not None], invokes, r)
    _poll_order(ops, log, trims, r)
    _commits(ops, r)
    for op in ops:
        if op["f"] == "fatal":
            r.add("producer-fatal", None, process=op["process"], error=op["value"], index=op["index"])
        if op["f"] == "replicas" and not op["value"]["identical"]:
            # Shown around the acknowledgement of the first offset that differs, if any.
            first = [d["base_offset"] for d in (op["value"].get("first_difference") or {}).values() if d]
            acks = log.get(op["partition"], {}).get(min(first), {}) if first else {}
            r.add("replica-divergence", op["partition"], detail=op["value"],
                  index=min(acks.values(), default=op["index"]))
    r.unavailability = unavailability(ops)
    r.stats = stats(ops)
    return r


def _trim_points(ops: list[dict]) -> dict[int, list[tuple[int, int]]]:
    """partition -> [(op index, offset)] of DeleteRecords the nemesis sent
    (an unanswered one may have happened: it counts from its invocation)."""
    out: dict[int, list[tuple[int, int]]] = defaultdict(list)
    for op in ops:
        if op["f"] == "delete-records" and op["type"] == INVOKE:
            out[op["partition"]].append((op["index"], op["offset"]))
    return out


def _trimmed_below(trims: dict, partition: int, before_index: int | None = None) -> int:
    return max((o for i, o in trims.get(partition, ()) if before_index is None or i < before_index),
               default=0)


def _lost_and_unseen(ops: list[dict], acked: list[dict], trims: dict, r: Result) -> None:
    final = {op["partition"]: op for op in ops if op["f"] == "final-read"}
    for p in sorted({op["partition"] for op in acked} - set(final)):
        r.add("final-read-incomplete", p, detail="no final read", index=len(ops) - 1)
    for p, op in sorted(final.items()):
        if op["type"] != OK:
            r.add("final-read-incomplete", p, detail={k: v for k, v in op["value"].items() if k != "records"},
                  index=op["index"])
    final_values = {p: {v for _, v in op["value"]["records"]} for p, op in final.items()}
    polled = {v for op in ops if op["f"] == "poll" for _, _, v in _reads(op)}
    for op in acked:
        p = op["partition"]
        offset = op["offset"]
        if offset is None and _trimmed_below(trims, p) > 0:
            continue  # an unknown offset may be below the trim
        if offset is not None and offset < _trimmed_below(trims, p):
            continue
        read = final.get(p)
        # An incomplete final read vouches only for the offsets it reached;
        # a complete one for everything (an acknowledged offset at or past
        # the high watermark is lost too).
        covered = read is not None and (read["type"] == OK or (
            offset is not None and offset < read["value"]["next_offset"]))
        if covered and op["value"] not in final_values[p]:
            r.add("lost-write", p, value=op["value"], offset=op["offset"], index=op["index"])
        if op["value"] not in polled:
            r.add("unseen", p, value=op["value"], offset=op["offset"], index=op["index"])


def _nonmonotonic_send(acked: list[dict], invokes: dict, r: Result) -> None:
    last: dict[tuple[str, int], dict] = {}
    for op in sorted(acked, key=lambda op: op.get("invoke", op["index"])):
        key = (op["process"], op["partition"])
        prev = last.get(key)
        if prev is not None and op["offset"] <= prev["offset"]:
            r.add("nonmonotonic-send", op["partition"], process=op["process"],
                  values=[prev["value"], op["value"]], offsets=[prev["offset"], op["offset"]],
                  index=op["index"])
        last[key] = op


def _poll_order(ops: list[dict], log: dict, trims: dict, r: Result) -> None:
    known = {p: sorted(offsets) for p, offsets in log.items()}
    last: dict[str, dict[int, tuple[int, int]]] = defaultdict(dict)  # process -> p -> (offset, op)
    for op in ops:
        proc = op["process"]
        if op["f"] in RESETS and op["type"] == OK:
            parts = op.get("partitions")
            if parts is None:
                last[proc].clear()
            else:
                for p in parts:
                    last[proc].pop(p, None)
            continue
        if op["f"] not in ("poll", "final-read") or op["type"] not in (OK, INFO):
            continue
        fresh = set(op.get("rebalanced") or ())
        if op["f"] == "final-read":
            fresh.add(op["partition"])
        for p, o, v in _reads(op):
            if p in fresh:
                fresh.discard(p)
                last[proc].pop(p, None)
            prev = last[proc].get(p)
            last[proc][p] = (o, op["index"])
            if prev is None:
                continue
            po, pidx = prev
            if o <= po:
                r.add("nonmonotonic-poll", p, process=proc, offsets=[po, o], value=v,
                      ops=[pidx, op["index"]], index=op["index"])
            elif o > po + 1:
                floor = _trimmed_below(trims, p, op["index"])
                ks = known.get(p, [])
                lo = bisect.bisect_right(ks, max(po, floor - 1))
                hi = bisect.bisect_left(ks, o)
                if hi > lo:
                    r.add("poll-skip", p, process=proc, offsets=[po, o], skipped=ks[lo:min(hi, lo + 10)],
                          skipped_count=hi - lo, ops=[pidx, op["index"]], index=op["index"])


def _commits(ops: list[dict], r: Result) -> None:
    """Committed offsets only move forward: a commit acknowledged before
    another was sent bounds the later one from below."""
    high: dict[tuple[str, int], tuple[int, int]] = {}  # (group, p) -> (offset, op index)
    floor_at_invoke: dict[int, dict] = {}
    for op in ops:
        if op["f"] != "commit":
            continue
        group = op.get("group")
        if op["type"] == INVOKE:
            floor_at_invoke[op["index"]] = {p: high.get((group, int(p))) for p in op["value"]}
        elif op["type"] == OK:
            floors = floor_at_invoke.get(op.get("invoke"), {})
            for p, offset in op["value"].items():
                p = int(p)
                floor = floors.get(str(p))
                if floor is not None and offset < floor[0]:
                    r.add("commit-backwards", p, group=group, process=op["process"],
                          offsets=[floor[0], offset], ops=[floor[1], op["index"]], index=op["index"])
                if offset > high.get((group, p), (-1, 0))[0]:
                    high[(group, p)] = (offset, op["index"])


def unavailability(ops: list[dict], f: str = "send", place=lambda op: op["partition"]) -> dict[int, dict]:
    """Per partition (``place`` of an op): the longest stretch during which
    operations `f` (sends) were outstanding and none was acknowledged (from
    the first outstanding invocation, or the last acknowledgement, to the
    next acknowledgement, or to the end of the history), in seconds, and
    when it began. Quiet producers are not unavailability."""
    events: dict[int, list[tuple[int, int, str]]] = defaultdict(list)
    end = 0
    for op in ops:
        end = max(end, op["time"])
        if op["f"] == f:
            events[place(op)].append((op["time"], op["index"], op["type"]))
    out = {}
    for p, evs in sorted(events.items()):
        pending, since, best = 0, None, (0, 0)
        for t, _, type_ in sorted(evs):
            if type_ == INVOKE:
                pending += 1
                if since is None:
                    since = t
                continue
            pending -= 1
            if since is not None:
                best = max(best, (t - since, since))
            since = t if (type_ == OK and pending > 0) else (since if pending > 0 else None)
        if since is not None:
            best = max(best, (end - since, since))
        out[p] = {"longest_s": round(best[0] / 1e9, 3), "from_s": round(best[1] / 1e9, 3)}
    return out


def stats(ops: list[dict]) -> dict:
    by = defaultdict(int)
    faults = defaultdict(int)
    for op in ops:
        if op["process"] == "nemesis":
            if op["type"] == INVOKE and op["f"] not in ("heal", "delete-records"):
                faults[op["f"]] += 1
        else:
            by[f"{op['f']}:{op['type']}"] += 1
    return {"ops": dict(sorted(by.items())), "faults": dict(sorted(faults.items())),
            "acknowledged": by.get("send:ok", 0)}
