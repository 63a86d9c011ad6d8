"""Kafka 3.9.1's operator CLI tools against a 3-node Helix cluster (the
tool classes from the kafka-tools artifact, as an operator runs
`kafka-log-dirs.sh`, `kafka-metadata-quorum.sh`,
`kafka-reassign-partitions.sh` and `kafka-leader-election.sh`), each
asserted on what it prints (docs/compatibility.md, "Operator tools").

- `kafka-log-dirs.sh --describe --topic-list T`: every node answers
  DescribeLogDirs with its data directory and its replica of each
  partition of T, with its size in bytes (> 0 once records are stored).
- `kafka-metadata-quorum.sh describe --status / --replication`: the
  controller's Raft group as `__cluster_metadata`: its leader, the three
  voters, the high watermark, whichever node the tool asks.
- `kafka-reassign-partitions.sh --list`: nothing is being reassigned.
- `kafka-leader-election.sh --election-type preferred`: partitions whose
  preferred replica leads need no election; one led elsewhere is handed
  back to it.
- `kafka-configs.sh --entity-type broker-loggers`: a node's loggers and
  their levels, changed at runtime; `--entity-type brokers --alter`:
  refused with Kafka's error for settings that cannot change at runtime.
"""

from __future__ import annotations

import json
import os
import re
import time

import pytest
from confluent_kafka import Producer

import clients
import harness
import javalibs
from cluster_harness import HelixCluster
from test_cluster_faults import create_topic, partitions_view, wait_in_sync

RECORDS = 200  # small: each partition holds a few kB on each node


def tool(bootstrap: str, main: str, *args: str, ok: bool = True) -> str:
    """Runs one of Kafka 3.9.1's tool classes against `bootstrap`; its
    stdout (asserting it exited 0 unless `ok` is False)."""
    cp = os.pathsep.join([f"{javalibs.maven_libs('kafka-tools', '3.9.1')}/*",
                          f"{javalibs.maven_libs('kafka_2.13', '3.9.1')}/*"])
    proc = javalibs.java(cp, main, "--bootstrap-server", bootstrap, *args, timeout=120)
    out = proc.stdout.decode(errors="replace")
    err = proc.stderr.decode(errors="replace")[-4000:]
    if ok:
        assert proc.returncode == 0, f"{main} {args}: exit {proc.returncode}\n{out}\n{err}"
    return out + err


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    if harness.external_bootstrap() or os.environ.get("HELIX_TEST_KAFKA_LIBS"):
        pytest.skip("starts its own 3-node Helix cluster")
    c = HelixCluster(tmp_path_factory.mktemp("operator-tools"), 3)
    try:
        c.start()
        yield c
    finally:
        c.stop()


def all_bootstrap(cluster: HelixCluster) -> str:
    return ",".join(n.bootstrap for n in cluster.nodes)


def test_log_dirs_shows_every_replica_with_its_size(cluster, topic):
    create_topic(cluster.node(1).bootstrap, topic, 3)
    wait_in_sync(cluster, topic)
    p = Producer({**clients.RDKAFKA, "bootstrap.servers": all_bootstrap(cluster), "acks": "all"})
    for i in range(RECORDS):
        p.produce(topic, value=b"x" * 100, partition=i % 3)
    assert p.flush(30) == 0
    wait_in_sync(cluster, topic)

    # A follower writes an entry to its WAL once it hears it is committed:
    # ask again until every replica holds bytes (or the deadline passes).
    deadline = time.monotonic() + 60
    while True:
        out = tool(all_bootstrap(cluster), "org.apache.kafka.tools.LogDirsCommand",
                   "--describe", "--topic-list", topic)
        line = next(l for l in out.splitlines() if l.startswith("{"))
        brokers = {b["broker"]: b["logDirs"] for b in json.loads(line)["brokers"]}
        sizes = [p["size"] for dirs in brokers.values() for d in dirs for p in d["partitions"]]
        if (len(sizes) == 9 and all(s > 0 for s in sizes)) or time.monotonic() > deadline:
            break
    assert sorted(brokers) == [1, 2, 3], out
    for node in cluster.nodes:
        (log_dir,) = brokers[node.id]
        assert log_dir["error"] is None, log_dir
        assert log_dir["logDir"] == str(node.data_dir.resolve()), log_dir
        parts = {p["partition"]: p for p in log_dir["partitions"]}
        assert sorted(parts) == [f"{topic}-{i}" for i in range(3)], log_dir
        for p in parts.values():
            assert p["size"] > 0, p
            assert p["offsetLag"] >= 0, p
            assert p["isFuture"] is False, p


