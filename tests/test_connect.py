"""Kafka Connect 3.9.1 in distributed mode on a 3-node Helix cluster (issue
33): the worker checks through DescribeConfigs that its config, offset and
status topics are compact-only, and refuses to start otherwise; here it
starts with them created compacted, a FileStreamSource and a FileStreamSink
connector copy a file end to end, and a restarted worker resumes from its
stored offsets without copying a line twice.

connect-runtime and connect-file come from Maven Central (tests/javalibs.py)."""

from __future__ import annotations

import json
import socket
import subprocess
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

import harness
import javalibs
from cluster_harness import HelixCluster
from test_cluster_faults import FAST

pytestmark = [pytest.mark.cluster, pytest.mark.managed,
              pytest.mark.skipif(harness.external_bootstrap() is not None,
                                 reason="starts its own Helix nodes")]

VERSION = "3.9.1"
LINES = 2_000


def ephemeral_port() -> int:
    """A port from the kernel's ephemeral range, away from the slices the
    harness hands out to brokers and proxies."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Worker:
    """One Connect distributed worker process and its REST endpoint."""

    def __init__(self, workdir: Path, bootstrap: str, group: str):
        self.port = ephemeral_port()
        self.props = workdir / f"worker-{self.port}.properties"
        self.props.write_text("\n".join([
            f"bootstrap.servers={bootstrap}",
            f"group.id={group}",
            f"config.storage.topic={group}-configs",
            f"offset.storage.topic={group}-offsets",
            f"status.storage.topic={group}-status",
            "config.storage.replication.factor=3",
            "offset.storage.replication.factor=3",
            "status.storage.replication.factor=3",
            "offset.storage.partitions=5",
            "status.storage.partitions=3",
            "key.converter=org.apache.kafka.connect.storage.StringConverter",
            "value.converter=org.apache.kafka.connect.storage.StringConverter",
            "offset.flush.interval.ms=500",
            f"listeners=http://127.0.0.1:{self.port}",
            "",
        ]))
        runtime = javalibs.maven_libs("connect-runtime", VERSION)
        files = javalibs.maven_libs("connect-file", VERSION)
        self.cmd = ["java", "-Xmx384m", "-cp", f"{runtime}/*:{files}/*",
                    "org.apache.kafka.connect.cli.ConnectDistributed", str(self.props)]
        self.log = workdir / f"worker-{self.port}.log"
        self.proc: subprocess.Popen | None = None

    def start(self) -> "Worker":
        out = open(self.log, "ab")
        self.proc = subprocess.Popen(self.cmd, stdout=out, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 120
        while True:
            try:
                self.get("/connectors")
                return self
            except (urllib.error.URLError, ConnectionError, OSError):
                assert self.proc.poll() is None, f"the worker exited:\n{self.tail()}"
                assert time.monotonic() < deadline, f"the worker never served REST:\n{self.tail()}"
                time.sleep(0.5)

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def tail(self, lines: int = 60) -> str:
        text = self.log.read_text(errors="replace") if self.log.exists() else ""
        return "\n".join(text.splitlines()[-lines:])

    def request(self, method: str, path: str, body: dict | None = None):
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(f"http://127.0.0.1:{self.port}{path}", data=data, method=method,
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=30) as resp:
            raw = resp.read()
            return json.loads(raw) if raw else None

    def get(self, path: str):
        return self.request("GET", path)

    def put_connector(self, name: str, config: dict) -> None:
        """Creates or updates a connector; a worker still joining its group
        answers 409 (rebalance in progress), retried."""
        deadline = time.monotonic() + 60
        while True:
            try:
                self.request("PUT", f"/connectors/{name}/config", config)
                return
            except urllib.error.HTTPError as e:
                if e.code != 409 or time.monotonic() > deadline:
                    raise AssertionError(f"PUT {name}: {e.code} {e.read()!r}\n{self.tail()}")
                time.sleep(0.5)

    def running(self, name: str) -> bool:
        try:
            status = self.get(f"/connectors/{name}/status")
        except urllib.error.HTTPError:
            return False
        tasks = status.get("tasks", [])
        failed = [t for t in tasks if t.get("state") == "FAILED"]
        assert not failed, f"{name} task failed: {failed}\n{self.tail()}"
        return status["connector"]["state"] == "RUNNING" and bool(tasks) and all(
            t["state"] == "RUNNING" for t in tasks)


def await_lines(path: Path, count: int, worker: Worker, timeout: float = 120) -> list[str]:
    deadline = time.monotonic() + timeout
    while True:
        got = path.read_text().splitlines() if path.exists() else []
        if len(got) >= count:
            return got
        assert time.monotonic() < deadline, f"{len(got)} of {count} lines copied\n{worker.tail()}"
        time.sleep(0.3)


def test_connect_copies_a_file_and_resumes_from_stored_offsets(tmp_path, topic):
    cluster = HelixCluster(tmp_path, 3, args=FAST)
    worker = None
    try:
        cluster.start()
        source_file, sink_file = tmp_path / "in.txt", tmp_path / "out.txt"
        source_file.write_text("".join(f"line-{i}\n" for i in range(LINES)))
        group = f"connect-{topic}"[:60]
        worker = Worker(tmp_path, cluster.bootstrap, group).start()
        worker.put_connector("source", {
            "connector.class": "org.apache.kafka.connect.file.FileStreamSourceConnector",
            "tasks.max": "1", "file": str(source_file), "topic": topic})
        worker.put_connector("sink", {
            "connector.class": "org.apache.kafka.connect.file.FileStreamSinkConnector",
            "tasks.max": "1", "file": str(sink_file), "topics": topic})
        got = await_lines(sink_file, LINES, worker)
        assert got == [f"line-{i}" for i in range(LINES)], got[:5]

        # The worker stops; the source file grows; a new worker of the same
        # group reads its connectors and offsets back from the compacted
        # topics and copies only the new lines.
        worker.stop()
        with open(source_file, "a") as f:
            f.write("".join(f"line-{i}\n" for i in range(LINES, 2 * LINES)))
        worker = Worker(tmp_path, cluster.bootstrap, group).start()
        got = await_lines(sink_file, 2 * LINES, worker)
        time.sleep(2)  # a duplicate copied late would show here
        got = sink_file.read_text().splitlines()
        assert got == [f"line-{i}" for i in range(2 * LINES)], (
            f"{len(got)} lines; duplicated {len(got) - len(set(got))}\n{worker.tail()}")
    finally:
        if worker:
            worker.stop()
        cluster.stop()
