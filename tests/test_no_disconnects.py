"""No disconnects from a node that is starting or cut off (issue 30 item 7,
ADR 0023).

librdkafka reports a closed connection through the application's error
callback ("Broker transport failure"), and a client that treats errors as
fatal stops. Before, a node that did not hear a majority of the cluster
closed the connection on Metadata. Now it answers with what it can vouch
for:
- starting (no majority heard yet): itself and whom it heard, no partition
  leader (LEADER_NOT_AVAILABLE), no controller, and LEADER_NOT_AVAILABLE
  rather than UNKNOWN_TOPIC_OR_PARTITION for a topic its table has not
  caught up with;
- cut off (it heard a majority, then lost it): the other members, not
  itself, and no leader, so a client that meets it moves to them. Only a
  connection it had answered as a member before is closed, once.

Two tests: clients connecting every 50 ms to a cluster whose nodes have
just opened their listeners (they do not hear each other yet); and to a
node cut off from its peers, where a producer that knows only that node
must also get its records acknowledged by the majority.
"""

from __future__ import annotations

import os
import time

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

import clients
import harness
import kwire
from cluster_harness import HelixCluster
from test_cluster_faults import leader_of

ERR_LEADER_NOT_AVAILABLE = 5

pytestmark = [pytest.mark.cluster, pytest.mark.managed,
              pytest.mark.skipif(harness.external_bootstrap() is not None
                                 or os.environ.get("HELIX_TEST_KAFKA_LIBS") is not None,
                                 reason="starts and cuts off its own Helix nodes")]

CLIENT_EVERY_S = 0.05


def connect_repeatedly(bootstrap: str, seconds: float) -> tuple[int, list[str]]:
    """A new admin client every 50 ms for `seconds`, each asking Metadata
    once; returns how many asked and every error callback they got."""
    errors: list[str] = []
    asked = 0
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        a = AdminClient({**clients.RDKAFKA, "bootstrap.servers": bootstrap,
                         "error_cb": lambda e: errors.append(str(e))})
        try:
            a.list_topics(timeout=1)
        except Exception:
            pass  # a Metadata that did not complete in 1 s is not a disconnect
        asked += 1
        a.poll(0)
        time.sleep(CLIENT_EVERY_S)
    return asked, errors


def test_a_starting_cluster_answers_metadata_without_disconnects(tmp_path):
    cluster = HelixCluster(tmp_path, 3)
    try:
        # A cluster that starts again on its data, one node first: it opens
        # its listener once its own state is recovered, while it hears no
        # majority, until the others are up.
        cluster.start()
        topic = "kept-across-restarts"
        admin = clients.admin(cluster.node(1).bootstrap)
        admin.create_topics([NewTopic(topic, num_partitions=1, replication_factor=3)])[topic].result(timeout=30)
        clients.wait_for_partitions(cluster.node(1).bootstrap, topic, 1, 30)
        # Killed: a node restarted after kill -9 has not kept the
        # controller's commit point.
        cluster.kill_all()
        first = cluster.node(1)
        first.start()
        # Alone, it has not learned the controller's commit: it must not
        # say the topic does not exist (UNKNOWN_TOPIC_OR_PARTITION, 3), only
        # that it has no leader for it (LEADER_NOT_AVAILABLE, 5).
        with kwire.Conn("127.0.0.1", first.kafka_port) as conn:
            try:
                leaders = conn.leaders(topic)
                topic_error = 0
            except kwire.ProtocolError as e:
                leaders, topic_error = {}, int(str(e).rsplit(" ", 1)[1])
        assert topic_error == ERR_LEADER_NOT_AVAILABLE or (
            topic_error == 0 and all(leader == -1 for leader, *_ in leaders.values())), (
            f"a node not caught up with the controller answered topic error {topic_error}, leaders {leaders}")
        asked, errors = connect_repeatedly(first.bootstrap, 3.0)
        for n in cluster.nodes[1:]:
            n.start(wait=False)
        more, later = connect_repeatedly(first.bootstrap, 4.0)
        assert asked > 10 and more > 10
        assert not errors, f"error callbacks from a node that hears no majority: {errors[:5]}"
        assert not later, f"error callbacks while the cluster formed: {later[:5]}"
        for n in cluster.nodes:
            n.wait_routing()
    finally:
        cluster.stop()


ROUNDS = 5
PARTITIONS = 24


