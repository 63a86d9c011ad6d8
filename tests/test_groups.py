"""Consumer groups (issue 13): the classic group protocol with real clients.

Marked `groups` (select them alone with `-m groups`). Validated against
Apache Kafka 3.9.1.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
import uuid

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from kafka import KafkaAdminClient

import clients
import harness
import javalibs
import kwire

pytestmark = pytest.mark.groups


def produce_n(broker, topic: str, n: int, partitions: int) -> None:
    p = Producer({**clients.RDKAFKA, "bootstrap.servers": broker.bootstrap, "acks": "all", "linger.ms": 5})
    for i in range(n):
        p.produce(topic, partition=i % partitions, key=b"%d" % i, value=b"%06d" % i)
    assert p.flush(60) == 0


def group_consumer(broker, group: str, **extra) -> Consumer:
    conf = {
        **clients.RDKAFKA, "bootstrap.servers": broker.bootstrap,
        "group.id": group,
        "auto.offset.reset": "earliest",
        "enable.auto.commit": False,
        "session.timeout.ms": 6000,
        "heartbeat.interval.ms": 500,
    }
    conf.update(extra)
    return Consumer(conf)


@pytest.fixture
def consumers():
    """Makes group consumers and closes whichever a test left open, so none
    outlives its broker."""
    made: list[Consumer] = []

    def make(broker, group: str, **extra) -> Consumer:
        c = group_consumer(broker, group, **extra)
        made.append(c)
        return c

    yield make
    for c in made:
        try:
            c.close()
        except RuntimeError:
            pass  # already closed by the test


def poll_until(consumers: list[Consumer], done, timeout: float = 60.0, sink: list | None = None) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for c in consumers:
            m = c.poll(0.1)
            if m is not None and m.error() is None and sink is not None:
                sink.append(m)
            elif m is not None and m.error() and m.error().code() != KafkaError._PARTITION_EOF:
                raise AssertionError(f"consumer error: {m.error()}")
        if done():
            return
    raise AssertionError("condition not reached in time")


def assigned(c: Consumer) -> set[int]:
    return {tp.partition for tp in c.assignment()}


@pytest.mark.parametrize("strategy", ["range", "cooperative-sticky"])
def test_three_consumers_share_six_partitions_then_two_take_over(broker, topic, strategy, consumers):
    clients.create_topic(broker.bootstrap, topic, 6)
    produce_n(broker, topic, 600, 6)
    group = f"g-{uuid.uuid4().hex[:8]}"
    cs = [consumers(broker, group, **{"partition.assignment.strategy": strategy}) for _ in range(3)]
    try:
        for c in cs:
            c.subscribe([topic])
        poll_until(cs, lambda: all(len(assigned(c)) == 2 for c in cs))
        parts = [assigned(c) for c in cs]
        assert set().union(*parts) == set(range(6)) and sum(len(p) for p in parts) == 6
        cs[0].close()
        rest = cs[1:]
        poll_until(rest, lambda: all(len(assigned(c)) == 3 for c in rest))
        assert assigned(rest[0]) | assigned(rest[1]) == set(range(6))
    finally:
        for c in cs[1:]:
            c.close()


# A group member in a process of its own, so the test can kill -9 it: it
# heartbeats and prints its assignment until killed.
CHILD_CONSUMER = r"""
import sys
from confluent_kafka import Consumer
c = Consumer({"bootstrap.servers": sys.argv[1], "group.id": sys.argv[2], "client.id": "child",
              "auto.offset.reset": "earliest", "enable.auto.commit": False,
              "session.timeout.ms": 6000, "heartbeat.interval.ms": 500})
c.subscribe([sys.argv[3]])
while True:
    c.poll(0.1)
    print(sorted(tp.partition for tp in c.assignment()), flush=True)
