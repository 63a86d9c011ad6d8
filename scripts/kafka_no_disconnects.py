#!/usr/bin/env python3
"""Issue 30 item 7 on Apache Kafka 3.9.1: what a client connecting every
50 ms sees while a 3-node KRaft cluster starts, and while it starts again
after every node was killed -9 (tests/test_no_disconnects.py runs the same
clients against Helix).

Kafka opens a broker's client listener only once it has caught up with
the metadata log, so clients start when the first listener accepts; the
script reports how many Metadata calls were made and every error
callback librdkafka gave, per phase.

    python3 scripts/kafka_no_disconnects.py [--seconds 8]

Uses ../shared/bench/kafka/cluster.sh (jars in ~/.cache/helix-bench).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))
from test_no_disconnects import connect_repeatedly  # noqa: E402

CLUSTER_SH = REPO.parent / "shared" / "bench" / "kafka" / "cluster.sh"


def free_base() -> int:
    """A base port whose brokers (base..base+2) and controllers
    (base+100..base+102) are all free now."""
    for base in range(39092, 60000, 7):
        ports = [base + i for i in range(3)] + [base + 100 + i for i in range(3)]
        if not any(listening(p) for p in ports):
            try:
                for p in ports:
                    with socket.socket() as s:
                        s.bind(("127.0.0.1", p))
                return base
            except OSError:
                continue
    raise SystemExit("no free ports")


def listening(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.2)
        return s.connect_ex(("127.0.0.1", port)) == 0


def wait_listening(port: int, timeout: float = 120) -> float:
    start = time.monotonic()
    while not listening(port):
        if time.monotonic() - start > timeout:
            raise SystemExit(f"port {port} never opened")
        time.sleep(0.05)
    return time.monotonic() - start


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=8.0)
    args = ap.parse_args()
    data = Path(tempfile.mkdtemp(prefix="kafka-nd-"))
    BASE_PORT = free_base()
    env = {**os.environ, "DATA": str(data), "BASE_PORT": str(BASE_PORT), "HEAP": "512m"}
    bootstrap = ",".join(f"127.0.0.1:{BASE_PORT + i}" for i in range(3))
    out = {}
    starter = subprocess.Popen(["bash", str(CLUSTER_SH), "start", "3"], env=env,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        waited = wait_listening(BASE_PORT)
        asked, errors = connect_repeatedly(bootstrap, args.seconds)
        out["fresh start"] = {"listener_opened_after_s": round(waited, 1), "asked": asked,
                              "error_callbacks": len(errors), "first_errors": errors[:2]}
        starter.wait(timeout=180)
        pids = [int((data / f"node{i}" / "pid").read_text()) for i in (1, 2, 3)]
        for pid in pids:
            os.kill(pid, signal.SIGKILL)
        time.sleep(1)
        restarter = subprocess.Popen(
            ["bash", "-c", f"""
               cd {data}
               for i in 1 2 3; do
                 KAFKA_OPTS="-Xms512m -Xmx512m -XX:+UseG1GC -Dkafka.logs.dir=$PWD/node$i/logs -Dlog4j.configuration=file:$PWD/log4j.properties"
                 nohup java $KAFKA_OPTS -cp "$HOME/.cache/helix-bench/kafka-3.9.1/libs/*" kafka.Kafka node$i.properties >node$i/logs/stdout2.log 2>&1 &
                 echo $! >node$i/pid
               done"""], env=env)
        restarter.wait()
        start = time.monotonic()
        # The clients start at once: until a listener opens they meet
        # refused connections, Kafka's answer while a node is not ready.
        asked, errors = 0, []
        while not listening(BASE_PORT) and time.monotonic() - start < 180:
            a, e = connect_repeatedly(bootstrap, 1.0)
            asked, errors = asked + a, errors + e
        out["restart after kill -9, until the first listener opens"] = {
            "listener_opened_after_s": round(time.monotonic() - start, 1), "asked": asked,
            "error_callbacks": len(errors), "first_errors": errors[:2]}
        asked, errors = connect_repeatedly(bootstrap, args.seconds)
        out["restart after kill -9, the seconds after"] = {
            "asked": asked, "error_callbacks": len(errors), "first_errors": errors[:2]}
    finally:
        subprocess.run(["bash", str(CLUSTER_SH), "stop"], env=env, stdout=subprocess.DEVNULL)
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
