"""Consumer groups with real clients against the real helix-server binary.

librdkafka (confluent-kafka, kcat) and kafka-python form groups, rebalance,
commit and resume; static members come back without a rebalance; the
broker is kill -9'd while a group commits. Run by scripts/test.sh
(HELIX_SERVER_BIN) or alone: `python3 -m pytest -q tests/test_groups.py`
(falls back to target/debug/helix-server).
"""
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIN = os.environ.get("HELIX_SERVER_BIN", os.path.join(ROOT, "target", "debug", "helix-server"))


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Broker:
    def __init__(self, data_dir, port):
        self.data_dir, self.port = data_dir, port
        self.bootstrap = "127.0.0.1:%d" % port
        self.proc = None

    def start(self):
        self.proc = subprocess.Popen(
            [BIN, "--listen", self.bootstrap, "--data-dir", self.data_dir, "--log-level", "warn"],
            stdout=subprocess.DEVNULL)
        deadline = time.time() + 20
        while True:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                return
            except OSError:
                assert time.time() < deadline, "helix-server did not start"
                time.sleep(0.05)

    def kill9(self):
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(timeout=20)


OPEN_CONSUMERS = []


@pytest.fixture
def broker():
    data_dir = tempfile.mkdtemp(prefix="helix-groups-")
    b = Broker(data_dir, free_port())
    b.start()
    yield b
    # A consumer left open by a failed assertion would block the
    # interpreter's exit trying to leave its group: close them first.
    while OPEN_CONSUMERS:
        try:
            OPEN_CONSUMERS.pop().close()
        except RuntimeError:
            pass
    b.stop()
    shutil.rmtree(data_dir, ignore_errors=True)


def make_topic(b, name, partitions, records=0):
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    admin.create_topics([NewTopic(name, partitions, 1)])[name].result(timeout=10)
    p = Producer({"bootstrap.servers": b.bootstrap})
    for i in range(records):
        p.produce(name, key=str(i), value=str(i), partition=i % partitions)
    assert p.flush(20) == 0


def consumer(b, group, name, **extra):
    conf = {"bootstrap.servers": b.bootstrap, "group.id": group, "client.id": name,
            "auto.offset.reset": "earliest", "enable.auto.commit": False,
            "session.timeout.ms": 6000, "heartbeat.interval.ms": 300}
    conf.update(extra)
    c = Consumer(conf)
    OPEN_CONSUMERS.append(c)
    return c


def assigned(c):
    return sorted(tp.partition for tp in c.assignment())


def poll_until(consumers, done, secs=30, seen=None, commit=True):
    """Polls every consumer until done() holds; records (partition, offset) reads."""
    end = time.time() + secs
    while time.time() < end:
        for c in consumers:
            m = c.poll(0.05)
            if m is not None and not m.error():
                if seen is not None:
                    seen.append((m.partition(), m.offset()))
                if commit:
                    try:
                        c.commit(message=m, asynchronous=False)
                    except KafkaException as e:
                        # Kafka's answer while a (cooperative) rebalance
                        # completes; the next commit covers this one.
                        if e.args[0].code() != KafkaError.REBALANCE_IN_PROGRESS:
                            raise
        if done():
            return True
    return False


@pytest.mark.parametrize("strategy", ["range", "cooperative-sticky"])
def test_three_consumers_share_six_partitions_then_two_take_all(broker, strategy):
    make_topic(broker, "six", 6, records=600)
    cs = [consumer(broker, "g", "c%d" % i, **{"partition.assignment.strategy": strategy}) for i in range(3)]
    for c in cs:
        c.subscribe(["six"])
    assert poll_until(cs, lambda: [len(assigned(c)) for c in cs] == [2, 2, 2])
    assert sorted(p for c in cs for p in assigned(c)) == list(range(6))
    cs[2].close()
    rest = cs[:2]
    assert poll_until(rest, lambda: sorted(p for c in rest for p in assigned(c)) == list(range(6)))
    for c in rest:
        c.close()


def test_committed_offsets_resume_exactly(broker):
    make_topic(broker, "resume", 3, records=300)
    seen = []
    c = consumer(broker, "g", "first")
    c.subscribe(["resume"])
    assert poll_until([c], lambda: len(seen) >= 150, seen=seen)
    c.close()
    c = consumer(broker, "g", "second")
    c.subscribe(["resume"])
    assert poll_until([c], lambda: len(seen) >= 300, seen=seen)
    c.close()
    assert len(seen) == 300 and len(set(seen)) == 300, "no record read twice, none skipped"


CHILD = r"""
import sys, time
from confluent_kafka import Consumer
conf = {"bootstrap.servers": sys.argv[1], "group.id": sys.argv[2], "client.id": "child",
        "session.timeout.ms": 6000, "heartbeat.interval.ms": 300, "auto.offset.reset": "earliest"}
if len(sys.argv) > 3:
    conf["group.instance.id"] = sys.argv[3]
c = Consumer(conf)
c.subscribe(["kill"])
while True:
    c.poll(0.1)
    print(sorted(tp.partition for tp in c.assignment()), flush=True)
"""