"""


def test_killed_consumer_leaves_after_the_session_timeout(broker, topic, consumers):
    clients.create_topic(broker.bootstrap, topic, 6)
    group = f"g-{uuid.uuid4().hex[:8]}"
    child = subprocess.Popen([sys.executable, "-c", CHILD_CONSUMER, broker.bootstrap, group, topic],
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    survivors = [consumers(broker, group) for _ in range(2)]
    try:
        for c in survivors:
            c.subscribe([topic])
        # Three members (the child included) hold two partitions each.
        poll_until(survivors, lambda: all(len(assigned(c)) == 2 for c in survivors))
        assert child.poll() is None, child.stderr.read().decode(errors="replace")
        child.kill()  # SIGKILL: no LeaveGroup, only the session timeout removes it
        child.wait()
        poll_until(survivors, lambda: all(len(assigned(c)) == 3 for c in survivors), timeout=60)
        assert assigned(survivors[0]) | assigned(survivors[1]) == set(range(6))
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
        for c in survivors:
            c.close()


def test_committed_offsets_resume_exactly(broker, topic, consumers):
    clients.create_topic(broker.bootstrap, topic, 2)
    produce_n(broker, topic, 400, 2)
    group = f"g-{uuid.uuid4().hex[:8]}"
    first = consumers(broker, group)
    got: list = []
    try:
        first.subscribe([topic])
        poll_until([first], lambda: len(got) >= 150, sink=got)
        first.commit(asynchronous=False)
        committed = {tp.partition: tp.offset for tp in first.committed(
            [TopicPartition(topic, p) for p in range(2)], timeout=30)}
    finally:
        first.close()
    consumed_before = {(m.partition(), m.offset()) for m in got}
    for p in range(2):
        read = [o for pp, o in consumed_before if pp == p]
        if read:
            assert committed[p] == max(read) + 1, (p, committed)
        else:
            assert committed[p] < 0, f"partition {p} never read but committed at {committed[p]}"

    second = consumers(broker, group)
    rest: list = []
    try:
        second.subscribe([topic])
        poll_until([second], lambda: len(rest) >= 400 - len(got), sink=rest)
    finally:
        second.close()
    after = {(m.partition(), m.offset()) for m in rest}
    assert not consumed_before & after, "records read again after a clean commit"
    assert len(consumed_before | after) == 400, "records skipped"


def test_static_member_rejoins_without_rebalancing_others(broker, topic, consumers):
    clients.create_topic(broker.bootstrap, topic, 4)
    group = f"g-{uuid.uuid4().hex[:8]}"
    revoked_b = []
    a = consumers(broker, group, **{"group.instance.id": "a", "session.timeout.ms": 15000})
    b = consumers(broker, group, **{"group.instance.id": "b", "session.timeout.ms": 15000})
    a2 = None
    try:
        a.subscribe([topic])
        b.subscribe([topic], on_revoke=lambda c, ps: revoked_b.append(ps))
        poll_until([a, b], lambda: len(assigned(a)) == 2 and len(assigned(b)) == 2)
        a_parts = assigned(a)
        revoked_b.clear()
        a.close()  # a static member does not leave the group on close
        a2 = consumers(broker, group, **{"group.instance.id": "a", "session.timeout.ms": 15000})
        a2.subscribe([topic])
        poll_until([a2, b], lambda: len(assigned(a2)) == 2, timeout=30)
        assert assigned(a2) == a_parts
        assert not revoked_b, f"the other member was rebalanced: {revoked_b}"
    finally:
        b.close()
        if a2 is not None:
            a2.close()


def test_kcat_balanced_consumers_read_every_record_once(broker, topic):
    clients.create_topic(broker.bootstrap, topic, 4)
    produce_n(broker, topic, 2000, 4)
    group = f"g-{uuid.uuid4().hex[:8]}"
    cmd = ["kcat", "-b", broker.bootstrap, "-G", group, "-e", "-q", "-f", "%p %o\n",
           "-X", "auto.offset.reset=earliest", topic]
    procs = [subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE) for _ in range(2)]
    try:
        outs = [p.communicate(timeout=120) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    for p, (_, err) in zip(procs, outs):
        assert p.returncode == 0, err.decode(errors="replace")
    seen = [tuple(map(int, line.split())) for out, _ in outs for line in out.splitlines()]
    assert len(seen) == len(set(seen)), "a record was read twice"
    assert len(seen) == 2000


def test_kafka_python_admin_lists_describes_and_deletes_groups(broker, topic, consumers):
    clients.create_topic(broker.bootstrap, topic, 2)
    produce_n(broker, topic, 100, 2)
    group = f"g-{uuid.uuid4().hex[:8]}"
    c = consumers(broker, group)
    a = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        c.subscribe([topic])
        got: list = []
        poll_until([c], lambda: len(got) >= 100, sink=got)
        c.commit(asynchronous=False)
        states = {g["group_id"]: g["group_state"] for g in a.list_groups()}
        assert states.get(group) == "Stable", states.get(group)
        desc = a.describe_groups([group])[group]
        assert desc["group_state"] == "Stable" and desc["protocol_type"] == "consumer"
        (member,) = desc["members"]
        assert member["client_host"] == "/127.0.0.1", member["client_host"]
        assert member["member_metadata"]["topics"] == [topic]
        (assignment,) = member["member_assignment"]["assigned_partitions"]
        assert assignment["topic"] == topic and sorted(assignment["partitions"]) == [0, 1]
        offsets = a.list_group_offsets(group)[group]
        assert {tp.partition: om.offset for tp, om in offsets.items()} == {0: 50, 1: 50}
    finally:
        c.close()
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        state = {g["group_id"]: g["group_state"] for g in a.list_groups()}.get(group)
        if state == "Empty":
            break
        time.sleep(0.2)
    assert a.delete_groups([group]) == {group: "OK"}
    assert group not in {g["group_id"] for g in a.list_groups()}
    a.close()


@pytest.mark.managed
def test_commits_survive_kill9(fresh_broker, topic, consumers):
    """kill -9 while offsets are being committed (raw OffsetCommit of a
    member-less group, one commit after another): after the restart the
    committed offset is the last acknowledged commit, or the one in flight."""
    b = fresh_broker
    clients.create_topic(b.bootstrap, topic, 1)
    group = f"g-{uuid.uuid4().hex[:8]}"
    killer = threading.Timer(1.0, b.kill9)
    acked = attempted = 0
    deadline = time.monotonic() + 60
    with kwire.Conn(b.host, b.port, timeout=10) as conn:
        _node, host, port = kwire.find_coordinator(conn, group)
        assert f"{host}:{port}" == b.bootstrap
        v = conn.pick_version(kwire.API_OFFSET_COMMIT, 2, 7)
        try:
            offset = 1
            while True:
                attempted = offset
                try:
                    r = conn.request(kwire.API_OFFSET_COMMIT, v,
                                     kwire.offset_commit_body(v, group, -1, "", topic, 0, offset))
                    err = kwire.parse_offset_commit(r, v)
                except (OSError, kwire.ProtocolError):
                    break  # the broker is gone
                if err in kwire.RETRIABLE_INIT_ERRORS:
                    assert time.monotonic() < deadline, f"coordinator never ready (error {err})"
                    time.sleep(0.1)
                    continue  # coordinator still loading: same offset again
                assert err == kwire.ERR_NONE, f"OffsetCommit error {err}"
                acked = offset
                offset += 1
                if acked == 1:
                    killer.start()  # the coordinator works: kill it while commits flow
        finally:
            if killer.is_alive() or acked:
                killer.join()
    assert acked > 0, "no commit was acknowledged before the kill"
    b.start()
    c = consumers(b, group)
    (tp,) = c.committed([TopicPartition(topic, 0)], timeout=60)
    assert tp.offset in (acked, attempted), f"committed {tp.offset}, last acknowledged {acked}"


def consumer_groups_tool(broker, *args: str) -> str:
    """Kafka's kafka-consumer-groups tool (kafka-tools from Maven Central)."""
    libs = javalibs.maven_libs("kafka-tools", "3.9.1")
    proc = javalibs.java(f"{libs}/*", "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand",
                         "--bootstrap-server", broker.bootstrap, *args, timeout=120)
    out = proc.stdout.decode(errors="replace")
    assert proc.returncode == 0, f"kafka-consumer-groups {' '.join(args)}: {out}\n{proc.stderr.decode(errors='replace')}"
    return out


