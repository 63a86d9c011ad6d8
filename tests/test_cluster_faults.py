"""A 3-node Helix cluster under faults (issue 17): leader kill -9 under a
paced idempotent load, the group coordinator's node killed while members
commit, a rolling SIGTERM restart, whole-cluster kill -9 in both durability
modes, a network partition through the harness's proxies, and a follower's
catch-up from the leader's WAL after downtime.

Every test checks that each acknowledged record is present exactly once,
in order, at its acknowledged offset. Figures (the longest gap between
acknowledgements within one partition, peak memory during catch-up) are
printed and written to $HELIX_CLUSTER_REPORT when set; never asserted.
Sizes: HELIX_CLUSTER_SECONDS (load per test, default 16) and
HELIX_CATCHUP_MIB (default 256; the issue's figure is 1024).
"""

from __future__ import annotations

import json
import os
import threading
import time
import uuid

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import NewTopic

import clients
import harness
import kwire
from cluster_harness import HelixCluster
from cluster_load import PacedProducer, read_all, verify_exactly_once_in_order
from jepsen.final import await_replicas_settled
from test_operations import scrape, value

pytestmark = [pytest.mark.cluster, pytest.mark.managed,
              pytest.mark.skipif(harness.external_bootstrap() is not None
                                 or os.environ.get("HELIX_TEST_KAFKA_LIBS") is not None,
                                 reason="cluster tests start their own Helix nodes")]

SECONDS = float(os.environ.get("HELIX_CLUSTER_SECONDS", "16"))
CATCHUP_MIB = int(os.environ.get("HELIX_CATCHUP_MIB", "256"))
PARTITIONS = 6
FAST = ["--replica-lag-time-max-ms", "3000", "--leader-imbalance-check-interval-ms", "2000",
        "--group-initial-rebalance-delay-ms", "0"]


def report(name: str, figures: dict) -> None:
    line = json.dumps({"test": name, **figures})
    print(line)
    path = os.environ.get("HELIX_CLUSTER_REPORT")
    if path:
        with open(path, "a") as f:
            f.write(line + "\n")


def create_topic(bootstrap: str, name: str, partitions: int = PARTITIONS) -> None:
    a = clients.admin(bootstrap)
    a.create_topics([NewTopic(name, num_partitions=partitions, replication_factor=3)],
                    operation_timeout=30)[name].result(timeout=30)
    clients.wait_for_partitions(bootstrap, name, partitions)


def partitions_view(cluster: HelixCluster, topic: str):
    """{partition: (leader, isr)} from the first live node that answers."""
    for n in cluster.nodes:
        if not n.alive():
            continue
        try:
            md = clients.admin(n.bootstrap).list_topics(topic=topic, timeout=5)
        except Exception:
            continue
        t = md.topics.get(topic)
        if t is not None and t.error is None:
            return {p: (m.leader, sorted(m.isrs)) for p, m in t.partitions.items()}
    return {}


def wait_in_sync(cluster: HelixCluster, topic: str, timeout: float = 60.0) -> dict:
    deadline = time.monotonic() + timeout
    view = {}
    while time.monotonic() < deadline:
        view = partitions_view(cluster, topic)
        if view and all(leader > 0 and len(isr) == len(cluster.nodes) for leader, isr in view.values()):
            return view
        time.sleep(0.3)
    raise AssertionError(f"ISR never full again: {view}\n{cluster.logs()}")


def assert_replicas_identical(cluster: HelixCluster, topic: str) -> None:
    """Once every replica is in sync and the load is over, each partition's
    replicas hold byte-identical logs (the state machine is deterministic:
    a replica that stored anything else has diverged, even if the leader a
    consumer reads from is right). Stops the cluster."""
    view = wait_in_sync(cluster, topic)
    # In sync is not caught up: a follower stays in the ISR while it is
    # less than replica.lag.time.max.ms behind, and it writes an entry to
    # its WAL only once it hears the entry is committed. So the files are
    # compared once every replica reports the same log end and a high
    # watermark equal to it.
    started = time.monotonic()
    settle = await_replicas_settled(cluster, topic, len(view))
    assert settle["settled"], f"the replicas never settled: {settle}\n{cluster.logs()}"
    report("replicas_converged", {"topic": topic, "seconds": round(time.monotonic() - started, 3)})
    cluster.stop()
    stored = cluster.stored_logs()
    nodes = sorted(stored)
    for p in sorted(stored[nodes[0]]):
        sizes = {n: len(stored[n].get(p, b"")) for n in nodes}
        assert len({stored[n].get(p) for n in nodes}) == 1, \
            f"partition {p}: replicas differ (bytes per node {sizes})"


