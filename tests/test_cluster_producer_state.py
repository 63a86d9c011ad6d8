"""Replicas never diverge through idempotent-producer state (issue 29 item 1,
ADR 0022), on a real 3-node cluster.

An idempotent producer writes to every partition; its first batches are then
removed (DeleteRecords, or retention) and node 3 comes back without the
producer state it had: killed -9 before any snapshot, or stopped and its
`derived-state.json` deleted. The same producer writes on. Before ADR 0022
every replica re-judged sequences at apply time; node 3 no longer knew the
producer, refused its next batch, and from then on held other records at
the same offsets than nodes 1 and 2. Now the leader decides once and every
replica appends what the log says: every replica of every partition ends
byte-identical and every acknowledged record is read back once, at its
acknowledged offset.
"""

from __future__ import annotations

import os
import time
import uuid

import pytest
from confluent_kafka import Producer, TopicPartition
from confluent_kafka.admin import ConfigResource, NewTopic

import clients
import harness
import kwire
from cluster_harness import HelixCluster
from cluster_load import read_all
from test_cluster_faults import FAST, assert_replicas_identical, settled_leader, wait_in_sync

pytestmark = [pytest.mark.cluster, pytest.mark.managed,
              pytest.mark.skipif(harness.external_bootstrap() is not None
                                 or os.environ.get("HELIX_TEST_KAFKA_LIBS") is not None,
                                 reason="cluster tests start their own Helix nodes")]

PARTITIONS = 3
BATCHES = 6          # flushes per phase; each sends RECORDS records to every partition
RECORDS = 20


class Writer:
    """One idempotent acks=all producer kept across the whole test (one
    producer id, sequences continuing), with every acknowledgement kept."""

    def __init__(self, bootstrap: str, topic: str):
        self.topic = topic
        self.acked: dict[int, list[tuple[int, bytes]]] = {p: [] for p in range(PARTITIONS)}
        self.errors: list[str] = []
        self.sent = 0
        self.p = Producer({**clients.RDKAFKA, "bootstrap.servers": bootstrap,
                           "enable.idempotence": True, "acks": "all", "linger.ms": 5,
                           "message.timeout.ms": 60000})

    def _delivered(self, err, msg) -> None:
        if err is not None:
            self.errors.append(str(err))
        else:
            self.acked[msg.partition()].append((msg.offset(), msg.value()))

    def write(self, batches: int) -> None:
        for _ in range(batches):
            for part in range(PARTITIONS):
                for _ in range(RECORDS):
                    value = f"v{self.sent:07d}".encode()
                    self.sent += 1
                    self.p.produce(self.topic, value=value, partition=part, on_delivery=self._delivered)
            assert self.p.flush(60) == 0, "records still in flight after 60 s"
        assert not self.errors, f"producer errors: {self.errors[:5]}"


def write_filler(bootstrap: str, topic: str) -> None:
    """A plain (non-idempotent) record of 2 KiB to every partition: it rolls
    the 1 KiB segments, so every batch of the idempotent producer lies in a
    sealed segment that retention may remove."""
    p = Producer({**clients.RDKAFKA, "bootstrap.servers": bootstrap, "acks": "all"})
    for part in range(PARTITIONS):
        p.produce(topic, value=b"f" * 2048, partition=part)
    assert p.flush(60) == 0


