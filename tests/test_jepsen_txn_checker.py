"""The transactional checker (tests/jepsen/txn_checker.py) against
synthetic histories, no processes: a clean history with committed, aborted
and indeterminate transactions reports no anomaly, and each anomaly planted
on its own is reported under its name."""

from __future__ import annotations

import json

from jepsen import final, txn_checker
from jepsen.history import FAIL, INFO, INVOKE, OK, History, around

RC, RU = "read_committed", "read_uncommitted"


class Story:
    """Builds a history the way txn_workload.py and run.py record one."""

    def __init__(self):
        self.h = History()

    def txn(self, proc: str, txn_id: str, writes: list[tuple[str, str, int | None]], type_: str | None,
            end: str = "commit", **fields) -> None:
        """writes: (key, value, acknowledged offset); type_ None: never completed."""
        value = {"id": txn_id, "writes": [[k, v] for k, v, _ in writes], "end": end, **fields}
        inv = self.h.add(proc, INVOKE, "txn", value)
        if type_ is not None:
            self.h.complete(inv, type_, dict(value, offsets=[o for _, _, o in writes], errors=[],
                                             outcome={OK: "committed", FAIL: "aborted"}.get(type_, "indeterminate")))

    def poll(self, proc: str, records: list[tuple[str, int, str]], rebalanced=()) -> None:
        self.h.add(proc, OK, "poll", [list(r) for r in records], rebalanced=list(rebalanced))

    def final(self, key: str, records: list[tuple[int, str]], isolation: str, high: int,
              complete: bool = True) -> None:
        nxt = high if complete else (records[-1][0] + 1 if records else 0)
        self.h.add("final", OK if complete else INFO, "final-read",
                   {"log_start": 0, "high_watermark": high, "next_offset": nxt,
                    "records": [list(r) for r in records], "errors": []}, partition=key, isolation=isolation)

    def finals(self, logs: dict[str, list[tuple[int, str, bool]]], highs: dict[str, int]) -> None:
        """logs: key -> (offset, value, committed) as stored; both final reads."""
        for k, log in logs.items():
            self.final(k, [(o, v) for o, v, c in log if c], RC, highs[k])
        for k, log in logs.items():
            self.final(k, [(o, v) for o, v, _ in log], RU, highs[k])

    def check(self):
        return txn_checker.check(self.h.ops)


# The log each clean story's final reads find; offsets between values hold
# transaction markers (control records no reader returns).
LOGS = {
    "a/0": [(0, "t0-0", True), (2, "t1-0", False)],
    "b/0": [(0, "t0-1", True), (2, "t2-1", True)],
    "a/1": [(0, "t1-1", False), (2, "t2-0", True), (4, "t3-0", False)],
}
HIGHS = {"a/0": 4, "b/0": 4, "a/1": 6}


def clean_story(finals: bool = True) -> Story:
    """t0 committed; t1 aborted; t2 indeterminate (its commit timed out)
    and committed after all, read by a consumer; t3 indeterminate and never
    committed (aborted when the producer was replaced), seen by no one."""
    s = Story()
    s.txn("txn-0", "t0", [("a/0", "t0-0", 0), ("b/0", "t0-1", 0)], OK)
    s.txn("txn-1", "t1", [("a/0", "t1-0", 2), ("a/1", "t1-1", 0)], FAIL, end="abort")
    s.txn("txn-0", "t2", [("a/1", "t2-0", 2), ("b/0", "t2-1", 2)], INFO)
    s.txn("txn-1", "t3", [("a/1", "t3-0", 4), ("b/1", "t3-1", None)], None)
    s.h.add("txn-1", INFO, "replace", "commit: _TIMED_OUT")
    s.h.add("assign-0", OK, "assign", "from-beginning", partitions=["a/0", "a/1", "b/0", "b/1"])
    s.poll("assign-0", [("a/0", 0, "t0-0"), ("b/0", 0, "t0-1")])
    s.poll("assign-0", [("a/1", 2, "t2-0"), ("b/0", 2, "t2-1")])  # past markers and aborted records
    s.h.add("group-0", OK, "rebalance", "assigned", partitions=["a/0", "b/0"], group="g")
    s.poll("group-0", [("a/0", 0, "t0-0"), ("b/0", 0, "t0-1"), ("b/0", 2, "t2-1")], rebalanced=["a/0", "b/0"])
    if finals:
        s.finals({**LOGS, "b/1": []}, {**HIGHS, "b/1": 0})
    return s


def reported(r) -> dict[str, int]:
    return {k: v for k, v in r.counts.items() if v}


