"""The Jepsen-style checker (tests/jepsen/checker.py) against synthetic
histories, no processes: a clean history reports nothing, and each anomaly
planted on its own is reported under its name (a checker that cannot fail
is worthless). Also the nemesis's schedule (a function of the seed) and its
lost-page-cache fault on a made-up WAL directory."""

from __future__ import annotations

import random
import struct

import pytest

import kwire
from jepsen import checker, final, nemesis
from jepsen.history import FAIL, INFO, INVOKE, OK, History, around


class Story:
    """Builds a history the way the workload records one."""

    def __init__(self):
        self.h = History()

    def send(self, proc: str, p: int, value: str, offset: int | None, type_: str = OK) -> None:
        inv = self.h.add(proc, INVOKE, "send", value, partition=p)
        if offset is None:
            self.h.complete(inv, type_)
        else:
            self.h.complete(inv, type_, offset=offset)

    def poll(self, proc: str, records: list[tuple[int, int, str]], rebalanced=()) -> None:
        self.h.add(proc, OK, "poll", [list(r) for r in records], rebalanced=list(rebalanced))

    def commit(self, proc: str, offsets: dict[int, int], group: str = "g") -> None:
        inv = self.h.add(proc, INVOKE, "commit", {str(p): o for p, o in offsets.items()}, group=group)
        self.h.complete(inv, OK, group=group)

    def final(self, p: int, records: list[tuple[int, str]], complete: bool = True) -> None:
        hw = records[-1][0] + 1 if records else 0
        self.h.add("final", OK if complete else INFO, "final-read",
                   {"log_start": records[0][0] if records else 0, "high_watermark": hw,
                    "next_offset": hw, "records": [list(r) for r in records], "errors": []}, partition=p)

    def replicas(self, p: int, identical: bool) -> None:
        self.h.add("final", OK, "replicas", {"identical": identical, "bytes": {"1": 10, "2": 10}}, partition=p)

    def check(self) -> checker.Result:
        return checker.check(self.h.ops)


def clean_story() -> Story:
    """Two producers, two partitions, an assign consumer and a group member
    that commits, a final read and identical replicas: nothing wrong."""
    s = Story()
    for i in range(4):
        s.send("producer-0", 0, f"p0-{i}", 2 * i)
        s.send("producer-1", 0, f"p1-{i}", 2 * i + 1)
        s.send("producer-0", 1, f"q0-{i}", i)
    log0 = [(o, f"p{o % 2}-{o // 2}") for o in range(8)]
    log1 = [(o, f"q0-{o}") for o in range(4)]
    s.poll("assign-0", [(0, o, v) for o, v in log0[:5]])
    s.poll("assign-0", [(0, o, v) for o, v in log0[5:]] + [(1, o, v) for o, v in log1])
    s.h.add("group-0", OK, "rebalance", "assigned", partitions=[0, 1], group="g")
    s.poll("group-0", [(0, o, v) for o, v in log0[:3]], rebalanced=[0, 1])
    s.commit("group-0", {0: 3})
    s.poll("group-0", [(0, o, v) for o, v in log0[3:]] + [(1, o, v) for o, v in log1])
    s.commit("group-0", {0: 8, 1: 4})
    s.final(0, log0)
    s.final(1, log1)
    s.replicas(0, True)
    s.replicas(1, True)
    return s


def reported(result: checker.Result) -> dict[str, int]:
    return {k: v for k, v in result.counts.items() if v}


def test_a_clean_history_reports_nothing():
    r = clean_story().check()
    assert r.valid and reported(r) == {}, r.to_json()
    assert r.stats["acknowledged"] == 12
    assert set(r.unavailability) == {0, 1}


def test_lost_write_an_acknowledged_value_the_final_read_lacks():
    s = clean_story()
    s.send("producer-1", 1, "late", 4)  # acknowledged at offset 4, the final read ends at 3
    r = s.check()
    assert r.counts["lost-write"] == 1 and r.cases["lost-write"][0]["value"] == "late"


def test_lost_write_not_reported_below_a_delete_records_point():
    s = Story()
    s.send("producer-0", 0, "a", 0)
    s.send("producer-0", 0, "b", 1)
    s.h.add("nemesis", INVOKE, "delete-records", None, partition=0, offset=1)
    s.poll("assign-0", [(0, 0, "a"), (0, 1, "b")])
    s.final(0, [(1, "b")])
    r = s.check()
    assert r.counts["lost-write"] == 0, r.to_json()


def test_duplicate_one_value_at_two_offsets():
    s = clean_story()
    s.poll("assign-1", [(0, 8, "p0-1")])
    assert s.check().counts["duplicate"] == 1


def test_inconsistent_offsets_two_values_at_one_offset():
    s = clean_story()
    s.poll("assign-1", [(1, 2, "someone-else")])
    r = s.check()
    assert r.counts["inconsistent-offsets"] == 1
    assert r.cases["inconsistent-offsets"][0]["values"] == ["q0-2", "someone-else"]


