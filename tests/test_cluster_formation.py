"""A new cluster forms with a node missing (ADR 0018's formation rule).

Three nodes are configured and only two are started, the second once the
first is already asking its peers. The node that heard the other "not
formed" first forms the cluster; the other then finds it formed, having
seen nothing of it, and before the fix waited for the third node, which
never came: neither node ever served (a majority of 2 of 3 needs both).
Now a founder tells the node it counted that it was one of the founders,
and both serve. The third node joins later as a member (it never took
part, and every peer says so).

Nothing here measures time: waits only bound how long a test may hang."""

from __future__ import annotations

import os
import time
import uuid

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

import harness
from cluster_harness import HelixCluster

pytestmark = [
    pytest.mark.timeout(300),
    pytest.mark.skipif(bool(harness.external_bootstrap()) or bool(os.environ.get("HELIX_TEST_KAFKA_LIBS")),
                       reason="starts Helix nodes of its own"),
]


def test_two_of_three_nodes_form_a_new_cluster_started_one_after_the_other(tmp_path):
    cluster = HelixCluster(tmp_path / "cluster", n=3)
    first, second, third = cluster.nodes
    try:
        first.start(wait=False)
        deadline = time.monotonic() + 60
        while "waiting for peers" not in first.log.read_text(errors="replace"):
            assert first.alive() and time.monotonic() < deadline, first.log_tail()
            time.sleep(0.05)
        second.start(wait=False)
        for n in (first, second):
            n.wait_serving()
            n.wait_routing()
        bootstrap = f"{first.bootstrap},{second.bootstrap}"
        topic = f"formed-{uuid.uuid4().hex[:8]}"
        admin = AdminClient({"bootstrap.servers": bootstrap})
        admin.create_topics([NewTopic(topic, 1, 3)])[topic].result(60)
        p = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
        failed = []
        for i in range(10):
            p.produce(topic, value=b"%d" % i, on_delivery=lambda err, _m: err and failed.append(err))
        assert p.flush(60) == 0 and not failed, failed
        # The third node, started last, joins as a member and serves too.
        third.start(wait=False)
        third.wait_serving()
        third.wait_routing()
        assert "starts as a new member" in third.log.read_text(errors="replace")
    finally:
        cluster.stop()