def leader_of(cluster: HelixCluster, topic: str, partition: int, timeout: float = 30.0) -> int:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        leader = partitions_view(cluster, topic).get(partition, (-1, []))[0]
        if leader > 0 and cluster.node(leader).alive():
            return leader
        time.sleep(0.2)
    raise AssertionError(f"partition {partition} of {topic} has no live leader\n{cluster.logs()}")


def settled_leader(cluster: HelixCluster, topic: str, partition: int, timeout: float = 30.0) -> tuple[int, int]:
    """(leader, epoch) of `partition` once every node names the same one and
    it is the preferred replica: a leader read while an election or the
    hand-back to the preferred replica is still under way may already be
    replaced when the test acts on it."""
    deadline = time.monotonic() + timeout
    seen = {}
    while time.monotonic() < deadline:
        seen = {}
        for n in cluster.nodes:
            try:
                conn = kwire.Conn("127.0.0.1", n.kafka_port)
                try:
                    seen[n.id] = conn.leaders(topic)[partition]
                finally:
                    conn.close()
            except (OSError, kwire.ProtocolError, KeyError):
                seen[n.id] = None
        views = {(v[0], v[1]) for v in seen.values() if v is not None}
        if len(views) == 1 and None not in seen.values():
            leader, epoch = views.pop()
            replicas = next(iter(seen.values()))[2]
            if leader > 0 and replicas and leader == replicas[0]:
                return leader, epoch
        time.sleep(0.1)
    raise AssertionError(f"partition {partition} of {topic} never settled on its preferred leader: {seen}")


def peer_losses(node) -> float:
    return value(scrape(node.metrics_port), "helix_peer_losses_total")


@pytest.fixture
def cluster3(tmp_path, request):
    # Leader balancing would move leadership back to a returning node, which
    # the catch-up test must tell from an election: off there.
    args = FAST + (["--auto-leader-rebalance-enable", "false"] if "catches_up" in request.node.name else [])
    c = HelixCluster(tmp_path, 3, args=args).start()
    try:
        yield c
    finally:
        c.stop()


def test_leader_failover_under_load_loses_nothing(cluster3, topic):
    create_topic(cluster3.node(1).bootstrap, topic)
    wait_in_sync(cluster3, topic)
    load = PacedProducer(cluster3.bootstrap, topic, PARTITIONS, rate=2000, seconds=SECONDS)
    load.start()
    kills = []
    while load.is_alive():
        time.sleep(min(4.0, SECONDS / 4))
        if not load.is_alive():
            break
        victim = leader_of(cluster3, topic, len(kills) % PARTITIONS)
        survivors = [n for n in cluster3.nodes if n.id != victim]
        losses = [peer_losses(n) for n in survivors]
        cluster3.node(victim).kill9()
        kills.append(victim)
        time.sleep(1.0)
        cluster3.node(victim).start()
        # The survivors' transport saw the connections break and told their
        # replicas (ADR 0017), rather than leaving it to an election timeout.
        deadline = time.monotonic() + 15
        while not all(peer_losses(n) > before for n, before in zip(survivors, losses)):
            assert time.monotonic() < deadline, (victim, losses, [peer_losses(n) for n in survivors])
            time.sleep(0.2)
    load.join()
    assert not load.result.errors, load.result.errors[:10]
    assert len(kills) >= 2, "the load ended before the faults"
    stored = read_all(cluster3.bootstrap, topic, PARTITIONS)
    verify_exactly_once_in_order(load.result, stored)
    assert_replicas_identical(cluster3, topic)
    gaps = load.result.longest_gap_per_partition()
    report("leader_failover", {"sent": load.result.sent, "acked": len(load.result.acked),
                               "kills": kills, "longest_gap_s_per_partition": gaps,
                               "longest_gap_s": max(gaps.values())})