def status_fields(out: str) -> dict[str, str]:
    fields = {}
    for line in out.splitlines():
        key, sep, value = line.partition(":")
        if sep and key and " " not in key:
            fields[key] = value.strip()
    return fields


def test_metadata_quorum_describes_the_controller_group_on_every_node(cluster):
    for node in cluster.nodes:
        out = tool(node.bootstrap, "org.apache.kafka.tools.MetadataQuorumCommand",
                   "describe", "--status")
        f = status_fields(out)
        assert int(f["LeaderId"]) in (1, 2, 3), out
        assert int(f["LeaderEpoch"]) >= 1, out
        assert int(f["HighWatermark"]) > 0, out
        for voter in (1, 2, 3):
            assert f'"id": {voter}' in f["CurrentVoters"], out
        assert f["CurrentObservers"] == "[]", out

    leader = int(f["LeaderId"])
    out = tool(cluster.node(leader).bootstrap, "org.apache.kafka.tools.MetadataQuorumCommand",
               "describe", "--replication")
    rows = [l.split() for l in out.splitlines() if l.strip()]
    assert rows[0][:3] == ["NodeId", "DirectoryId", "LogEndOffset"], out
    by_node = {int(r[0]): r for r in rows[1:] if r[0].isdigit()}
    assert sorted(by_node) == [1, 2, 3], out
    assert by_node[leader][-1] == "Leader", out
    assert all(by_node[n][-1] == "Follower" for n in (1, 2, 3) if n != leader), out
    # The leader knows how far each follower's log reaches.
    assert all(int(r[2]) > 0 for r in by_node.values()), out


def test_reassign_partitions_list_finds_none(cluster):
    out = tool(all_bootstrap(cluster), "org.apache.kafka.tools.reassign.ReassignPartitionsCommand",
               "--list")
    assert "No partition reassignments found." in out, out


def test_preferred_leader_election_is_not_needed_where_the_preferred_replica_leads(cluster, topic):
    create_topic(cluster.node(1).bootstrap, topic, 3)
    view = wait_in_sync(cluster, topic)
    md = clients.admin(cluster.node(1).bootstrap).list_topics(topic=topic, timeout=30)
    leading = [p for p, m in md.topics[topic].partitions.items() if m.leader == m.replicas[0]]
    assert leading, view
    p = leading[0]
    out = tool(all_bootstrap(cluster), "org.apache.kafka.tools.LeaderElectionCommand",
               "--election-type", "preferred", "--topic", topic, "--partition", str(p))
    assert f"Valid replica already elected for partitions {topic}-{p}" in out, out


CONFIGS = "kafka.admin.ConfigCommand"