def test_unseen_acknowledged_but_never_polled():
    s = clean_story()
    s.send("producer-1", 1, "q-late", 4)
    s.h.ops[-1]  # keep the final read consistent: it holds the value
    s.final(1, [(o, f"q0-{o}") for o in range(4)] + [(4, "q-late")])
    r = s.check()
    assert r.counts["unseen"] == 1 and r.counts["lost-write"] == 0, r.to_json()
    assert r.valid  # informational, as in Jepsen


def test_producer_fatal_is_counted_as_information():
    s = clean_story()
    s.h.add("producer-0", INFO, "fatal", "OUT_OF_ORDER_SEQUENCE_NUMBER")
    r = s.check()
    assert r.counts["producer-fatal"] == 1 and r.valid


def test_ack_without_offset_is_information_and_the_value_must_still_be_read():
    """librdkafka reports a batch answered DUPLICATE_SEQUENCE_NUMBER as
    delivered at no offset (None): it has no place in the version order
    (the CI crash of seed 1648916071), but it was acknowledged."""
    s = clean_story()
    inv = s.h.add("producer-0", INVOKE, "send", "p0-1", partition=0)
    s.h.complete(inv, OK, offset=None)  # a retry of p0-1, stored at offset 2
    r = s.check()
    assert r.valid and r.counts["ack-without-offset"] == 1 and r.counts["duplicate"] == 0, r.to_json()
    inv = s.h.add("producer-0", INVOKE, "send", "never-stored", partition=0)
    s.h.complete(inv, OK, offset=None)
    r = s.check()
    assert r.counts["lost-write"] == 1 and r.cases["lost-write"][0]["value"] == "never-stored", r.to_json()


def test_nonmonotonic_send_offsets_go_backwards_in_send_order():
    s = Story()
    s.send("producer-0", 0, "a", 5)
    s.send("producer-0", 0, "b", 3)
    s.final(0, [(3, "b"), (5, "a")])
    assert s.check().counts["nonmonotonic-send"] == 1


def test_nonmonotonic_poll_a_consumer_reads_backwards():
    s = clean_story()
    s.poll("assign-0", [(0, 6, "p0-3")])  # assign-0 last read offset 7
    r = s.check()
    assert r.counts["nonmonotonic-poll"] == 1, r.to_json()


def test_rereading_after_assign_or_rebalance_is_not_nonmonotonic():
    s = clean_story()
    s.h.add("assign-0", OK, "assign", "from-beginning", partitions=[0, 1])
    s.poll("assign-0", [(0, 0, "p0-0")])
    s.poll("group-0", [(1, 0, "q0-0")], rebalanced=[1])
    assert s.check().valid


def test_poll_skip_a_consumer_jumps_over_known_values():
    s = clean_story()
    s.poll("assign-1", [(0, 0, "p0-0"), (0, 1, "p1-0")])
    s.poll("assign-1", [(0, 5, "p1-2")])  # 2, 3 and 4 hold values others read
    r = s.check()
    assert r.counts["poll-skip"] == 1 and r.cases["poll-skip"][0]["skipped"] == [2, 3, 4]


def test_commit_backwards_a_group_commit_below_an_acknowledged_one():
    s = clean_story()
    s.commit("group-1", {0: 2})  # group-0's commit of 8 was acknowledged before
    r = s.check()
    assert r.counts["commit-backwards"] == 1, r.to_json()


def test_aborted_read_a_definitely_failed_send_was_read():
    s = clean_story()
    s.send("producer-0", 1, "failed", None, type_=FAIL)
    s.poll("assign-1", [(1, 0, "q0-0"), (1, 1, "q0-1"), (1, 2, "q0-2"), (1, 3, "q0-3"), (1, 4, "failed")])
    assert s.check().counts["aborted-read"] == 1


def test_final_read_incomplete_is_an_anomaly():
    s = clean_story()
    s.final(1, [(0, "q0-0")], complete=False)
    assert s.check().counts["final-read-incomplete"] == 1


def test_final_read_incomplete_when_a_partition_has_none():
    s = Story()
    s.send("producer-0", 2, "a", 0)
    assert s.check().counts["final-read-incomplete"] == 1


def test_replica_divergence():
    s = clean_story()
    s.replicas(1, False)
    r = s.check()
    assert r.counts["replica-divergence"] == 1 and not r.valid


def test_every_anomaly_name_has_a_planted_test():
    names = {n.replace("-", "_") for n in checker.ANOMALIES + checker.INFORMATIONAL}
    tests = {name for name in globals() if name.startswith("test_")}
    missing = [n for n in names if not any(t.startswith(f"test_{n}") for t in tests)]
    assert not missing, missing


