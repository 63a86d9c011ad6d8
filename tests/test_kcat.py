"""kcat (Debian's kcat, librdkafka 2.0.2): metadata, and produce/consume of
keyed records with headers under every compression codec."""

from __future__ import annotations

import json
import subprocess
from collections import defaultdict

import pytest

import clients
import kwire

RECORDS = 10_000
PARTITIONS = 3


def kcat(broker, *args: str, input: bytes | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
    cmd = ["kcat", "-b", broker.bootstrap, *args]
    proc = subprocess.run(cmd, input=input, capture_output=True, timeout=timeout)
    assert proc.returncode == 0, f"{' '.join(cmd)} exited {proc.returncode}: {proc.stderr.decode(errors='replace')}"
    return proc


def test_metadata_lists_broker_and_topic(broker, topic):
    clients.create_topic(broker.bootstrap, topic, PARTITIONS)
    md = json.loads(kcat(broker, "-L", "-J", "-t", topic).stdout)
    assert [b["name"] for b in md["brokers"]] == [broker.bootstrap], md["brokers"]
    leader_id = md["brokers"][0]["id"]
    (t,) = [t for t in md["topics"] if t["topic"] == topic]
    assert "error" not in t or not t["error"], t
    assert sorted(p["partition"] for p in t["partitions"]) == list(range(PARTITIONS))
    for p in t["partitions"]:
        assert p["leader"] == leader_id, p
        assert [r["id"] for r in p["replicas"]] == [leader_id], p
        assert [r["id"] for r in p["isrs"]] == [leader_id], p


def test_metadata_all_topics_includes_created_topic(broker, topic):
    clients.create_topic(broker.bootstrap, topic, 2)
    md = json.loads(kcat(broker, "-L", "-J").stdout)
    names = {t["topic"] for t in md["topics"]}
    assert topic in names


def test_produce_auto_creates_topic(broker, topic):
    """A producer's first use of an unknown topic creates it (auto-create)."""
    lines = b"".join(b"k%d\tv%d\n" % (i, i) for i in range(50))
    kcat(broker, "-P", "-t", topic, "-K", "\t", "-X", "acks=all", input=lines)
    out = kcat(broker, "-C", "-t", topic, "-e", "-o", "beginning", "-f", "%k\t%s\n").stdout
    got = sorted(out.splitlines())
    assert got == sorted(lines.splitlines())


@pytest.mark.parametrize("codec", ["none", "gzip", "snappy", "lz4", "zstd"])
def test_produce_consume_keyed_with_headers(broker, topic, codec):
    clients.create_topic(broker.bootstrap, topic, PARTITIONS)
    pad = b"helix-compressible-payload-" * 3
    sent = []
    for i in range(RECORDS):
        key = b"key-%03d" % (i % 101)
        value = b"%s-%06d-%s" % (codec.encode(), i, pad)
        sent.append((key, value))
    stdin = b"".join(k + b"\t" + v + b"\n" for k, v in sent)
    headers = [f"codec={codec}", "suite=helix-clients", f"topic={topic}"]
    hargs = [a for h in headers for a in ("-H", h)]
    kcat(broker, "-P", "-t", topic, "-K", "\t", "-z", codec, "-X", "acks=all",
         "-X", "linger.ms=20", *hargs, input=stdin)

    out = kcat(broker, "-C", "-t", topic, "-e", "-o", "beginning", "-q",
               "-f", "%p\t%o\t%k\t%s\t%h\n").stdout
    by_partition: dict[int, list[tuple[int, bytes, bytes]]] = defaultdict(list)
    got_headers = set()
    for line in out.splitlines():
        p, o, k, v, h = line.split(b"\t")
        by_partition[int(p)].append((int(o), k, v))
        got_headers.add(h)

    # Every record exactly once, with its key.
    received = sorted((k, v) for recs in by_partition.values() for _, k, v in recs)
    assert len(received) == RECORDS, f"got {len(received)} records, sent {RECORDS}"
    assert received == sorted(sent)
    # Headers arrive on every record as sent.
    assert got_headers == {",".join(headers).encode()}

    key_partition = {}
    for p, recs in by_partition.items():
        offsets = [o for o, _, _ in recs]
        assert offsets == list(range(len(recs))), f"partition {p}: offsets not 0..n-1 in order"
        seqs = [int(v.split(b"-")[1]) for _, _, v in recs]
        assert seqs == sorted(seqs), f"partition {p}: records out of production order"
        for _, k, _ in recs:
            assert key_partition.setdefault(k, p) == p, f"key {k!r} in partitions {key_partition[k]} and {p}"
    assert len(by_partition) > 1, "keys should spread over partitions"

    # The broker stored the batches as sent: compressed with this codec.
    want = kwire.COMPRESSION[codec]
    with kwire.Conn(broker.host, broker.port) as conn:
        for p, recs in by_partition.items():
            batches = conn.fetch_all(topic, p, len(recs))
            assert batches, f"partition {p}: no batches fetched"
            assert all(b.crc_ok for b in batches), f"partition {p}: fetched batch with bad CRC"
            codecs = {b.compression for b in batches}
            assert codecs == {want}, (
                f"partition {p}: stored codecs {codecs}, kcat asked for {want}"
                + (" (librdkafka sends lz4 only to a broker advertising FindCoordinator v0: its LZ4"
                   " feature flag depends on that API, rdkafka_feature.c)" if codec == "lz4" else "")
            )
            assert sum(b.record_count for b in batches) == len(recs)
