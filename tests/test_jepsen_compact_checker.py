"""The compaction workload's checker (tests/jepsen/compact_checker.py)
against hand-made histories, no processes: a valid history of a compacted
log (offsets with gaps, a tombstone gone, replicas cleaned differently)
reports nothing, and each anomaly planted on its own is reported under its
name. Also the stored-record parser the replicas' comparison reads."""

from __future__ import annotations

import pytest

import kwire
from jepsen import compact_checker
from jepsen.compact_workload import stored_records
from jepsen.history import FAIL, INFO, INVOKE, OK, History


class Story:
    """Builds a history the way compact_workload.py records one; every key
    lives in partition 0."""

    def __init__(self):
        self.h = History()
        self.seq = 0

    def send(self, proc: str, key: str, offset: int | None, type_: str = OK, tombstone: bool = False,
             p: int = 0) -> str:
        wid = f"{key}:{proc}:{self.seq:06d}"
        self.seq += 1
        inv = self.h.add(proc, INVOKE, "send", wid, partition=p, key=key, tombstone=tombstone)
        if type_ == OK:
            self.h.complete(inv, OK, offset=offset)
        elif type_ is not None:
            self.h.complete(inv, type_)
        return wid

    def rec(self, offset: int, wid: str, tombstone: bool = False) -> list:
        return [offset, wid.split(":")[0], None if tombstone else wid, wid]

    def read(self, records: list[list], f: str = "read", proc: str = "reader-0", complete: bool = True,
             p: int = 0) -> None:
        hw = records[-1][0] + 1 if records else 0
        self.h.add("final" if f == "final-read" else proc, OK if complete else INFO, f,
                   {"log_start": 0, "high_watermark": hw, "next_offset": hw, "records": records,
                    "errors": []}, partition=p)

    def replicas(self, stored: dict[str, list[list]], p: int = 0) -> None:
        self.h.add("final", OK, "replica-records", {"replicas": stored}, partition=p)

    def cleaner(self, passes: int = 3) -> None:
        self.h.add("cleaner", OK, "cleaner", {"passes": {"1": {"0": passes}, "2": {"0": 0}}})

    def check(self) -> compact_checker.checker.Result:
        return compact_checker.check(self.h.ops)


def reported(result) -> dict[str, int]:
    return {k: v for k, v in result.counts.items()
            if v and k in compact_checker.ANOMALIES}


def clean_story() -> tuple[Story, dict]:
    """Two producers over keys a, b, c: b's last write a tombstone that
    is gone by the end, a write of c indeterminate and read at the end;
    a reader sees the whole log early and a compacted one later; the
    replicas cleaned differently but agree."""
    s = Story()
    w = {}
    w["a0"] = s.send("p0", "a", 0)
    w["b0"] = s.send("p1", "b", 1)
    w["a1"] = s.send("p0", "a", 2)
    w["c0"] = s.send("p1", "c", 3)
    w["b1"] = s.send("p1", "b", 4, tombstone=True)
    w["c1"] = s.send("p0", "c", None, type_=INFO)  # timed out, yet written at 5
    w["x"] = s.send("p0", "a", None, type_=FAIL)  # definitely not written
    full = [s.rec(0, w["a0"]), s.rec(1, w["b0"]), s.rec(2, w["a1"]), s.rec(3, w["c0"]),
            s.rec(4, w["b1"], tombstone=True), s.rec(5, w["c1"])]
    s.read(full)
    compacted = [s.rec(2, w["a1"]), s.rec(4, w["b1"], tombstone=True), s.rec(5, w["c1"])]
    s.read(compacted, proc="reader-1")
    s.cleaner()
    final = [s.rec(2, w["a1"]), s.rec(5, w["c1"])]  # b's tombstone gone after delete.retention.ms
    s.read(final, f="final-read")
    s.replicas({"1": final, "2": compacted, "3": full})
    s.h.add("final", OK, "replicas", {"identical": False, "bytes": {"1": 10, "2": 20}}, partition=0)
    return s, w