def test_a_clean_history_reports_no_anomaly():
    r = clean_story().check()
    assert r.valid, r.to_json()
    assert reported(r) == {"indeterminate": 2, "aborted-in-log": 2, "producer-replaced": 1}, reported(r)
    assert r.stats["transactions"] == {"committed": 1, "aborted": 1, "indeterminate": 2}
    assert r.stats["acknowledged"] == 2


def test_G1a_a_consumer_reads_a_value_of_an_aborted_transaction():
    s = clean_story()
    s.poll("assign-1", [("a/0", 2, "t1-0")])
    r = s.check()
    assert r.counts["G1a"] == 1 and r.cases["G1a"][0]["txn"] == "t1", r.to_json()
    # t1's other value stays hidden, as an aborted transaction's should.
    assert r.counts["lost-write"] == 0 and r.counts["torn-transaction"] == 0, r.to_json()


def test_G1a_the_read_committed_final_read_holds_an_aborted_value():
    s = clean_story(finals=False)
    logs = {**LOGS, "b/1": []}
    logs["a/1"] = [(0, "t1-1", True), (2, "t2-0", True), (4, "t3-0", False)]  # t1-1 read as committed
    s.finals(logs, {**HIGHS, "b/1": 0})
    r = s.check()
    assert r.counts["G1a"] == 1 and r.cases["G1a"][0]["value"] == "t1-1", r.to_json()


def test_aborted_values_in_the_read_uncommitted_final_read_are_no_anomaly():
    r = clean_story().check()
    assert r.counts["aborted-in-log"] == 2 and r.counts["G1a"] == 0


def test_lost_write_a_committed_transaction_missing_from_the_final_read():
    s = clean_story(finals=False)
    s.txn("txn-0", "t4", [("a/0", "t4-0", 4), ("b/1", "t4-1", 0)], OK)  # acknowledged, never stored
    s.finals({**LOGS, "b/1": []}, {**HIGHS, "b/1": 0})
    r = s.check()
    assert r.counts["lost-write"] == 2 and r.counts["torn-transaction"] == 0, r.to_json()
    assert {c["value"] for c in r.cases["lost-write"]} == {"t4-0", "t4-1"}


def test_lost_write_an_indeterminate_transaction_read_by_a_consumer_then_gone():
    """Reading a value of an indeterminate transaction is allowed: it then
    committed, so all its values must be in the final read."""
    s = clean_story(finals=False)
    s.poll("assign-1", [("a/1", 4, "t3-0")])  # t3 seen committed ...
    s.finals({**LOGS, "b/1": []}, {**HIGHS, "b/1": 0})  # ... and not in the final read
    r = s.check()
    assert {c["value"] for c in r.cases["lost-write"]} == {"t3-0", "t3-1"}, r.to_json()
    assert r.counts["lost-write"] == 2 and r.counts["G1a"] == 0


def test_an_indeterminate_transaction_wholly_absent_is_no_anomaly():
    r = clean_story().check()
    assert r.counts["lost-write"] == 0 and r.counts["torn-transaction"] == 0
    assert [c["txn"] for c in r.cases["indeterminate"]] == ["t2", "t3"]


def test_torn_transaction_committed_values_on_one_partition_only():
    s = clean_story(finals=False)
    logs = {**LOGS, "b/1": []}
    logs["b/0"] = [(0, "t0-1", False), (2, "t2-1", True)]  # t0's value hidden on b/0, visible on a/0
    s.finals(logs, {**HIGHS, "b/1": 0})
    r = s.check()
    assert r.counts["torn-transaction"] == 1 and r.cases["torn-transaction"][0]["txn"] == "t0", r.to_json()


def test_torn_transaction_read_on_one_partition_absent_on_another_after_draining():
    s = clean_story(finals=False)
    logs = {**LOGS, "b/1": []}
    logs["b/0"] = [(0, "t0-1", True), (2, "t2-1", False)]  # t2 read on a/1 and b/0, gone from b/0
    s.finals(logs, {**HIGHS, "b/1": 0})
    r = s.check()
    assert r.counts["torn-transaction"] == 1, r.to_json()
    case = r.cases["torn-transaction"][0]
    assert case["txn"] == "t2" and case["missing"] == [["b/0", "t2-1"]], case


def test_duplicate_one_value_at_two_offsets():
    s = clean_story()
    s.poll("assign-1", [("a/1", 6, "t2-0")])
    r = s.check()
    assert r.counts["duplicate"] == 1 and r.cases["duplicate"][0]["value"] == "t2-0", r.to_json()


def test_inconsistent_offsets_two_values_at_one_offset():
    s = clean_story()
    s.poll("assign-1", [("b/0", 2, "someone-else")])
    assert s.check().counts["inconsistent-offsets"] == 1


