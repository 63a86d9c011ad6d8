"""A replica that may have lost what it reported durable does not vote
(issue 29 item 2, ADR 0018). Two ways to lose it, on real processes:

- a node restarted on an empty (replaced) data directory: it finds that the
  cluster existed (a peer has seen it take part) and rejoins every group it
  hosts as a learner until the leader has restored it;
- a node whose host rebooted while its WAL held appends only in the page
  cache (replication-only mode, no clean shutdown): the WAL's tail is gone,
  and every replica of the node rejoins as a learner, keeping its WAL.

In both, one more failure must not lose an acknowledged record."""

from __future__ import annotations

import os
import shutil
import time
import uuid

import pytest
from confluent_kafka import Producer

import clients
import kwire
from cluster_harness import HelixCluster
from test_cluster import FAST, create_topic, metadata, wait_fully_in_sync
from test_cluster_damage import wait_for_line

pytestmark = [pytest.mark.managed,
              pytest.mark.skipif(os.environ.get("HELIX_TEST_KAFKA_LIBS") is not None,
                                 reason="Helix's data directory layout and ADR 0018's policy")]

ACKED = 2000
LATER = 200
REJOIN_LINE = "rejoins every group it hosts as a learner"
# Several election timeouts: long enough for a wrong election to happen.
NO_ELECTION_WINDOW_S = 5
REBOOT_LINE = "the host restarted since this node last synced its logs"


def producer(bootstrap: str) -> Producer:
    return Producer({**clients.RDKAFKA, "bootstrap.servers": bootstrap, "acks": "all",
                     "linger.ms": 5, "enable.idempotence": True,
                     "message.timeout.ms": 120_000})


def produce_acked(bootstrap: str, topic: str, start: int, n: int) -> None:
    p = producer(bootstrap)
    acked = []
    for i in range(start, start + n):
        p.produce(topic, value=b"%06d" % i, partition=0,
                  on_delivery=lambda err, msg: acked.append(err))
    assert p.flush(90) == 0
    assert acked == [None] * n, [e for e in acked if e is not None][:3]


def read_partition(c: HelixCluster, topic: str, end: int) -> dict[int, bytes]:
    """{offset: value} of partition 0 from offset 0 up to `end` or to the
    high watermark, whichever comes first, read from its leader."""
    deadline = time.monotonic() + 60
    while True:
        try:
            _, parts = metadata(c.live_bootstrap(), topic)
            with kwire.Conn("127.0.0.1", c.node(parts[0][0]).kafka_port) as conn:
                out: dict[int, bytes] = {}
                offset = 0
                while offset < end:
                    err, hw, data = conn.fetch(topic, 0, offset)
                    if err != kwire.ERR_NONE:
                        raise kwire.ProtocolError(f"fetch error {err}")
                    batches = kwire.parse_batches(data)
                    if not batches and hw <= offset:
                        break  # the log ends here
                    for b in batches:
                        for r in kwire.decode_records(b):
                            out[b.base_offset + r.offset_delta] = r.value
                        offset = max(offset, b.base_offset + b.last_offset_delta + 1)
                return out
        except (OSError, kwire.ProtocolError, AssertionError, KeyError):
            assert time.monotonic() < deadline, c.logs()
            time.sleep(0.5)


def assert_everything_acknowledged_is_kept(c: HelixCluster, topic: str) -> None:
    """Records 0..ACKED-1 at their original offsets, then the later ones; with
    the cluster stopped, every replica byte-identical."""
    values = read_partition(c, topic, ACKED + LATER)
    lost = [i for i in range(ACKED) if values.get(i) != b"%06d" % i]
    assert not lost, f"{len(lost)} acknowledged records lost or changed, first at offsets {lost[:5]}: " \
        f"{[values.get(i) for i in lost[:5]]}"
    later = sorted(v for o, v in values.items() if o >= ACKED)
    assert later == [b"%06d" % i for i in range(ACKED, ACKED + LATER)], later[:5]


def assert_replicas_identical(c: HelixCluster) -> None:
    stored = c.stored_logs()
    assert stored[1][0] == stored[2][0] == stored[3][0], \
        {n: len(logs[0]) for n, logs in stored.items()}


def roles(c: HelixCluster, topic: str) -> tuple:
    """(leader, a follower, the other follower) of partition 0."""
    _, parts = wait_fully_in_sync(c, topic)
    leader, replicas, _ = parts[0]
    followers = [n for n in replicas if n != leader]
    return c.node(leader), c.node(followers[0]), c.node(followers[1])


def logged(node, text: str) -> bool:
    return text in node.log.read_text(errors="replace")


def later_writes_then_return(c: HelixCluster, topic: str, returning, learner, line: str) -> None:
    """Writes LATER records while `returning` is down, then starts it and
    waits for all of them. Before the fix the cut-off node was elected with
    `learner`'s vote and acknowledged them without `returning`; with it,
    `learner` says `line` and does not vote, so they wait for `returning`."""
    p = producer(c.live_bootstrap() + "," + returning.bootstrap)
    acked = []
    for i in range(ACKED, ACKED + LATER):
        p.produce(topic, value=b"%06d" % i, partition=0,
                  on_delivery=lambda err, msg: acked.append(err))
    deadline = time.monotonic() + 60
    while len(acked) < LATER and not logged(learner, line) and time.monotonic() < deadline:
        p.poll(0.2)
    if logged(learner, line):
        # The learner does not vote: the cut-off node cannot be elected, so
        # nothing is acknowledged until `returning` is back. Give it a few
        # election timeouts to go wrong.
        window = time.monotonic() + NO_ELECTION_WINDOW_S
        while time.monotonic() < window:
            p.poll(0.2)
        assert not acked, f"acknowledged without {returning.id}: {acked[:3]}\n{c.logs()}"
    returning.start()
    assert p.flush(120) == 0, c.logs()
    assert acked == [None] * LATER, [e for e in acked if e is not None][:3]