def describe_rows(out: str, topic: str) -> dict[int, tuple[int, int, int]]:
    """{partition: (current offset, log end offset, lag)} from --describe."""
    rows = {}
    for line in out.splitlines():
        cols = line.split()
        if len(cols) >= 6 and cols[1] == topic:
            rows[int(cols[2])] = tuple(int(c) if c != "-" else -1 for c in cols[3:6])
    return rows


def test_kafka_consumer_groups_tool_list_describe_reset(broker, topic, consumers):
    clients.create_topic(broker.bootstrap, topic, 2)
    produce_n(broker, topic, 100, 2)
    group = f"g-{uuid.uuid4().hex[:8]}"
    c = consumers(broker, group)
    try:
        c.subscribe([topic])
        got: list = []
        poll_until([c], lambda: len(got) >= 100, sink=got)
        c.commit(offsets=[TopicPartition(topic, 0, 30), TopicPartition(topic, 1, 20)], asynchronous=False)
        # Active group: each row names the member's host as Kafka prints it.
        active = consumer_groups_tool(broker, "--describe", "--group", group)
        hosts = [line.split()[7] for line in active.splitlines()
                 if len(line.split()) >= 9 and line.split()[1] == topic]
        assert hosts == ["/127.0.0.1", "/127.0.0.1"], active
    finally:
        c.close()

    assert group in consumer_groups_tool(broker, "--list").split()
    rows = describe_rows(consumer_groups_tool(broker, "--describe", "--group", group), topic)
    assert rows == {0: (30, 50, 20), 1: (20, 50, 30)}, rows

    consumer_groups_tool(broker, "--reset-offsets", "--to-earliest", "--execute", "--group", group, "--topic", topic)
    rows = describe_rows(consumer_groups_tool(broker, "--describe", "--group", group), topic)
    assert rows == {0: (0, 50, 50), 1: (0, 50, 50)}, rows