def test_a_valid_compacted_history_reports_nothing():
    s, _ = clean_story()
    r = s.check()
    assert reported(r) == {}, r.cases
    assert r.valid
    # What compaction removed, and the bytes the replicas differ in, are told, not anomalies.
    assert r.counts["compacted-away"] == 4  # a0, b0, c0 and the tombstone b1
    assert r.counts["replica-bytes-differ"] == 1
    assert r.stats["cleaner_passes"] == 3


def planted(mutate) -> dict[str, int]:
    s, w = clean_story()
    mutate(s, w)
    return reported(s.check())


def test_an_older_value_as_the_latest_is_lost_latest():
    def older(s, w):
        s.read([s.rec(0, w["a0"]), s.rec(5, w["c1"])], f="final-read")  # a1 gone, a0 kept: resurrected
    assert planted(older).get("lost-latest") == 1


def test_an_absent_key_whose_last_write_was_a_value_is_lost_latest():
    def absent(s, w):
        s.read([s.rec(5, w["c1"])], f="final-read")
    assert planted(absent).get("lost-latest") == 1


def test_a_value_older_than_an_acknowledged_tombstone_is_lost_latest():
    def resurrected(s, w):
        s.read([s.rec(1, w["b0"]), s.rec(2, w["a1"]), s.rec(5, w["c1"])], f="final-read")
    assert planted(resurrected).get("lost-latest") == 1


def test_a_value_nobody_wrote_is_a_phantom():
    def phantom(s, w):
        s.read([[6, "a", "a:p9:000001", "a:p9:000001"]], proc="reader-1")
    assert planted(phantom) == {"phantom": 1}


def test_a_record_under_another_key_or_with_another_value_is_a_phantom():
    def wrong_key(s, w):
        s.read([[2, "b", w["a1"], w["a1"]]], proc="reader-1")

    def wrong_value(s, w):
        s.read([[2, "a", None, w["a1"]]], proc="reader-1")  # a value read as a tombstone
    assert planted(wrong_key).get("phantom") == 1
    assert planted(wrong_value).get("phantom") == 1


def test_a_replica_storing_a_record_nobody_wrote_holds_a_phantom():
    def stored(s, w):
        # Offset 6 is held by replica 1 alone and no ack or read names it.
        s.replicas({"1": [s.rec(2, w["a1"]), s.rec(5, w["c1"]), [6, "c", "c:p9:000009", "c:p9:000009"]],
                    "2": [s.rec(2, w["a1"]), s.rec(5, w["c1"])]})
    assert planted(stored) == {"phantom": 1, "replica-latest-differs": 1}


def test_a_replica_storing_another_write_at_an_acknowledged_offset_is_inconsistent():
    def moved(s, w):
        # c0 was acknowledged at 3; replica 1 alone holds 3, with b's
        # tombstone there (its latest values still agree).
        s.replicas({"1": [s.rec(2, w["a1"]), s.rec(3, w["b1"], tombstone=True), s.rec(5, w["c1"])],
                    "2": [s.rec(2, w["a1"]), s.rec(5, w["c1"])]})
    assert planted(moved) == {"inconsistent-offsets": 1}


def test_a_definitely_failed_write_read_is_an_aborted_read():
    def aborted(s, w):
        s.read([s.rec(6, w["x"])], proc="reader-1")
    assert planted(aborted).get("aborted-read") == 1


def test_one_producers_writes_of_a_key_out_of_order_is_per_key_reorder():
    s = Story()
    first = s.send("p0", "a", None, type_=INFO)
    second = s.send("p0", "a", 0)
    s.read([s.rec(0, second), s.rec(1, first)])  # the earlier send landed after the later one
    s.cleaner()
    s.read([s.rec(0, second), s.rec(1, first)], f="final-read")
    assert reported(s.check()) == {"per-key-reorder": 1}