def test_a_node_on_a_replaced_disk_rejoins_as_a_learner_and_nothing_acknowledged_is_lost(tmp_path):
    """The issue's exact scenario: C cut off; L and A acknowledge 2,000
    records; L and A killed; A's data directory deleted; C healed; A started
    on its empty directory; new writes; L started."""
    topic = f"disk-{uuid.uuid4().hex[:8]}"
    c = HelixCluster(tmp_path, 3, args=FAST, proxies=True).start()
    try:
        create_topic(c.node(1).bootstrap, topic, partitions=1)
        leader, a, cut = roles(c, topic)
        c.isolate(cut.id, mode="refuse")
        produce_acked(f"{leader.bootstrap},{a.bootstrap}", topic, 0, ACKED)
        leader.kill9()
        a.kill9()
        shutil.rmtree(a.data_dir)
        c.heal()
        a.start()
        later_writes_then_return(c, topic, leader, a, REJOIN_LINE)
        assert_everything_acknowledged_is_kept(c, topic)
        wait_fully_in_sync(c, topic)
        wait_for_line(a, REJOIN_LINE)
        wait_for_line(a, "it votes again")
    finally:
        c.stop()
    assert_replicas_identical(c)


def test_a_node_whose_page_cache_was_lost_rejoins_as_a_learner_and_nothing_acknowledged_is_lost(tmp_path):
    """Replication-only mode: A's WAL loses its unsynced tail in a simulated
    host reboot (its recorded boot id no longer matches); C was cut off while
    L and A acknowledged. With L down, A must not help C win an election."""
    topic = f"cache-{uuid.uuid4().hex[:8]}"
    boot = {n: tmp_path / f"boot-id-{n}" for n in (1, 2, 3)}
    for n, path in boot.items():
        path.write_text("boot-before\n")
    c = HelixCluster(tmp_path, 3, args=FAST, proxies=True)
    for n in c.nodes:
        n.env = {"HELIX_BOOT_ID_FILE": str(boot[n.id])}
    c.start()
    try:
        create_topic(c.node(1).bootstrap, topic, partitions=1)
        leader, a, cut = roles(c, topic)
        c.isolate(cut.id, mode="refuse")
        produce_acked(f"{leader.bootstrap},{a.bootstrap}", topic, 0, ACKED)
        leader.kill9()
        a.kill9()
        # A's host "reboots": what was only in its page cache is gone.
        logs = sorted(a.data_dir.glob("topics/*/0/wal/*.log"))
        assert logs, list(a.data_dir.glob("topics/*/0/wal/*"))
        size = logs[-1].stat().st_size
        os.truncate(logs[-1], size // 2)
        boot[a.id].write_text("boot-after\n")
        c.heal()
        a.start()
        later_writes_then_return(c, topic, leader, a, REBOOT_LINE)
        assert_everything_acknowledged_is_kept(c, topic)
        wait_fully_in_sync(c, topic)
        wait_for_line(a, REBOOT_LINE)
    finally:
        c.stop()
    assert_replicas_identical(c)


def test_a_power_loss_of_every_node_leaves_no_group_without_a_leader(tmp_path):
    """Replication-only mode, every host "reboots" at once (kill -9 of every
    node, every boot id changed): each node learns from the others that they
    lost their page cache too, so every group elects among what is left
    (the loss the mode documents; nothing was really lost here) instead of
    waiting for ever with learners only."""
    topic = f"power-{uuid.uuid4().hex[:8]}"
    boot = {n: tmp_path / f"boot-id-{n}" for n in (1, 2, 3)}
    for path in boot.values():
        path.write_text("boot-before\n")
    c = HelixCluster(tmp_path, 3, args=FAST)
    for n in c.nodes:
        n.env = {"HELIX_BOOT_ID_FILE": str(boot[n.id])}
    c.start()
    try:
        create_topic(c.node(1).bootstrap, topic, partitions=1)
        wait_fully_in_sync(c, topic)
        produce_acked(c.bootstrap, topic, 0, ACKED)
        c.kill_all()
        for path in boot.values():
            path.write_text("boot-after\n")
        c.start()
        learned = {}
        for n in c.nodes:
            wait_for_line(n, REBOOT_LINE)
            line = wait_for_line(n, "lost=[")
            learned[n.id] = {int(i) for i in line.split("lost=[")[1].split("]")[0].split(",")}
        # Each node counts itself, and a peer only once it has checked its
        # own boot id (an earlier answer is asked again). A peer whose
        # replicas already opened (voting: a majority of their group lost
        # theirs) answers "intact", so a node that asks late may learn less;
        # but a node opens only after hearing the others' checked answers,
        # so no two nodes can both learn only themselves: a majority of the
        # nodes count a majority as lost and the group elects.
        for node, lost in learned.items():
            assert node in lost, f"node {node} did not count its own loss: {learned}"
        assert sum(len(lost) >= 2 for lost in learned.values()) >= 2, (
            f"fewer than two nodes learned that a majority lost its page cache: {learned}")
        produce_acked(c.bootstrap, topic, ACKED, LATER)
        assert_everything_acknowledged_is_kept(c, topic)
        wait_fully_in_sync(c, topic)
    finally:
        c.stop()
    assert_replicas_identical(c)