def test_broker_loggers_are_described_and_changed_at_runtime(cluster):
    node = cluster.node(2)
    out = tool(node.bootstrap, CONFIGS, "--describe", "--entity-type", "broker-loggers",
               "--entity-name", "2")
    root = re.search(r"root=(\w+)", out).group(1)  # the harness's RUST_LOG
    assert f"helix_server.kafka={root}" in out, out

    out = tool(node.bootstrap, CONFIGS, "--alter", "--entity-type", "broker-loggers",
               "--entity-name", "2", "--add-config", "helix_server.kafka=DEBUG")
    assert "Completed updating config for broker-logger 2" in out, out
    out = tool(node.bootstrap, CONFIGS, "--describe", "--entity-type", "broker-loggers",
               "--entity-name", "2")
    assert "helix_server.kafka=DEBUG" in out, out
    assert f"root={root}" in out, out
    assert "log levels changed" in node.log.read_text(errors="replace")

    # An unknown level is refused, naming log4j's levels, and changes nothing.
    out = tool(node.bootstrap, CONFIGS, "--alter", "--entity-type", "broker-loggers",
               "--entity-name", "2", "--add-config", "root=VERBOSE", ok=False)
    assert "Valid log4j levels are" in out, out
    # DELETE puts the logger back on the root's level.
    tool(node.bootstrap, CONFIGS, "--alter", "--entity-type", "broker-loggers",
         "--entity-name", "2", "--delete-config", "helix_server.kafka")
    out = tool(node.bootstrap, CONFIGS, "--describe", "--entity-type", "broker-loggers",
               "--entity-name", "2")
    assert f"helix_server.kafka={root}" in out and f"root={root}" in out, out


def test_a_broker_setting_change_is_refused_naming_the_settings(cluster):
    out = tool(all_bootstrap(cluster), CONFIGS, "--alter", "--entity-type", "brokers",
               "--entity-default", "--add-config", "log.cleaner.threads=2", ok=False)
    assert "Cannot update these configs dynamically: Set(log.cleaner.threads)" in out, out
    out = tool(cluster.node(1).bootstrap, CONFIGS, "--alter", "--entity-type", "brokers",
               "--entity-name", "1", "--add-config", "log.cleaner.threads=2,log.retention.ms=1000",
               ok=False)
    assert "Cannot update these configs dynamically: Set(" in out, out
    assert "log.cleaner.threads" in out and "log.retention.ms" in out, out
    # Unchanged.
    out = tool(cluster.node(1).bootstrap, CONFIGS, "--describe", "--entity-type", "brokers",
               "--entity-name", "1", "--all")
    assert "log.cleaner.threads=1" in out, out


def test_preferred_leader_election_moves_leadership_back(tmp_path, topic):
    """With leader balancing off, a partition whose preferred replica was
    stopped stays led elsewhere after it returns; kafka-leader-election.sh
    hands it back (the leader transfers leadership, Raft's TimeoutNow)."""
    if harness.external_bootstrap() or os.environ.get("HELIX_TEST_KAFKA_LIBS"):
        pytest.skip("starts its own 3-node Helix cluster")
    c = HelixCluster(tmp_path, 3, args=["--auto-leader-rebalance-enable", "false"])
    try:
        c.start()
        create_topic(c.node(1).bootstrap, topic, 1)
        wait_in_sync(c, topic)
        md = clients.admin(c.node(1).bootstrap).list_topics(topic=topic, timeout=30)
        preferred = md.topics[topic].partitions[0].replicas[0]
        c.node(preferred).stop()
        deadline = time.monotonic() + 60
        other = next(n for n in c.nodes if n.id != preferred)
        while True:
            md = clients.admin(other.bootstrap).list_topics(topic=topic, timeout=30)
            leader = md.topics[topic].partitions[0].leader
            if leader not in (-1, preferred):
                break
            assert time.monotonic() < deadline, f"no new leader\n{c.logs()}"
            time.sleep(0.2)
        c.node(preferred).start()
        wait_in_sync(c, topic)
        assert partitions_view(c, topic)[0][0] != preferred  # balancing is off

        out = tool(all_bootstrap(c), "org.apache.kafka.tools.LeaderElectionCommand",
                   "--election-type", "preferred", "--topic", topic, "--partition", "0")
        assert f"Successfully completed leader election (PREFERRED) for partitions {topic}-0" in out, out
        assert partitions_view(c, topic)[0][0] == preferred
    finally:
        c.stop()