def test_killed_consumer_leaves_after_the_session_timeout(broker):
    make_topic(broker, "kill", 6)
    child = subprocess.Popen([sys.executable, "-c", CHILD, broker.bootstrap, "gk"], stdout=subprocess.PIPE, text=True)
    c = consumer(broker, "gk", "parent")
    c.subscribe(["kill"])
    assert poll_until([c], lambda: len(assigned(c)) == 3)
    child.kill()
    child.wait()
    assert poll_until([c], lambda: len(assigned(c)) == 6, secs=20)
    c.close()


def test_static_member_restart_keeps_its_partitions_without_a_rebalance(broker):
    make_topic(broker, "kill", 6)
    args = [sys.executable, "-c", CHILD, broker.bootstrap, "gs", "child-instance"]
    child = subprocess.Popen(args, stdout=subprocess.PIPE, text=True)
    revoked = []
    c = consumer(broker, "gs", "parent", **{"group.instance.id": "parent-instance"})
    c.subscribe(["kill"], on_revoke=lambda _c, parts: revoked.extend(parts))
    assert poll_until([c], lambda: len(assigned(c)) == 3)
    before = assigned(c)
    child.kill()
    child.wait()
    revoked.clear()
    child = subprocess.Popen(args, stdout=subprocess.PIPE, text=True)
    line = ""
    deadline = time.time() + 20
    while time.time() < deadline:
        c.poll(0.05)
        line = child.stdout.readline().strip()
        if line not in ("", "[]"):
            break
    child.kill()
    assert line == str(sorted(set(range(6)) - set(before))), line
    assert assigned(c) == before and revoked == [], "the other member saw no rebalance"
    c.close()


def test_kill_9_broker_while_committing_loses_no_acknowledged_commit(broker):
    make_topic(broker, "dur", 1)
    c = consumer(broker, "gd", "committer")
    acked = []
    for offset in range(1, 200):
        c.commit(offsets=[TopicPartition("dur", 0, offset)], asynchronous=False)
        acked.append(offset)
        if offset == 150:
            broker.kill9()
            break
    c.close()
    broker.start()
    c = consumer(broker, "gd", "reader")
    [tp] = c.committed([TopicPartition("dur", 0)], timeout=10)
    assert tp.offset == acked[-1] or tp.offset == acked[-2]
    c.close()


def test_two_kcat_processes_read_every_record_once(broker):
    if shutil.which("kcat") is None:
        pytest.skip("kcat is not installed")
    make_topic(broker, "kc", 4)
    procs = [subprocess.Popen(["kcat", "-b", broker.bootstrap, "-G", "kcg", "kc", "-o", "beginning",
                               "-X", "session.timeout.ms=6000", "-f", "%p:%o\n", "-u"],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(2)]
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    deadline = time.time() + 30
    while True:
        # Both members hold partitions: the group is balanced.
        [described] = admin.describe_consumer_groups(["kcg"]).values()
        group = described.result(timeout=10)
        if len(group.members) == 2 and all(m.assignment.topic_partitions for m in group.members):
            break
        assert time.time() < deadline, "kcat processes did not form a balanced group"
        time.sleep(0.2)
    p = Producer({"bootstrap.servers": broker.bootstrap})
    for i in range(400):
        p.produce("kc", value=str(i), partition=i % 4)
    assert p.flush(20) == 0
    time.sleep(4)
    lines = []
    for proc in procs:
        proc.send_signal(signal.SIGINT)
    for proc in procs:
        out, _ = proc.communicate(timeout=20)
        lines += [l for l in out.splitlines() if l]
    assert len(lines) == 400 and len(set(lines)) == 400


def test_kafka_python_admin_lists_describes_and_deletes(broker):
    from kafka import KafkaAdminClient
    from kafka import TopicPartition as KafkaTopicPartition
    make_topic(broker, "adm", 2, records=10)
    c = consumer(broker, "active", "c")
    c.subscribe(["adm"])
    assert poll_until([c], lambda: len(assigned(c)) == 2)
    idle = consumer(broker, "idle", "i")
    idle.commit(offsets=[TopicPartition("adm", 0, 5)], asynchronous=False)
    idle.close()
    a = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    states = {g["group_id"]: g["group_state"] for g in a.list_groups()}
    assert states == {"active": "Stable", "idle": "Empty"}
    described = a.describe_groups(["active"])["active"]
    assert described["protocol_type"] == "consumer" and len(described["members"]) == 1
    offsets = a.list_group_offsets("idle")["idle"]
    assert offsets[KafkaTopicPartition("adm", 0)].offset == 5
    result = a.delete_groups(["active", "idle"])
    assert result["idle"] == "OK" and result["active"] != "OK"
    assert {g["group_id"] for g in a.list_groups()} == {"active"}
    c.close()