def test_coordinator_failover_keeps_every_acknowledged_commit(cluster3, topic):
    create_topic(cluster3.node(1).bootstrap, topic)
    group = f"g-{uuid.uuid4().hex[:8]}"
    load = PacedProducer(cluster3.bootstrap, topic, PARTITIONS, rate=1000, seconds=SECONDS)
    load.start()
    with kwire.Conn("127.0.0.1", cluster3.node(1).kafka_port) as conn:
        coordinator, _, _ = kwire.find_coordinator(conn, group)
    c = Consumer({**clients.RDKAFKA, "bootstrap.servers": cluster3.bootstrap, "group.id": group,
                  "auto.offset.reset": "earliest", "enable.auto.commit": False,
                  "session.timeout.ms": 10000, "heartbeat.interval.ms": 500})
    c.subscribe([topic])
    acked: dict[int, int] = {}

    def consume_and_commit(seconds: float, until_committed: bool = False) -> int:
        """Consumes and commits for `seconds`, and with `until_committed`
        on until a commit was acknowledged (the group may take longer than
        `seconds` to form on a loaded machine; bounded at 60 s)."""
        n = 0
        start = time.monotonic()
        deadline = start + seconds

        def more() -> bool:
            now = time.monotonic()
            return now < deadline or (until_committed and not acked and now < start + 60)

        while more():
            msgs = [m for m in c.consume(num_messages=200, timeout=0.3) if m.error() is None]
            if not msgs:
                continue
            offsets = {}
            for m in msgs:
                offsets[m.partition()] = m.offset() + 1
            try:
                done = c.commit(offsets=[TopicPartition(topic, p, o) for p, o in offsets.items()],
                                asynchronous=False)
            except Exception:
                continue  # not acknowledged: nothing is promised
            for tp in done:
                if tp.error is None:
                    acked[tp.partition] = max(acked.get(tp.partition, 0), tp.offset)
            n += len(msgs)
        return n

    before = consume_and_commit(SECONDS / 3, until_committed=True)
    assert before > 0 and acked, "nothing consumed before the fault"
    promised = dict(acked)
    cluster3.node(coordinator).kill9()
    after = consume_and_commit(SECONDS / 2)
    # What OffsetFetch returns now, from the new coordinator.
    committed = {tp.partition: tp.offset for tp in c.committed(
        [TopicPartition(topic, p) for p in range(PARTITIONS)], timeout=30)}
    c.close()
    cluster3.node(coordinator).start()
    load.join()
    lost = {p: (o, committed.get(p)) for p, o in promised.items() if committed.get(p, -1) < o}
    assert not lost, f"commits acknowledged before the kill and lost: {lost}\n{cluster3.logs()}"
    assert after > 0, f"the group did not re-form after the coordinator died\n{cluster3.logs()}"
    report("coordinator_failover", {"consumed_before": before, "consumed_after": after,
                                    "killed_coordinator": coordinator})


def test_rolling_restart_with_sigterm_under_load(cluster3, topic):
    create_topic(cluster3.node(1).bootstrap, topic)
    wait_in_sync(cluster3, topic)
    load = PacedProducer(cluster3.bootstrap, topic, PARTITIONS, rate=1500, seconds=max(SECONDS, 30))
    load.start()
    codes = []
    for node in cluster3.nodes:
        codes.append(node.stop())
        node.start()
        wait_in_sync(cluster3, topic)
    load.join()
    assert codes == [0, 0, 0], f"exit codes on SIGTERM: {codes}"
    assert not load.result.errors, load.result.errors[:10]
    verify_exactly_once_in_order(load.result, read_all(cluster3.bootstrap, topic, PARTITIONS))
    assert_replicas_identical(cluster3, topic)
    gaps = load.result.longest_gap_per_partition()
    report("rolling_restart", {"acked": len(load.result.acked), "longest_gap_s": max(gaps.values())})