def test_two_writes_at_one_offset_are_inconsistent_offsets():
    def two(s, w):
        s.read([s.rec(2, w["a0"])], proc="reader-1")  # a0 was acknowledged at 0, a1 at 2
    found = planted(two)
    assert found.get("inconsistent-offsets") == 1
    assert found.get("duplicate") == 1  # a0 at 0 and at 2


def test_one_write_at_two_offsets_is_a_duplicate():
    def dup(s, w):
        s.read([s.rec(5, w["c1"]), s.rec(7, w["c1"])], proc="reader-1")
    assert planted(dup).get("duplicate") == 1


def test_offsets_going_back_in_one_read_is_nonmonotonic_read():
    def back(s, w):
        s.read([s.rec(2, w["a1"]), s.rec(0, w["a0"])], proc="reader-1")
    assert planted(back).get("nonmonotonic-read") == 1


def test_an_incomplete_final_read_is_reported():
    def short(s, w):
        s.h.ops = [op for op in s.h.ops if op["f"] != "final-read"]
        s.read([s.rec(2, w["a1"])], f="final-read", complete=False)
    assert planted(short).get("final-read-incomplete") == 1


def test_replicas_holding_different_records_at_one_offset_disagree():
    def differ(s, w):
        s.replicas({"1": [s.rec(2, w["a1"]), s.rec(5, w["c1"])], "2": [s.rec(2, w["a0"]), s.rec(5, w["c1"])]})
    assert planted(differ).get("replica-disagreement") == 1


def test_replicas_with_different_latest_values_per_key_are_reported():
    def stale(s, w):
        # Replica 2 kept a0 and dropped a1: each offset agrees, the latest does not.
        s.replicas({"1": [s.rec(2, w["a1"]), s.rec(5, w["c1"])], "2": [s.rec(0, w["a0"]), s.rec(5, w["c1"])]})
    assert planted(stale) == {"replica-latest-differs": 1}


def test_a_replica_whose_latest_differs_from_the_final_read_is_reported():
    def behind(s, w):
        s.replicas({"1": [s.rec(2, w["a1"])], "2": [s.rec(2, w["a1"])]})  # c1 missing on both
    assert planted(behind) == {"replica-latest-differs": 1}


def test_an_unreadable_replica_is_reported():
    def unreadable(s, w):
        s.h.add("final", INFO, "replica-records", {"error": "ValueError()"}, partition=0)
    assert planted(unreadable) == {"replica-unreadable": 1}


def test_a_run_without_a_cleaner_pass_proves_nothing():
    def idle(s, w):
        s.h.ops = [op for op in s.h.ops if op["f"] != "cleaner"]
        s.h.add("cleaner", OK, "cleaner", {"passes": {"1": {"0": 0}}})
    assert planted(idle) == {"cleaner-idle": 1}


def test_stored_records_reads_keys_values_ids_and_gaps():
    def rec(key, value, wid):
        return kwire.Record(key, value, [("id", wid)])
    raw = (kwire.record_batch([rec(b"a", b"a:p0:000001", b"a:p0:000001"), rec(b"b", None, b"b:p0:000002")],
                              base_offset=10)
           + kwire.record_batch([rec(b"c", b"c:p1:000003", b"c:p1:000003")], base_offset=20))
    assert stored_records(raw) == [[10, "a", "a:p0:000001", "a:p0:000001"], [11, "b", None, "b:p0:000002"],
                                   [20, "c", "c:p1:000003", "c:p1:000003"]]


@pytest.mark.parametrize("tombstone", [False, True])
def test_latest_view_leaves_tombstoned_keys_out(tombstone):
    view = compact_checker.latest_view([[0, "a", "a:1", "a:1"], [3, "a", None if tombstone else "a:2", "a:2"]])
    assert view == ({} if tombstone else {"a": "a:2"})
