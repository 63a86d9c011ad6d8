#!/usr/bin/env python3
"""A million offset records of one group (10,000 OffsetCommits of 100
partitions, the requests of tests/test_offsets_bounded.py) against a broker
this script starts, then the bytes on disk of the group's
`__consumer_offsets` partition (docs/BENCHMARKS.md).

    python3 scripts/offsets_million.py helix [extra helix-server flags...]
    python3 scripts/offsets_million.py kafka   # HELIX_TEST_KAFKA_LIBS or the bench's jars
"""
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

kind = sys.argv[1] if len(sys.argv) > 1 else "helix"
if kind == "kafka":
    os.environ.setdefault("HELIX_TEST_KAFKA_LIBS",
                          os.path.expanduser("~/.cache/helix-bench/kafka-3.9.1/libs"))
else:
    os.environ.pop("HELIX_TEST_KAFKA_LIBS", None)
    os.environ.setdefault("HELIX_SERVER_BIN", str(ROOT / "target/release/helix-server"))
    os.environ["HELIX_SERVER_ARGS"] = " ".join(sys.argv[2:])

import clients  # noqa: E402
import harness  # noqa: E402
import kwire  # noqa: E402
import test_offsets_bounded as t  # noqa: E402

work = Path(tempfile.mkdtemp(prefix="offsets-million-"))
b = harness.new_managed_broker(work)
try:
    clients.create_topic(b.bootstrap, "t", t.PARTITIONS)
    group = "million"
    with kwire.Conn(b.host, b.port, timeout=60) as conn:
        kwire.find_coordinator(conn, group)
        started = time.monotonic()
        t.commit(conn, group, "t", 0, t.COMMITS)
        print(f"{t.COMMITS * t.PARTITIONS} offset records in {time.monotonic() - started:.1f} s")
    if kind == "kafka":
        # The harness's Kafka has fewer offsets partitions: the biggest is the group's.
        dirs = sorted(b.data_dir.glob("__consumer_offsets-*"),
                      key=lambda d: sum(f.stat().st_size for f in d.iterdir()))
        target = dirs[-1]
    else:
        target = b.data_dir / "groups" / str(abs(t.java_string_hash(group)) % 50) / "wal"
    print(subprocess.run(["du", "-sb", str(target)], capture_output=True, text=True).stdout.strip())
finally:
    b.stop()