@pytest.mark.parametrize("durability", ["replication-only", "fsync"])
def test_whole_cluster_kill9_and_restart_loses_nothing(tmp_path, topic, durability):
    cluster = HelixCluster(tmp_path, 3, args=FAST + ["--write-durability", durability]).start()
    try:
        create_topic(cluster.node(1).bootstrap, topic)
        all_acked = {}
        for round_ in range(3):
            load = PacedProducer(cluster.bootstrap, topic, PARTITIONS, rate=2000, seconds=SECONDS / 3,
                                 extra={"message.timeout.ms": 30_000}, first_seq=round_ * 10**9)
            load.start()
            time.sleep(SECONDS / 6)
            cluster.kill_all()
            load.join()
            all_acked.update(load.result.acked)
            cluster.start()
            stored = read_all(cluster.bootstrap, topic, PARTITIONS)
            positions = {(p, offset): int(value) for p, records in stored.items() for offset, value in records}
            for s, a in all_acked.items():
                value = positions.get((a.partition, a.offset))
                assert value is not None, f"seq {s} acked at {a} is gone after round {round_}\n{cluster.logs()}"
                assert value == s, f"offset {a.offset} of partition {a.partition} holds {value}, acked for {s}"
            # The cluster takes writes again after every restart.
            again = PacedProducer(cluster.bootstrap, topic, PARTITIONS, rate=500, seconds=1,
                                  first_seq=round_ * 10**9 + 5 * 10**8)
            again.run()
            assert again.result.acked and not again.result.errors, again.result.errors[:5]
            all_acked.update(again.result.acked)
        report(f"whole_cluster_kill9_{durability}", {"acked": len(all_acked)})
    finally:
        cluster.stop()


# How long after a cut the probes of the isolated-leader test run: two of
# the longest election timeouts (20 ticks of 50 ms), so they cover the
# first election timeout, the step-down and the majority's election.
PROBE_WINDOW_S = 2.0
PROBE_EVERY_S = 0.02


def probe_leader(conn: kwire.Conn, topic: str) -> tuple[int, int] | None:
    """(leader, epoch) of partition 0 as the node answers it; None when the
    connection failed."""
    try:
        leader, epoch, _, _ = conn.leaders(topic)[0]
        return leader, epoch
    except (OSError, kwire.ProtocolError):
        return None