def await_condition(check, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = check()
        if got:
            return got
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


def snapshot_files(node) -> list:
    return list((node.data_dir / "topics").glob("*/*/derived-state.json"))


def check_every_acknowledged_record(cluster: HelixCluster, topic: str, w: Writer,
                                    removed_below: dict[int, int]) -> None:
    """Every acknowledged record at or above what was deliberately removed
    is stored once, at its acknowledged offset."""
    stored = read_all(cluster.live_bootstrap(), topic, PARTITIONS)
    for part in range(PARTITIONS):
        at = dict(stored[part])
        assert stored[part] and stored[part][0][0] <= removed_below[part] + 1, \
            f"partition {part}: the log starts at {stored[part][:1]}, past what was removed"
        for offset, value in w.acked[part]:
            if offset < removed_below[part]:
                continue
            assert at.get(offset) == value, \
                f"partition {part} offset {offset}: acknowledged {value!r}, stored {at.get(offset)!r}"
        values = [v for _, v in stored[part]]
        assert len(values) == len(set(values)), f"partition {part}: a record is stored twice"


def assert_producer_went_on(cluster: HelixCluster, topic: str, w: Writer) -> None:
    """The producer's later batches carry the epoch and the sequences its
    first ones started: every replica, the one that forgot it included,
    took its next batch as Kafka 3.9.1 does. (A refusal, UNKNOWN_PRODUCER_ID,
    makes librdkafka bump the epoch and start again at 0, or, when its own
    bookkeeping cannot rule out a batch in flight, fail the producer.)"""
    view = wait_in_sync(cluster, topic)
    for part in range(PARTITIONS):
        leader = cluster.node(view[part][0])
        end = w.acked[part][-1][0] + 1
        with kwire.Conn("127.0.0.1", leader.kafka_port) as conn:
            batches = [b for b in conn.fetch_all(topic, part, end, start_offset=end - 1)
                       if b.producer_id >= 0]
        last = batches[-1]
        assert last.producer_epoch == 0 and last.base_sequence + last.record_count == BATCHES * 2 * RECORDS, \
            (f"partition {part}: the producer's last batch is epoch {last.producer_epoch}, sequences "
             f"{last.base_sequence}+{last.record_count}: it was made to start again")


@pytest.mark.parametrize("removal,restart", [("delete_records", "kill9"),
                                             ("retention", "snapshot_deleted")])
def test_replicas_stay_identical_when_one_forgets_the_producer(tmp_path, removal, restart):
    topic = f"ps-{uuid.uuid4().hex[:8]}"
    cluster = HelixCluster(tmp_path, 3, args=FAST).start()
    try:
        admin = clients.admin(cluster.bootstrap)
        # Small segments, so retention has sealed segments to remove.
        config = {"segment.bytes": "1024"} if removal == "retention" else {}
        admin.create_topics([NewTopic(topic, num_partitions=PARTITIONS, replication_factor=3,
                                      config=config)],
                            operation_timeout=30)[topic].result(timeout=30)
        clients.wait_for_partitions(cluster.bootstrap, topic, PARTITIONS)
        w = Writer(cluster.bootstrap, topic)
        w.write(BATCHES)
        write_filler(cluster.bootstrap, topic)
        produced = {p: len(w.acked[p]) for p in range(PARTITIONS)}

        # Every batch of the producer goes, on every replica.
        if removal == "delete_records":
            cut = [TopicPartition(topic, p, produced[p]) for p in range(PARTITIONS)]
            for f in admin.delete_records(cut, operation_timeout=30).values():
                f.result(timeout=30)
        else:
            res = ConfigResource("topic", topic, set_config={"segment.bytes": "1024", "retention.ms": "1"})
            for f in admin.alter_configs([res]).values():
                f.result(timeout=30)
            # Retention runs as the setting lands, on each replica: wait until
            # every replica's first segment starts past the producer's records.
            await_condition(lambda: all(s >= produced[p] for p, s in log_starts(cluster)),
                            60, "retention to remove the producer's segments")

        # Node 3 comes back without the producer state it had.
        n3 = cluster.node(3)
        if restart == "kill9":
            n3.kill9()
        else:
            n3.stop()
            found = snapshot_files(n3)
            assert found, "a graceful stop leaves a producer-state snapshot"
            for f in found:
                f.unlink()
        if removal == "retention":
            # Raised again while node 3 is down: it restarts holding the old
            # setting (1 ms) and learns the new one from the controller's log.
            # Until it has, it must not delete by the old one (it deleted the
            # filler's segment, which the others keep).
            res = ConfigResource("topic", topic, set_config={"segment.bytes": "1024",
                                                             "retention.ms": "604800000"})
            for f in admin.alter_configs([res]).values():
                f.result(timeout=30)
        n3.start()
        wait_in_sync(cluster, topic)
        # Node 3 takes back the partitions it is the preferred leader of,
        # so the producer's next batch is decided by the replica that
        # forgot it (before ADR 0025's amendment it refused the batch,
        # and librdkafka failed the producer).
        for p in range(PARTITIONS):
            settled_leader(cluster, topic, p)

        # The same producer writes on.
        w.write(BATCHES)
        check_every_acknowledged_record(cluster, topic, w, produced)
        assert_producer_went_on(cluster, topic, w)
        assert_replicas_identical(cluster, topic)
    finally:
        cluster.stop()


def log_starts(cluster: HelixCluster) -> list[tuple[int, int]]:
    """(partition, base offset of its first segment) of every replica on
    every node: each replica applies retention on its own, so each one's
    files are asked, not the leader."""
    out = []
    for n in cluster.nodes:
        for part, wal in cluster.wal_dirs(n).items():
            segments = sorted(wal.glob("*.log"))
            out.append((part, int(segments[0].stem) if segments else 0))
    return out