def test_nonmonotonic_poll_a_consumer_reads_a_partition_backwards():
    s = clean_story()
    s.poll("assign-0", [("a/0", 0, "t0-0")])  # assign-0 read a/0 offset 0 already
    r = s.check()
    assert r.counts["nonmonotonic-poll"] == 1, r.to_json()


def test_poll_skip_a_consumer_jumps_over_a_committed_value():
    s = clean_story(finals=False)
    s.txn("txn-0", "t5", [("b/0", "t5-0", 4)], OK)
    s.poll("assign-1", [("b/0", 0, "t0-1")])
    s.poll("assign-1", [("b/0", 4, "t5-0")])  # t2-1 at 2 is committed
    logs = {**LOGS, "b/1": []}
    logs["b/0"] = LOGS["b/0"] + [(4, "t5-0", True)]
    s.finals(logs, {**HIGHS, "b/0": 6, "b/1": 0})
    r = s.check()
    assert r.counts["poll-skip"] == 1 and r.cases["poll-skip"][0]["skipped"] == [2], r.to_json()


def test_skipping_an_aborted_value_another_consumer_read_is_G1a_not_poll_skip():
    """Seed 29 on 3 nodes: one consumer skipped an aborted transaction (right),
    another read it (G1a): the skip is no anomaly of its own."""
    s = clean_story()
    s.poll("assign-1", [("a/0", 0, "t0-0"), ("a/0", 2, "t1-0")])  # G1a
    s.h.add("assign-2", OK, "assign", "from-beginning", partitions=["a/0"])
    s.txn("txn-0", "t7", [("a/0", "t7-0", 6)], OK)
    s.poll("assign-2", [("a/0", 0, "t0-0")])
    s.poll("assign-2", [("a/0", 6, "t7-0")])  # past the aborted t1-0 at 2
    r = s.check()
    assert r.counts["G1a"] == 1 and r.counts["poll-skip"] == 0, r.to_json()


def test_skipping_markers_and_aborted_records_is_no_poll_skip():
    r = clean_story().check()  # assign-0 went a/1 0 -> 2 and b/0 0 -> 2
    assert r.counts["poll-skip"] == 0 and r.counts["nonmonotonic-poll"] == 0


def test_final_read_incomplete_is_an_anomaly():
    s = clean_story(finals=False)
    s.finals({**LOGS, "b/1": []}, {**HIGHS, "b/1": 0})
    s.h.ops = [op for op in s.h.ops if not (op["f"] == "final-read" and op["partition"] == "a/1"
                                            and op["isolation"] == RU)]
    s.final("a/1", [(0, "t1-1")], RU, 6, complete=False)
    r = s.check()
    assert r.counts["final-read-incomplete"] == 1, r.to_json()


def test_final_read_incomplete_when_a_written_partition_has_none():
    s = clean_story(finals=False)
    s.finals(LOGS, HIGHS)  # nothing read of b/1, which t3 wrote to
    assert s.check().counts["final-read-incomplete"] == 2  # both isolations


def test_replica_divergence():
    s = clean_story()
    s.h.add("final", OK, "replicas", {"identical": False, "bytes": {"1": 10, "2": 12}}, partition="a/0")
    assert s.check().counts["replica-divergence"] == 1


def test_txn_index_divergence_replicas_hold_different_aborted_transactions():
    s = clean_story()
    s.h.add("final", OK, "txn-index", {"covers": {"1": 4, "2": 4, "3": 4}, "comparable": True, "identical": True},
            partition="a/0")
    assert s.check().counts["txn-index-divergence"] == 0
    s.h.add("final", OK, "txn-index", {"covers": {"1": 4, "2": 4, "3": 4}, "comparable": True, "identical": False,
                                       "aborted_lacking": {"2": [[1000, 2, 3]]}}, partition="a/0")
    s.h.add("final", OK, "txn-index", {"covers": {"1": 4, "2": 3}, "comparable": False, "errors": {}},
            partition="a/1")  # snapshots of different ends: told, not compared
    r = s.check()
    assert r.counts["txn-index-divergence"] == 1 and r.cases["txn-index-divergence"][0]["partition"] == "a/0"