@pytest.mark.parametrize("mode", ["blackhole", "refuse"])
def test_isolated_leader_stops_and_the_majority_carries_on(tmp_path, topic, mode):
    cluster = HelixCluster(tmp_path, 3, args=FAST, proxies=True).start()
    try:
        create_topic(cluster.node(1).bootstrap, topic, 1)
        wait_in_sync(cluster, topic)
        # Every node names the same leader before the cut: once, before
        # this wait, the leader read here was being replaced by the
        # preferred replica already, and the "old" node's stale answer of
        # an earlier term was counted against the cut.
        old, epoch_before = settled_leader(cluster, topic, 0)
        others = [n for n in cluster.nodes if n.id != old]
        majority = ",".join(n.bootstrap for n in others)
        # Connections made before the cut, so the probes start at once.
        to_old = kwire.Conn("127.0.0.1", cluster.node(old).kafka_port)
        to_old_produce = kwire.Conn("127.0.0.1", cluster.node(old).kafka_port)
        to_majority = kwire.Conn("127.0.0.1", others[0].kafka_port)
        to_old_produce.versions()
        # Told before the cut that the old leader is a member, then left idle
        # (the probe loop below replaces `to_old` once it is closed).
        told_before = kwire.Conn("127.0.0.1", cluster.node(old).kafka_port)
        assert old in told_before.brokers()
        cluster.isolate(old, mode)
        cut_at = time.monotonic()
        # Within the first election timeout after the cut, the isolated node
        # is asked to take a write: it must never acknowledge it (it cannot
        # reach a majority), and refuses it as not the leader.
        produced: dict = {}

        def produce_probe() -> None:
            time.sleep(0.1)
            batch = kwire.record_batch([kwire.Record(key=b"k", value=b"isolated")])
            produced["sent_s"] = time.monotonic() - cut_at
            produced["answer"] = to_old_produce.produce(topic, {0: batch}, acks=-1, timeout_ms=5000)
            produced["answered_s"] = time.monotonic() - cut_at

        prober = threading.Thread(target=produce_probe, daemon=True)
        prober.start()
        # The producer starts while the majority may still list the old
        # leader: the client goes to the cut-off node first and must find
        # its way to the new leader.
        load = PacedProducer(majority, topic, 1, rate=500, seconds=8)
        load_started = False
        # Metadata from both sides, from the cut on: once the majority names
        # a new leader, the isolated node must never name itself again (a
        # client asking it would be sent to a node that cannot write).
        timeline = []
        new_named_at = None
        stale = []
        majority_stale = []
        while time.monotonic() - cut_at < PROBE_WINDOW_S:
            if not load_started and time.monotonic() - cut_at >= 0.5:
                load.start()
                load_started = True
            at = time.monotonic() - cut_at
            seen = probe_leader(to_majority, topic)
            if new_named_at is None and seen and seen[0] not in (-1, old) and seen[1] > epoch_before:
                new_named_at = at
            answer = probe_leader(to_old, topic)
            if answer is None:
                to_old.close()
                to_old = kwire.Conn("127.0.0.1", cluster.node(old).kafka_port)
            timeline.append((round(at, 3), seen, answer))
            if new_named_at is not None and answer is not None and answer[0] == old:
                stale.append((round(at, 3), answer))
            if new_named_at is not None and seen is not None and seen[0] == old:
                majority_stale.append((round(at, 3), seen))
            time.sleep(PROBE_EVERY_S)
        if not load_started:
            load.start()
        prober.join(10)
        named_self = [t for t, _, a in timeline if a is not None and a[0] == old]
        figures = {
            "mode": mode,
            "majority_named_new_leader_s": new_named_at,
            "isolated_named_itself_until_s": max(named_self, default=None),
            "stale_answers_after_new_leader": len(stale),
            "majority_answers_naming_the_old_leader_again": len(majority_stale),
            "probe_produce": produced,
        }
        print(json.dumps({"isolated_leader_probe": figures}))
        assert produced.get("answer") is not None, f"the probe write was never answered: {produced}"
        err = produced["answer"][0][0]
        assert err != kwire.ERR_NONE, f"the isolated leader acknowledged a write: {produced}"
        assert err == kwire.ERR_NOT_LEADER_OR_FOLLOWER, f"expected NOT_LEADER_OR_FOLLOWER: {produced}"
        assert not stale, (f"the isolated node named itself leader after the majority had elected "
                           f"another (at {new_named_at}s): {stale[:5]}\n{timeline}")
        assert not majority_stale, (f"the majority named the cut-off node leader again after naming "
                                    f"another: {majority_stale[:5]}")
        # Once it knows it is cut off it still answers a new connection's
        # Metadata (no disconnect, issue 30 item 7), with no leader it cannot
        # vouch for and the other members as the brokers (not itself), so
        # clients move to the majority (ADR 0023).
        expected = (sorted(n.id for n in others), -1)
        deadline = time.monotonic() + 10
        answer = None
        while time.monotonic() < deadline:
            with kwire.Conn("127.0.0.1", cluster.node(old).kafka_port) as conn:
                answer = (sorted(conn.brokers()), conn.leaders(topic)[0][0])
            if answer == expected:
                break
            time.sleep(0.2)
        assert answer == expected, f"the isolated node's Metadata: (brokers, leader) {answer}"
        # A connection it answered as a member before is closed instead, so
        # that client connects elsewhere at once (ADR 0023, third attempt).
        with pytest.raises((OSError, kwire.ProtocolError)):
            told_before.brokers()
        deadline = time.monotonic() + 30
        new = -1
        while time.monotonic() < deadline and new in (-1, old):
            md = clients.admin(others[0].bootstrap).list_topics(topic=topic, timeout=5)
            new = md.topics[topic].partitions[0].leader
            time.sleep(0.2)
        assert new not in (-1, old), f"the majority did not elect a new leader\n{cluster.logs()}"
        load.join()
        assert not load.result.errors and len(load.result.acked) == load.result.sent, \
            (load.result.sent, len(load.result.acked), load.result.errors[:5])
        seen_before = read_all(majority, topic, 1)[0]
        cluster.heal()
        # The old leader rejoins as a follower and catches up.
        wait_in_sync(cluster, topic)
        after = read_all(cluster.node(old).bootstrap, topic, 1)[0]
        assert after[:len(seen_before)] == seen_before, "a record a consumer read was truncated"
        verify_exactly_once_in_order(load.result, {0: after})
        gaps = load.result.longest_gap_per_partition()
        # ADR 0017's failover figure: reported, never asserted.
        report(f"isolated_leader_{mode}", {"acked": len(load.result.acked),
                                           "longest_gap_s": max(gaps.values()), **figures})
    finally:
        for c in ("to_old", "to_old_produce", "to_majority", "told_before"):
            conn = locals().get(c)
            if conn is not None:
                conn.close()
        cluster.stop()


