"""Markdown rows for docs/RELIABILITY.md from run reports (``--report``
files, or the JSON lines tests/test_jepsen.py appends to
$HELIX_JEPSEN_REPORT):

    python3 tests/jepsen/table.py out1.json out2.json ...

Where the history (``out1.history.jsonl``) is beside a report, it is checked
again with the current checker (txn_checker.py for ``--workload txn``), so
rows of older runs use today's rules. A txn run's own anomaly names go to
the errors cell when not 0.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from jepsen import checker, txn_checker  # noqa: E402
from jepsen.checker import ANOMALIES, INFORMATIONAL  # noqa: E402
from jepsen.history import History  # noqa: E402

SHORT = {"lost-write": "lost", "duplicate": "dup", "inconsistent-offsets": "incons",
         "nonmonotonic-send": "nm-send", "nonmonotonic-poll": "nm-poll", "poll-skip": "skip",
         "commit-backwards": "commit-back", "aborted-read": "aborted", "final-read-incomplete": "final-incompl",
         "replica-divergence": "diverge", "unseen": "unseen", "producer-fatal": "fatal"}
# The table's count columns; a newer informational count (ack-without-offset)
# goes to the errors cell when it is not 0, so the rows of older runs line up.
COLUMNS = [n for n in ANOMALIES + INFORMATIONAL if n in SHORT]


def header() -> str:
    cols = ["seed", "nodes", "duration", "operations", "faults by kind", "acknowledged"]
    cols += [SHORT[n] for n in COLUMNS] + ["longest unavailability (partition)", "errors"]
    return "| " + " | ".join(cols) + " |\n|" + "---|" * len(cols)


def row(report: dict) -> str:
    check = report["check"]
    st = check["stats"]
    ops = sum(v for k, v in st["ops"].items() if not k.endswith(":invoke"))
    faults = ", ".join(f"{k} {v}" for k, v in st["faults"].items()) or "none"
    worst = max(check["unavailability_s"].items(), key=lambda kv: kv[1]["longest_s"], default=None)
    where = f"p{worst[0]}" if worst and str(worst[0]).isdigit() else worst and worst[0]
    unavail = f"{worst[1]['longest_s']} s ({where})" if worst else "-"
    cells = [str(report["seed"]), str(report["nodes"]), f"{report['duration_s']:g} s", str(ops), faults,
             str(st["acknowledged"])]
    cells += [str(check["counts"].get(n, "-")) for n in COLUMNS]
    notes = [e[:80] for e in report["errors"]]
    notes += [f"{n} {c}" for n, c in check["counts"].items() if n not in COLUMNS and c]
    cells += [unavail, "; ".join(notes) or "-"]
    return "| " + " | ".join(cells) + " |"


def main(paths: list[str]) -> None:
    print(header())
    for path in paths:
        text = Path(path).read_text()
        reports = [json.loads(text)] if text.lstrip().startswith("{\n") else [
            json.loads(line) for line in text.splitlines() if line.strip()]
        history = Path(path).with_suffix(".history.jsonl")
        for report in reports:
            if len(reports) == 1 and history.exists():
                check = txn_checker.check if report.get("workload") == "txn" else checker.check
                report["check"] = check(History.load(history).ops).to_json()
            print(row(report))


if __name__ == "__main__":
    main(sys.argv[1:])