@pytest.mark.parametrize("version", ["3.9.1", "4.1.1"])
def test_java_consumer_group_manual_commits_and_join(broker, topic, version):
    clients.create_topic(broker.bootstrap, topic, 4)
    produce_n(broker, topic, 400, 4)
    libs = javalibs.maven_libs("kafka-clients", version)
    source = javalibs.JAVA_DIR / "HelixGroupCheck.java"
    cp = f"{javalibs.compiled(source, libs)}:{libs}/*"
    group = f"g-{uuid.uuid4().hex[:8]}"
    proc = javalibs.java(cp, "HelixGroupCheck", broker.bootstrap, topic, group, "100")
    out = proc.stdout.decode(errors="replace")
    assert proc.returncode == 0, f"{out}\n{proc.stderr.decode(errors='replace')[-6000:]}"
    assert "HELIX-JAVA-GROUP OK records=400" in out


def test_java_admin_group_offsets_refused_on_active_allowed_on_empty(broker, topic):
    clients.create_topic(broker.bootstrap, topic, 2)
    produce_n(broker, topic, 20, 2)
    libs = javalibs.maven_libs("kafka-clients", "3.9.1")
    source = javalibs.JAVA_DIR / "HelixGroupAdminCheck.java"
    cp = f"{javalibs.compiled(source, libs)}:{libs}/*"
    group = f"g-{uuid.uuid4().hex[:8]}"
    proc = javalibs.java(cp, "HelixGroupAdminCheck", broker.bootstrap, topic, group)
    out = proc.stdout.decode(errors="replace")
    assert proc.returncode == 0, f"{out}\n{proc.stderr.decode(errors='replace')[-6000:]}"
    assert "HELIX-JAVA-GROUP-ADMIN OK" in out