def rss(pid: int) -> dict[str, int]:
    fields = {}
    for line in open(f"/proc/{pid}/status"):
        key, _, value = line.partition(":")
        if key in ("VmRSS", "RssAnon", "RssFile"):
            fields[key] = int(value.split()[0])
    return fields


def test_follower_catches_up_from_the_wal_without_an_election(cluster3, topic):
    create_topic(cluster3.node(1).bootstrap, topic, 3)
    wait_in_sync(cluster3, topic)
    behind = cluster3.node(3)
    behind.kill9()
    live = ",".join(n.bootstrap for n in cluster3.nodes[:2])
    p = Producer({**clients.RDKAFKA, "bootstrap.servers": live, "acks": "all",
                  "linger.ms": 5, "batch.size": 1 << 20, "queue.buffering.max.kbytes": 256 << 10})
    value = os.urandom(1024)
    total = CATCHUP_MIB << 10
    for i in range(total):
        while True:
            try:
                p.produce(topic, value=value, partition=i % 3)
                break
            except BufferError:
                p.poll(0.05)
    assert p.flush(300) == 0
    with kwire.Conn("127.0.0.1", cluster3.node(1).kafka_port) as conn:
        before = {p: (leader, epoch) for p, (leader, epoch, _, _) in conn.leaders(topic).items()}
    behind.start()
    peak = {"VmRSS": 0, "RssAnon": 0, "RssFile": 0}
    deadline = time.monotonic() + 600
    view = {}
    while time.monotonic() < deadline:
        for k, v in rss(behind.pid).items():
            peak[k] = max(peak[k], v)
        view = partitions_view(cluster3, topic)
        if view and all(len(isr) == 3 for _, isr in view.values()):
            break
        time.sleep(0.2)
    assert view and all(len(isr) == 3 for _, isr in view.values()), f"no catch-up: {view}\n{cluster3.logs()}"
    # No election on the way: every partition keeps its leader and epoch.
    with kwire.Conn("127.0.0.1", cluster3.node(1).kafka_port) as conn:
        after = {p: (leader, epoch) for p, (leader, epoch, _, _) in conn.leaders(topic).items()}
    assert after == before, f"leadership changed during catch-up: {before} -> {after}\n{cluster3.logs()}"
    report("catch_up", {"mib": CATCHUP_MIB, "peak_rss_kib": peak})
    # Anonymous memory stays within the Raft budget (128 MiB) plus the
    # process's own; mapped WAL pages are page cache (RssFile), reported.
    assert peak["RssAnon"] < 256 << 10, f"catch-up held {peak['RssAnon']} KiB of anonymous memory"
    assert_replicas_identical(cluster3, topic)