def test_longest_unavailability_is_the_longest_stretch_without_an_ack():
    ops = [{"index": i, "process": "producer-0", "f": "send", "type": t, "partition": 0, "time": int(ts * 1e9),
            "value": f"v{i}"} for i, (t, ts) in enumerate([(INVOKE, 0), (OK, 0.1), (INVOKE, 1), (INVOKE, 2),
                                                            (OK, 4.5), (INVOKE, 5), (INVOKE, 6)])]
    u = checker.unavailability(ops)[0]
    # Nothing outstanding from 0.1 to 1: a quiet producer, not unavailability.
    assert u["longest_s"] == 3.5 and u["from_s"] == 1.0, u


def test_the_schedule_is_a_function_of_the_seed():
    a = nemesis.schedule(7, 60, 3, list(nemesis.ALL_FAULTS), 4)
    assert a == nemesis.schedule(7, 60, 3, list(nemesis.ALL_FAULTS), 4)
    assert a != nemesis.schedule(8, 60, 3, list(nemesis.ALL_FAULTS), 4)
    assert all(s.at_s < 60 for s in a) and len(a) >= 3
    assert all(s.hold_s > nemesis.ELECTION_TIMEOUT_S for s in a if "pause" in s.kinds)
    assert all(s.kinds == ["disk-loss-election"] for s in a if "disk-loss-election" in s.kinds)
    only = nemesis.schedule(7, 60, 5, ["kill-minority"], 4)
    assert all(len(s.params["kill-minority"]["nodes"]) == 2 for s in only)


def entry_record(position: int, length: int) -> bytes:
    return struct.pack("<QQqqII", 1, 1, 0, 1, position, length) + bytes(8)


@pytest.mark.parametrize("durable", [False, True])
def test_lost_page_cache_cuts_the_active_segment_above_a_durable_checkpoint(tmp_path, durable):
    wal = tmp_path / "topics" / "t" / "0" / "wal"
    wal.mkdir(parents=True)
    (wal / f"{0:020d}.log").write_bytes(b"x" * 1000)
    (wal / f"{0:020d}.entries").write_bytes(b"".join(entry_record(i * 100, 100) for i in range(10)) + bytes(480))
    cp = struct.pack("<4s8Q", b"HXCP", 0, 600, 6, 6, 0, 0, 0, int(durable))
    (wal / "recovery-checkpoint").write_bytes(cp + bytes(4))
    (wal.parent / "derived-state.json").write_text("{}")
    done = nemesis.lost_page_cache(tmp_path, random.Random(3), max_tail_bytes=10_000)
    size = (wal / f"{0:020d}.log").stat().st_size
    assert (size >= 600) if durable else (size < 1000), (size, done)
    assert (wal / "recovery-checkpoint").exists() == durable
    entries = (wal / f"{0:020d}.entries").read_bytes()
    assert len(entries) == 960  # the preallocated file keeps its size
    kept = [struct.unpack_from("<II", entries, at + 32) for at in range(0, 960, 48)]
    assert all(p + n <= size for p, n in kept if n), (kept, size)


def batch(offset: int, value: bytes) -> bytes:
    return kwire.record_batch([kwire.Record(key=None, value=value)], base_timestamp=0, base_offset=offset)


def test_replicas_compare_only_the_nodes_holding_the_partition_and_from_a_common_start():
    h = History()
    log = batch(0, b"a") + batch(1, b"b") + batch(2, b"c")
    trimmed = batch(1, b"b") + batch(2, b"c")  # a DeleteRecords let this one drop its first segment
    final.compare_replicas({1: {0: log, 1: log}, 2: {0: log}, 3: {0: trimmed, 1: log}}, h)
    assert [op["value"]["identical"] for op in h.ops] == [True, True], h.ops


def test_replicas_that_differ_at_one_offset_diverge():
    h = History()
    final.compare_replicas({1: {0: batch(0, b"a") + batch(1, b"b")}, 2: {0: batch(0, b"a") + batch(1, b"X")},
                            3: {0: batch(0, b"a")}}, h)
    value = h.ops[0]["value"]
    assert not value["identical"] and value["first_difference"]["3"] is None, value
    assert checker.check(h.ops).counts["replica-divergence"] == 1


def test_the_history_around_an_anomaly_is_its_partitions_and_the_nemesis():
    s = clean_story()
    s.h.add("nemesis", INVOKE, "kill", {"node": 2})
    s.send("producer-1", 1, "late", 4)
    lost = s.check().cases["lost-write"][0]
    near = around(s.h.ops, lost["index"], lost["partition"])
    assert near[-1]["value"] == "late" and any(op["process"] == "nemesis" for op in near)
    assert all(op["process"] == "nemesis" or op.get("partition") == 1 or op["f"] in ("poll", "commit", "final-read")
               for op in near), near