@pytest.mark.parametrize("internal", ["excluded", "include-internal"])
def test_java_pattern_subscription_takes_internal_topics_only_when_asked(broker, topic, internal):
    """Issue 32 item 5: Metadata marks __consumer_offsets internal, so a Java
    pattern subscription that matches it by name is assigned only the user
    topic with the client's default exclude.internal.topics, and the
    internal topic too when asked (exclude.internal.topics=false)."""
    clients.create_topic(broker.bootstrap, topic, 2)
    # Kafka creates __consumer_offsets on its first group use: one commit.
    c = group_consumer(broker, f"g-{uuid.uuid4().hex[:8]}")
    try:
        c.commit(offsets=[TopicPartition(topic, 0, 0)], asynchronous=False)
    finally:
        c.close()
    libs = javalibs.maven_libs("kafka-clients", "3.9.1")
    source = javalibs.JAVA_DIR / "HelixPatternCheck.java"
    cp = f"{javalibs.compiled(source, libs)}:{libs}/*"
    proc = javalibs.java(cp, "HelixPatternCheck", broker.bootstrap, topic, f"g-{uuid.uuid4().hex[:8]}", internal)
    out = proc.stdout.decode(errors="replace")
    assert proc.returncode == 0, f"{out}\n{proc.stderr.decode(errors='replace')[-6000:]}"
    # __transaction_state (issue 32 step 3) is internal too, and exists from
    # the start here (Kafka creates it on the first transactional use).
    want = (f"__consumer_offsets,__transaction_state,{topic}" if internal == "include-internal"
            else topic)
    assert f"HELIX-JAVA-PATTERN assigned={want}\n" in out, out


@pytest.mark.managed
def test_consumer_offsets_is_snapshotted_and_commits_survive_kill9(tmp_path, topic):
    """With group_snapshot_after_records = 20, 200 offset commits of one
    group leave a small part of __consumer_offsets in the log (its start
    moved to the last snapshot: the proposal queue shared with the
    transaction coordinator, replica/internal_queue.rs, deletes before an
    acknowledged snapshot), and the last commit is read back after kill -9."""
    if harness.external_bootstrap() or os.environ.get("HELIX_TEST_KAFKA_LIBS"):
        pytest.skip("needs a Helix broker the suite starts with its own flags")
    b = harness.HelixBroker(harness.helix_binary(), tmp_path,
                            extra_args=["--group-snapshot-after-records", "20"])
    b.start()
    try:
        clients.create_topic(b.bootstrap, topic, 1)
        group = f"g-{uuid.uuid4().hex[:8]}"
        c = group_consumer(b, group)
        try:
            for n in range(1, 201):
                c.commit(offsets=[TopicPartition(topic, 0, n)], asynchronous=False)
        finally:
            c.close()

        def extent() -> tuple[int, int]:
            reader = Consumer({**clients.RDKAFKA, "bootstrap.servers": b.bootstrap,
                               "group.id": f"r-{uuid.uuid4().hex[:8]}"})
            try:
                written = left = 0
                for p in range(50):
                    low, high = reader.get_watermark_offsets(
                        TopicPartition("__consumer_offsets", p), timeout=30)
                    written, left = written + high, left + high - low
                return written, left
            finally:
                reader.close()

        # The snapshot is proposed at the coordinator's next tick after the
        # last commit; its acknowledgement moves the log start.
        deadline = time.monotonic() + 30
        written, left = extent()
        while not (written >= 200 and left * 3 < written) and time.monotonic() < deadline:
            time.sleep(0.2)
            written, left = extent()
        assert written >= 200 and left * 3 < written, (written, left)
        b.restart()
        assert extent()[1] <= left, (written, left)
        c = group_consumer(b, group)
        try:
            deadline = time.monotonic() + 30
            while True:
                try:
                    got = c.committed([TopicPartition(topic, 0)], timeout=10)
                    break
                except Exception:
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.5)
            assert got[0].offset == 200, got
        finally:
            c.close()
        print(f"__consumer_offsets: {written} records written, {left} left")
    finally:
        b.stop()
