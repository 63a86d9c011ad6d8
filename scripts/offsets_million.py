import sys, time, os, subprocess
sys.path.insert(0, "/work/main/tests")
os.environ["HELIX_TEST_KAFKA_LIBS"] = os.path.expanduser("~/.cache/helix-bench/kafka-3.9.1/libs")
import kwire, harness, clients
from pathlib import Path
import shutil
import test_offsets_bounded as t
shutil.rmtree("/tmp/om/k1", ignore_errors=True)
b = harness.new_managed_broker(Path("/tmp/om/k1"))
try:
    clients.create_topic(b.bootstrap, "t", t.PARTITIONS)
    group = "million-k"
    with kwire.Conn(b.host, b.port, timeout=60) as conn:
        kwire.find_coordinator(conn, group)
        t0 = time.monotonic()
        t.commit(conn, group, "t", 0, t.COMMITS)
        print("secs", time.monotonic() - t0)
    p = abs(t.java_string_hash(group)) % 50
    time.sleep(20)
    print(subprocess.run(["du", "-sb", str(b.data_dir / f"__consumer_offsets-{p}")], capture_output=True, text=True).stdout)
    print(subprocess.run(["ls", "-la", str(b.data_dir / f"__consumer_offsets-{p}")], capture_output=True, text=True).stdout)
finally:
    b.stop()
