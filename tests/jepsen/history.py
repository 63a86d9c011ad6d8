"""An append-only, thread-safe history of operations, Jepsen's model.

Each operation is a dict with ``index`` (position in the history), ``time``
(monotonic ns since the history began), ``process`` (who did it: a producer,
a consumer, the nemesis, the final read), ``type`` (``invoke``, then one of
``ok``, ``fail`` — definitely did not happen — or ``info`` — may or may not
have happened), ``f`` (``send``, ``poll``, ``commit``, ``assign``,
``subscribe``, ``rebalance``, or a fault kind for the nemesis) and ``value``.
Sends also carry ``partition`` and, once acknowledged, ``offset``. A poll's
value is a list of ``[partition, offset, value]`` in the order the client
returned them. Completions name their invocation in ``invoke``.
"""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any, Iterable

INVOKE, OK, FAIL, INFO = "invoke", "ok", "fail", "info"


class History:
    def __init__(self, ops: Iterable[dict] | None = None):
        self._lock = threading.Lock()
        self._start_ns = time.monotonic_ns()
        self.ops: list[dict] = []
        for op in ops or ():
            self.ops.append(dict(op, index=len(self.ops)))

    def add(self, process: str, type_: str, f: str, value: Any = None, **fields: Any) -> dict:
        """Appends one operation and returns it (with its index and time)."""
        op = {"process": process, "type": type_, "f": f, "value": value, **fields}
        with self._lock:
            op["index"] = len(self.ops)
            op["time"] = time.monotonic_ns() - self._start_ns
            self.ops.append(op)
        return op

    def complete(self, invoke: dict, type_: str, value: Any = None, **fields: Any) -> dict:
        """The completion of `invoke`: same process, f and partition."""
        extra = {k: invoke[k] for k in ("partition",) if k in invoke}
        extra.update(fields)
        return self.add(invoke["process"], type_, invoke["f"],
                        invoke["value"] if value is None else value, invoke=invoke["index"], **extra)

    def snapshot(self) -> list[dict]:
        with self._lock:
            return list(self.ops)

    def __len__(self) -> int:
        return len(self.ops)

    def dump(self, path: Path) -> None:
        with open(path, "w") as f:
            for op in self.snapshot():
                f.write(json.dumps(op, separators=(",", ":")) + "\n")

    @classmethod
    def load(cls, path: Path) -> "History":
        with open(path) as f:
            return cls(json.loads(line) for line in f if line.strip())


def touches(op: dict, partition: int | None) -> bool:
    """Whether `op` concerns `partition` (the nemesis concerns everything)."""
    if partition is None or op["process"] == "nemesis" or op.get("partition") == partition:
        return True
    if op["f"] == "poll":
        return any(p == partition for p, _, _ in op["value"] or ())
    if op["f"] == "commit":
        return str(partition) in (op["value"] or {})
    if op["f"] == "txn":  # the transactional workload: writes are [key, value]
        return any(k == partition for k, _ in op["value"]["writes"])
    return False


def around(ops: list[dict], index: int, partition: int | None = None, before: int = 5, after: int = 5,
           window: int = 2000) -> list[dict]:
    """The history around op `index` for an anomaly's report: the ops that
    concern its partition (and the nemesis's), `before` and `after` it."""
    lo = [op for op in ops[max(0, index - window):index] if touches(op, partition)][-before:]
    hi = [op for op in ops[index + 1:index + 1 + window] if touches(op, partition)][:after]
    return lo + [ops[index]] + hi


def format_ops(ops: list[dict]) -> str:
    lines = []
    for op in ops:
        where = ""
        if op.get("partition") is not None:
            where = f" p{op['partition']}"
            if op.get("offset") is not None:
                where += f"@{op['offset']}"
        value = op.get("value")
        text = json.dumps(value)
        if len(text) > 160:
            text = text[:157] + "..."
        lines.append(f"  #{op['index']:<6} {op['time'] / 1e9:9.3f}s {op['process']:<12} "
                     f"{op['type']:<6} {op['f']:<10}{where} {text}")
    return "\n".join(lines)