def copier_story(second_copy_type: str) -> Story:
    """The copier copies t0-0 (a/0) into b/1 as c00000-t0-0, then again as
    c00001-t0-0 (as after a rewind) with `second_copy_type`."""
    s = clean_story(finals=False)
    s.poll("copier", [("a/0", 0, "t0-0")])
    s.txn("copier", "c00000", [("b/1", "c00000-t0-0", 0)], OK, copies=[["t0-0", "c00000-t0-0"]])
    s.h.add("copier", OK, "assign", "rewind", partitions=["a/0"])
    s.poll("copier", [("a/0", 0, "t0-0")])
    s.txn("copier", "c00001", [("b/1", "c00001-t0-0", 2)], second_copy_type, copies=[["t0-0", "c00001-t0-0"]])
    second = second_copy_type == OK
    s.finals({**LOGS, "b/1": [(0, "c00000-t0-0", True), (2, "c00001-t0-0", second)]}, {**HIGHS, "b/1": 4})
    return s


def test_duplicate_copy_two_committed_copies_of_one_source_value():
    r = copier_story(OK).check()
    assert r.counts["duplicate-copy"] == 1, r.to_json()
    assert r.cases["duplicate-copy"][0]["source"] == "t0-0"


def test_a_copy_aborted_then_made_again_is_no_duplicate():
    r = copier_story(FAIL).check()
    assert r.valid and r.counts["duplicate-copy"] == 0, r.to_json()


def test_indeterminate_counts_transactions_whose_outcome_is_unknown():
    assert clean_story().check().counts["indeterminate"] == 2


def test_aborted_in_log_counts_aborted_values_the_read_uncommitted_read_holds():
    assert clean_story().check().counts["aborted-in-log"] == 2


def test_unseen_a_committed_value_no_consumer_polled():
    s = clean_story(finals=False)
    s.txn("txn-0", "t6", [("b/1", "t6-0", 0)], OK)
    logs = {**LOGS, "b/1": [(0, "t6-0", True)]}
    s.finals(logs, {**HIGHS, "b/1": 2})
    r = s.check()
    assert r.valid and r.counts["unseen"] == 1, r.to_json()


def test_producer_replaced_is_information():
    r = clean_story().check()
    assert r.valid and r.counts["producer-replaced"] == 1


def test_every_anomaly_name_has_a_planted_test():
    names = {n.replace("-", "_") for n in txn_checker.ANOMALIES + txn_checker.INFORMATIONAL}
    tests = {name for name in globals() if name.startswith("test_")}
    missing = [n for n in names if not any(t.startswith(f"test_{n}") for t in tests)]
    assert not missing, missing


def test_the_history_around_a_G1a_shows_the_aborted_writer():
    s = clean_story()
    s.poll("assign-1", [("a/0", 2, "t1-0")])
    case = s.check().cases["G1a"][0]
    near = around(s.h.ops, case["writer_index"], case["partition"])
    # Its invocation too, found by partition (the completion is the centre).
    assert any(op["f"] == "txn" and op["value"]["id"] == "t1" and op["type"] == INVOKE for op in near), near


class StoppedCluster:
    """Just enough of HelixCluster for final.compare_txn_indexes."""

    def __init__(self, root):
        self.root = root
        self.nodes = [type("N", (), {"id": i})() for i in (1, 2, 3)]

    def wal_dirs(self, node, topic_dir):
        base = self.root / f"node{node.id}" / topic_dir
        return {int(p.name): p / "wal" for p in base.iterdir()} if base.exists() else {}


def snapshot(covers: int, aborted: list[tuple[int, int, int]], open_txns=()) -> str:
    return json.dumps({"covers": covers, "producers": {
        "aborted": [{"producer_id": pid, "first_offset": a, "last_offset": b} for pid, a, b in aborted],
        "open_txns": [list(o) for o in open_txns]}})


def test_txn_indexes_are_compared_from_the_stopped_replicas_snapshots(tmp_path):
    """Seed 29's shape: one replica lacks an abort the others hold; another
    partition agrees; a third has snapshots of different log ends."""
    states = {0: [snapshot(9, [(1000, 2, 3)])] * 2 + [snapshot(9, [])],
              1: [snapshot(5, [(0, 1, 2)], [(3, 7)])] * 3,
              2: [snapshot(5, []), snapshot(5, []), snapshot(4, [])]}
    for p, per_node in states.items():
        for n, text in enumerate(per_node, start=1):
            d = tmp_path / f"node{n}" / "topicid" / str(p)
            (d / "wal").mkdir(parents=True)
            (d / "derived-state.json").write_text(text)
    h = History()
    final.compare_txn_indexes(StoppedCluster(tmp_path), "t", "topicid", h, key=lambda t, p: f"{t}/{p}")
    by = {op["partition"]: op["value"] for op in h.ops}
    assert by["t/0"]["aborted_lacking"] == {"3": [(1000, 2, 3)]} and not by["t/0"]["identical"], by
    assert by["t/1"]["identical"] and not by["t/2"]["comparable"], by
    assert txn_checker.check(h.ops).counts["txn-index-divergence"] == 1
