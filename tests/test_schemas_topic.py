"""A schema registry's storage on a 3-node Helix cluster (issue 33). No
registry installs from the registries this machine reaches (Confluent's is
not on Maven Central or PyPI, Karapace is not on PyPI), so this does what
their storage does: one compacted single-partition `_schemas` topic,
written with JSON keys (one per subject version, one per subject's config,
overwritten), deletes as tombstones, and at start the whole topic read
from the beginning to its end into the registry's view. After the cleaner
ran, the view read back is exactly the latest value per key; the same
after the leader is killed -9 and another replica serves the topic (each
replica cleans on its own)."""

from __future__ import annotations

import json
import time

import pytest
from confluent_kafka.admin import NewTopic

import clients
import harness
from cluster_harness import HelixCluster
from test_cluster_faults import FAST, leader_of, wait_in_sync
from test_compaction import read_all, write

pytestmark = [pytest.mark.cluster, pytest.mark.managed,
              pytest.mark.skipif(harness.external_bootstrap() is not None,
                                 reason="starts its own Helix nodes")]

SUBJECTS = 12
VERSIONS = 6
CONFIG = {
    "cleanup.policy": "compact",
    "segment.bytes": "4096",
    "min.cleanable.dirty.ratio": "0.01",
    "delete.retention.ms": "1000",
}


def key(**fields) -> bytes:
    return json.dumps(fields, sort_keys=True).encode()


def registry_writes() -> list[tuple[bytes, bytes | None]]:
    """What a registry writes: each subject's versions, its compatibility
    config set again and again, a soft delete (a value marking the version
    deleted) and hard deletes (tombstones)."""
    out: list[tuple[bytes, bytes | None]] = []
    for round_ in range(VERSIONS):
        for s in range(SUBJECTS):
            subject = f"subject-{s}-value"
            out.append((key(keytype="SCHEMA", subject=subject, version=round_ + 1, magic=1),
                        json.dumps({"subject": subject, "version": round_ + 1, "id": s * 100 + round_,
                                    "schema": '{"type":"string"}', "deleted": False}).encode()))
            out.append((key(keytype="CONFIG", subject=subject, magic=0),
                        json.dumps({"compatibilityLevel": ["BACKWARD", "FULL", "NONE"][round_ % 3]}).encode()))
    for s in range(0, SUBJECTS, 3):
        subject = f"subject-{s}-value"
        out.append((key(keytype="SCHEMA", subject=subject, version=1, magic=1),
                    json.dumps({"subject": subject, "version": 1, "deleted": True}).encode()))
        out.append((key(keytype="SCHEMA", subject=subject, version=2, magic=1), None))
    # A registry writes a NOOP and reads until it sees it; it also pushes
    # the interesting records into sealed segments.
    out += [(key(keytype="NOOP", magic=0), b"") for _ in range(60)]
    return out


def view(records) -> dict[bytes, bytes]:
    """The registry's view of a read: the latest value per key, a tombstone
    removing its key."""
    out: dict[bytes, bytes] = {}
    for _, k, v in records:
        if v is None:
            out.pop(k, None)
        else:
            out[k] = v
    return out


def test_a_registry_reads_back_its_latest_schemas_from_every_replica(tmp_path):
    cluster = HelixCluster(tmp_path, 3, args=FAST + ["--log-cleaner-backoff-ms", "200"])
    try:
        cluster.start()
        topic = "_schemas"
        a = clients.admin(cluster.node(1).bootstrap)
        a.create_topics([NewTopic(topic, num_partitions=1, replication_factor=3, config=CONFIG)],
                        operation_timeout=30)[topic].result(timeout=30)
        clients.wait_for_partitions(cluster.node(1).bootstrap, topic, 1)
        wait_in_sync(cluster, topic)
        writes = registry_writes()
        write(cluster.bootstrap, topic, writes)
        want = view((0, k, v) for k, v in writes)
        # Cleaned: every key read once, no tombstone left (delete.retention.ms 1 s).
        deadline = time.monotonic() + 60
        while True:
            got = read_all(cluster.bootstrap, topic)
            # NOOPs stay in the active segment, which is never cleaned.
            kept = [(k, v) for _, k, v in got if b'"NOOP"' not in k]
            keys = [k for k, _ in kept]
            if len(keys) == len(set(keys)) and all(v is not None for _, v in kept):
                break
            dup = len(keys) - len(set(keys))
            tombstones = sum(v is None for _, v in kept)
            assert time.monotonic() < deadline, (
                f"not compacted: {len(got)} records of {len(writes)}, {dup} keys repeated, "
                f"{tombstones} tombstones, last offset {got[-1][0] if got else None}")
            time.sleep(0.5)
        assert view(got) == want
        offsets = [o for o, _, _ in got]
        assert offsets == sorted(offsets)
        # Another replica serves the topic: the registry restarted against
        # it reads the same view (that replica may have cleaned less).
        victim = leader_of(cluster, topic, 0)
        cluster.node(victim).kill9()
        assert view(read_all(cluster.live_bootstrap(), topic)) == want
        cluster.node(victim).start()
        wait_in_sync(cluster, topic)
        assert view(read_all(cluster.bootstrap, topic)) == want
    finally:
        cluster.stop()