def test_nodes_killed_and_restarted_together_never_call_an_existing_topic_unknown(tmp_path):
    """Every node killed -9 and started again at once: each recovers its
    controller log with nothing known to be committed (no topic applied)
    and learns the leader within milliseconds. Between learning the leader
    and applying what that leader had committed, and again while the
    applied record was being reconciled into its topic table (the
    replicas opened), a node that took itself for caught up answered
    UNKNOWN_TOPIC_OR_PARTITION for a topic that exists (librdkafka's
    consumers report "Subscribed topic not available"). Kafka's brokers open their listener
    only once caught up with the metadata log; Helix answers
    LEADER_NOT_AVAILABLE (retriable) until then."""
    cluster = HelixCluster(tmp_path, 3)
    try:
        cluster.start()
        # Many partitions: reconciling the topic into the table (opening
        # its replicas) takes long enough to be seen.
        topic = "exists"
        admin = clients.admin(cluster.bootstrap)
        admin.create_topics([NewTopic(topic, num_partitions=PARTITIONS, replication_factor=3)])[topic].result(timeout=30)
        clients.wait_for_partitions(cluster.bootstrap, topic, PARTITIONS, 30)
        unknown: list[tuple[int, int]] = []
        answered = 0
        for rnd in range(ROUNDS):
            cluster.kill_all()
            for n in cluster.nodes:
                n.start(wait=False)
            # Until every node names a leader for every partition, and at
            # least 2 s: the window is the first milliseconds after each
            # node learns its controller's leader.
            start = time.monotonic()
            settled = False
            while not settled or time.monotonic() - start < 2.0:
                assert time.monotonic() - start < 60, f"never settled\n{cluster.logs()}"
                settled = True
                for n in cluster.nodes:
                    try:
                        with kwire.Conn("127.0.0.1", n.kafka_port, timeout=2) as conn:
                            leaders = conn.leaders(topic)
                            answered += 1
                            settled &= all(leader > 0 for leader, *_ in leaders.values())
                    except kwire.ProtocolError as e:
                        answered += 1
                        settled = False
                        if str(e).endswith(" error 3"):
                            unknown.append((rnd, n.id))
                    except OSError:
                        settled = False  # not listening yet
                time.sleep(0.005)
        assert answered > 100
        assert not unknown, f"(round, node) that called the existing topic unknown: {unknown}"
    finally:
        cluster.stop()


def test_a_node_cut_off_from_its_peers_answers_metadata_without_disconnects(tmp_path):
    cluster = HelixCluster(tmp_path, 3, proxies=True).start()
    try:
        topic = "one-partition"
        admin = clients.admin(cluster.bootstrap)
        admin.create_topics([NewTopic(topic, num_partitions=1, replication_factor=3)])[topic].result(timeout=30)
        clients.wait_for_partitions(cluster.bootstrap, topic, 1, 30)
        cut_id = leader_of(cluster, topic, 0)
        others = sorted(n.id for n in cluster.nodes if n.id != cut_id)
        cut = cluster.node(cut_id)
        cluster.isolate(cut_id, "refuse")
        # Its connections broke: it knows at once that it is cut off (as its
        # lease is gone at once), and a new connection is told of the others
        # and of no leader. It never answers as a member that names no
        # leader: a client that asked only it would wait on it. (Before, it
        # did so until its peers had been silent for 3 s, and a fresh
        # producer's first records timed out.)
        deadline = time.monotonic() + 30
        answers = []
        while time.monotonic() < deadline:
            with kwire.Conn("127.0.0.1", cut.kafka_port) as conn:
                brokers, leaders = conn.brokers_and_leaders(topic)
            answers.append((sorted(brokers), leaders[0][0]))
            assert not (cut_id in brokers and leaders[0][0] < 0), (
                f"the cut-off node answered as a member with no leader: {answers}")
            if sorted(brokers) == others:
                break
            time.sleep(0.02)
        assert answers[-1] == (others, -1), f"the cut-off node's answers: {answers}"
        asked, errors = connect_repeatedly(cut.bootstrap, 4.0)
        assert asked > 10
        assert not errors, f"error callbacks from the cut-off node: {errors[:5]}"
        # A producer whose only bootstrap server is the cut-off node: it
        # learns the majority from it and its records are acknowledged there.
        # (When the node closed the connection instead, this producer knew
        # no other broker: every record timed out, with `1/1 brokers are
        # down` error callbacks.)
        errors.clear()
        acked: list = []
        p = Producer({**clients.RDKAFKA, "bootstrap.servers": cut.bootstrap, "enable.idempotence": True,
                      "acks": "all", "message.timeout.ms": 20000,
                      "error_cb": lambda e: errors.append(str(e))})
        for i in range(20):
            p.produce(topic, value=b"%d" % i, on_delivery=lambda err, msg: acked.append(err))
        assert p.flush(30) == 0, "records still in flight"
        assert acked == [None] * 20, [e for e in acked if e is not None][:3]
        assert not errors, f"error callbacks: {errors[:5]}"
    finally:
        cluster.stop()
