"""`__consumer_offsets` stays bounded by its live state (issue 33 item 3):
one group writes a million offset commit records (10,000 commits of 100
partitions each; a connection's commits take effect one after the other,
as on Kafka, so a million one-partition commits would take most of an
hour) and its coordinator partition keeps a few segments on disk, not the
history of its commits; after kill -9 and a restart every committed offset
is still the last one committed.

Kafka bounds the topic by compacting it (its active segment, up to
`offsets.topic.segment.bytes`, is never cleaned); Helix writes a snapshot
of the partition's whole view every `group_snapshot_after_records` records
and deletes the log before it, a whole sealed segment at a time (ADR 0020
item 6), so the same setting bounds it."""

from __future__ import annotations

import os
import struct
import time
from pathlib import Path

import pytest
from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition

import clients
import harness
import kwire

pytestmark = pytest.mark.managed

COMMITS = 10_000
PARTITIONS = 100
SEGMENT_BYTES = 1 << 20
# Requests written before their answers are read (the broker takes them one
# after the other; the window saves the round trips).
WINDOW = 100
API_OFFSET_COMMIT = 8
# A million offset records take 190 MB in the log when nothing bounds it
# (measured with group_snapshot_after_records out of reach). A log bounded
# by its live state keeps the snapshot threshold's worth of records and
# the segments they straddle: a few segments (5.4 MB measured).
DISK_BOUND_BYTES = 8 * SEGMENT_BYTES


def java_string_hash(s: str) -> int:
    h = 0
    for c in s:
        h = (31 * h + ord(c)) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h


def coordinator_log_bytes(data_dir: Path, group: str) -> int:
    """Bytes on disk of `group`'s coordinator partition's log (50 partitions)."""
    wal = data_dir / "groups" / str(abs(java_string_hash(group)) % 50) / "wal"
    return sum(f.stat().st_size for f in wal.iterdir() if f.is_file())


def commit_body(group: str, topic: str, offset: int) -> bytes:
    """OffsetCommit v2, standalone (generation -1), of `offset` for every
    partition of `topic`."""
    body = kwire.string(group) + struct.pack(">i", -1) + kwire.string("")
    body += struct.pack(">q", -1)  # retention time
    body += struct.pack(">i", 1) + kwire.string(topic) + struct.pack(">i", PARTITIONS)
    for p in range(PARTITIONS):
        body += struct.pack(">iq", p, offset) + kwire.string(None)
    return body


def commit(conn: kwire.Conn, group: str, topic: str, first: int, last: int) -> None:
    """Commits first..last-1 (commit n: offset n of every partition),
    WINDOW requests in flight; every partition must be answered NONE."""
    for start in range(first, last, WINDOW):
        frames = []
        for n in range(start, min(last, start + WINDOW)):
            body = commit_body(group, topic, n)
            frames.append(kwire.request_frame(API_OFFSET_COMMIT, 2, conn.next_id, body))
            conn.next_id += 1
        conn.send(b"".join(frames))
        for _ in frames:
            r = kwire.Reader(conn.recv_frame())
            r.i32()  # correlation id, in order
            codes = []
            for _ in range(r.i32()):
                r.string()
                for _ in range(r.i32()):
                    r.i32()
                    codes.append(r.i16())
            assert codes == [kwire.ERR_NONE] * PARTITIONS, f"OffsetCommit answered {set(codes)}"


def committed(bootstrap: str, group: str, topic: str, partitions: int = PARTITIONS) -> dict[int, int]:
    """The group's committed offsets of partitions 0..partitions-1
    (OffsetFetch through the admin client, retried while the coordinator
    loads after a start)."""
    admin = clients.admin(bootstrap)
    request = ConsumerGroupTopicPartitions(
        group, [TopicPartition(topic, p) for p in range(partitions)])
    deadline = time.monotonic() + 30
    while True:
        try:
            (fut,) = admin.list_consumer_group_offsets([request]).values()
            got = fut.result(timeout=30)
            return {tp.partition: tp.offset for tp in got.topic_partitions}
        except Exception:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def committed_one(bootstrap: str, group: str, topic: str, partition: int) -> int:
    return committed(bootstrap, group, topic, partition + 1)[partition]


def test_a_million_commits_of_one_group_stay_bounded_and_survive_kill9(tmp_path, topic):
    if harness.external_bootstrap() or os.environ.get("HELIX_TEST_KAFKA_LIBS"):
        pytest.skip("needs a Helix broker the suite starts with its own flags")
    b = harness.HelixBroker(harness.helix_binary(), tmp_path,
                            extra_args=["--offsets-topic-segment-bytes", str(SEGMENT_BYTES)])
    b.start()
    try:
        clients.create_topic(b.bootstrap, topic, PARTITIONS)
        group = f"million-{topic}"
        sizes = []
        with kwire.Conn(b.host, b.port, timeout=60) as conn:
            kwire.find_coordinator(conn, group)
            for half in (0, 1):
                commit(conn, group, topic, half * COMMITS // 2, (half + 1) * COMMITS // 2)
                sizes.append(coordinator_log_bytes(b.data_dir, group))
        print(f"__consumer_offsets partition of the group on disk: {sizes} bytes "
              f"after {COMMITS // 2 * PARTITIONS} and {COMMITS * PARTITIONS} offset records")
        assert max(sizes) <= DISK_BOUND_BYTES, sizes
        last = {p: COMMITS - 1 for p in range(PARTITIONS)}
        assert committed(b.bootstrap, group, topic) == last
        b.kill9()
        b.start()
        assert committed(b.bootstrap, group, topic) == last
        assert coordinator_log_bytes(b.data_dir, group) <= DISK_BOUND_BYTES
    finally:
        b.stop()
