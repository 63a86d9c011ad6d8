#!/usr/bin/env python3
"""3-node side-by-side benchmark: Helix (scripts/local-cluster.sh) or Apache
Kafka (scripts/kafka/cluster.sh), the same librdkafka load on each.

    scripts/bench_cluster.py helix|kafka [--out DIR] [--scale F] [--server-args "ARGS"]

Starts a fresh 3-node cluster, creates topic `bench` (6 partitions, RF 3),
runs scripts/kafka/rdkafka_bench.py (acks=all, 1 KiB records):
1 producer unthrottled, 4 producers unthrottled, 1 producer at 20,000 rec/s
offered (linger 1 ms); then reads every broker's CPU seconds (utime + stime
from /proc/PID/stat) and peak RSS (VmHWM), prints one JSON summary and stops
the cluster. --scale multiplies the record counts (for quick tries);
--server-args go to every helix-server (e.g. a shorter leader balancing
interval, to measure a balancing round under load).
"""
import argparse
import json
import os
import pathlib
import subprocess
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parent.parent
BENCH = ROOT / "scripts" / "kafka"
TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS


def peak_rss_kib(pid: int) -> int:
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    return 0


class Helix:
    ports = [29092, 29093, 29094]

    def __init__(self, out: pathlib.Path, server_args: list[str]):
        self.data = out / "helix-data"
        self.server_args = server_args

    def start(self):
        subprocess.run(["scripts/local-cluster.sh", "stop", "--data-dir", str(self.data)], cwd=ROOT,
                       check=False, capture_output=True)
        subprocess.run(["rm", "-rf", str(self.data)], check=True)
        subprocess.run(["scripts/local-cluster.sh", "start", "--nodes", "3", "--base-port", "29092",
                        "--data-dir", str(self.data), "--", *self.server_args], cwd=ROOT, check=True,
                       env={**os.environ, "RUST_LOG": "warn"})

    def pids(self):
        return [int((self.data / f"node{i}.pid").read_text()) for i in (1, 2, 3)]

    def stop(self):
        subprocess.run(["scripts/local-cluster.sh", "stop", "--data-dir", str(self.data)], cwd=ROOT, check=True)


class Kafka:
    ports = [19092, 19093, 19094]

    def __init__(self, out: pathlib.Path):
        self.env = {**os.environ, "DATA": str(out / "kafka-data")}
        self.data = out / "kafka-data"

    def start(self):
        subprocess.run(["bash", str(BENCH / "cluster.sh"), "stop"], env=self.env, check=False)
        subprocess.run(["rm", "-rf", str(self.data)], check=True)
        subprocess.run(["bash", str(BENCH / "cluster.sh"), "start", "3"], env=self.env, check=True)

    def pids(self):
        return [int((self.data / f"node{i}" / "pid").read_text()) for i in (1, 2, 3)]

    def stop(self):
        subprocess.run(["bash", str(BENCH / "cluster.sh"), "stop"], env=self.env, check=True)


def create_topic(bootstrap: str):
    from confluent_kafka.admin import AdminClient, NewTopic
    admin = AdminClient({"bootstrap.servers": bootstrap})
    deadline = time.monotonic() + 60
    while True:
        try:
            admin.create_topics([NewTopic("bench", 6, 3)], operation_timeout=30)["bench"].result(timeout=40)
            break
        except Exception as e:  # the cluster may still be electing its controller
            if time.monotonic() > deadline:
                raise
            print(f"create_topic: {e}; retrying", file=sys.stderr)
            time.sleep(1)
    # Every partition has a leader before the load starts.
    while time.monotonic() < deadline:
        md = admin.list_topics(topic="bench", timeout=10)
        parts = md.topics["bench"].partitions
        if len(parts) == 6 and all(p.leader >= 0 and len(p.isrs) == 3 for p in parts.values()):
            return
        time.sleep(0.2)
    raise SystemExit("topic bench has no leaders and full ISR after 60 s")


def run_load(bootstrap: str, out: pathlib.Path, name: str, args: list[str]) -> dict:
    path = out / f"{name}.json"
    cmd = [sys.executable, str(BENCH / "rdkafka_bench.py"), bootstrap, "bench", "--json", str(path), *args]
    subprocess.run(cmd, check=True)
    return json.loads(path.read_text())


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("system", choices=["helix", "kafka"])
    ap.add_argument("--out", default="/tmp/bench-cluster")
    ap.add_argument("--scale", type=float, default=1.0)
    ap.add_argument("--server-args", default="", help="extra helix-server flags (helix only)")
    a = ap.parse_args()
    out = pathlib.Path(a.out) / a.system
    out.mkdir(parents=True, exist_ok=True)
    system = Helix(out, a.server_args.split()) if a.system == "helix" else Kafka(out)
    bootstrap = ",".join(f"127.0.0.1:{p}" for p in system.ports)
    n = lambda count: str(int(count * a.scale))
    system.start()
    try:
        create_topic(bootstrap)
        pids = system.pids()
        cpu0 = sum(cpu_seconds(p) for p in pids)
        one = run_load(bootstrap, out, "p1", ["--producers", "1", "--count", n(300_000)])
        four = run_load(bootstrap, out, "p4", ["--producers", "4", "--count", n(400_000)])
        cpu1 = sum(cpu_seconds(p) for p in pids)
        paced = run_load(bootstrap, out, "rate20k", ["--producers", "1", "--count", n(200_000),
                                                      "--rate", "20000", "--linger", "1"])
        ingested = (one["acked"] + four["acked"]) * 1024 / 2**30
        summary = {
            "system": a.system,
            "p1": {k: one[k] for k in ("records_per_s", "MiB_per_s", "lat_ms", "errors")},
            "p4": {k: four[k] for k in ("records_per_s", "MiB_per_s", "lat_ms", "errors")},
            "rate20k": {k: paced[k] for k in ("records_per_s", "MiB_per_s", "lat_ms", "errors")},
            "cpu_s_per_gib_all_brokers": round((cpu1 - cpu0) / ingested, 2),
            "peak_rss_mib_per_node": [round(peak_rss_kib(p) / 1024) for p in pids],
        }
        print(json.dumps(summary, indent=1))
        (out / "summary.json").write_text(json.dumps(summary, indent=1))
    finally:
        system.stop()


if __name__ == "__main__":
    main()
