"""Brokers under test: the real helix-server binary, a managed Apache Kafka, or
an external broker given by address.

Target selection (first match wins):

- ``HELIX_TEST_BOOTSTRAP=host:port``: an already-running broker (Helix or any
  Kafka). The suite never starts, kills or restarts it, so tests that need that
  are skipped. ``HELIX_TEST_TARGET=kafka`` says it is Apache Kafka (where
  Helix's spec is stricter than Kafka, those tests check Kafka's behaviour);
  ``HELIX_TEST_BROKER_PID`` lets the memory test read its RSS.
- ``HELIX_TEST_KAFKA_LIBS=/path/to/kafka/libs``: the suite starts Apache Kafka
  (KRaft, one node) itself from those jars, exactly as it starts Helix. Used to
  validate the tests, including the kill -9 / restart ones, against the
  reference broker.
- otherwise ``HELIX_SERVER_BIN`` (default ``target/release/helix-server``): the
  real Helix binary, one process per test module or per restarting test, each
  on its own free port and data directory (``--listen``/``--advertised
  127.0.0.1:PORT --data-dir DIR --node-id 1 --auto-create-topics true``).
  Extra flags can be appended with ``HELIX_SERVER_ARGS``.
"""

from __future__ import annotations

import base64
import os
import shlex
import signal
import socket
import subprocess
import tempfile
import time
import uuid
from pathlib import Path

import kwire

REPO = Path(__file__).resolve().parent.parent
START_TIMEOUT_S = float(os.environ.get("HELIX_TEST_START_TIMEOUT", "60"))


# Ports are handed out from a range of this process's own, below the
# kernel's ephemeral range: a port probed with bind(0) and closed could be
# given by the kernel to another test worker's probe, or to an outgoing
# connection, before the node binds it (CI: "cannot listen on ...: Address
# already in use" with two pytest-xdist workers). Each worker (gw0, gw1, ...)
# takes its own slice of 11000-32767, walks it in order, never hands a port
# out twice, and skips ports something already listens on.
# HELIX_TEST_PORT_SLICE=N (0-6) picks slice N instead (suites run by hand at
# once on one machine).
_PORT_RANGE = (11000, 32768)
_SLICE = 3000
_SLICES = (_PORT_RANGE[1] - _PORT_RANGE[0]) // _SLICE


def _port_slice() -> range:
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0")
    index = int(worker[2:]) if worker[2:].isdigit() else 0
    index = int(os.environ.get("HELIX_TEST_PORT_SLICE", index))
    start = _PORT_RANGE[0] + (index % _SLICES) * _SLICE
    return range(start, min(start + _SLICE, _PORT_RANGE[1]))


_NEXT_PORTS = iter(_port_slice())


def free_port() -> int:
    """A port nothing listens on now, from this process's own slice, never
    one this process handed out before."""
    for port in _NEXT_PORTS:
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
        return port
    raise RuntimeError(f"this process handed out every port of {_port_slice()}")


def wait_until_serving(host: str, port: int, proc: subprocess.Popen | None, deadline: float, log: Path | None) -> None:
    """Waits until the broker answers an ApiVersions request on host:port."""
    last_error: Exception | None = None
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(
                f"broker exited with code {proc.returncode} while starting\n{tail(log)}"
            )
        try:
            with kwire.Conn(host, port, timeout=2.0) as conn:
                versions = conn.api_versions()
                if versions:
                    return
        except OSError as e:
            last_error = e
        except kwire.ProtocolError as e:
            last_error = e
        time.sleep(0.2)
    raise RuntimeError(f"broker on {host}:{port} not serving after {START_TIMEOUT_S}s: {last_error}\n{tail(log)}")


def http_get(port: int, path: str, timeout: float = 5.0) -> tuple[int, str]:
    """GET http://127.0.0.1:PORT/PATH: (status, body); errors raise OSError."""
    import urllib.error
    import urllib.request
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=timeout) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def tail(path: Path | None, lines: int = 60) -> str:
    if path is None or not path.exists():
        return "(no broker log)"
    with open(path, "rb") as f:
        f.seek(0, os.SEEK_END)
        f.seek(max(0, f.tell() - 64 * 1024))
        text = f.read().decode("utf-8", "replace")
    return "\n".join(text.splitlines()[-lines:])


def rss_kib(pid: int) -> int:
    """Resident set size of a process, from /proc/PID/status (VmRSS, kiB)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError(f"no VmRSS for pid {pid}")


class Broker:
    """A broker the tests talk to. ``managed`` ones can be killed and restarted."""

    kind = "external"
    managed = False

    def __init__(self, host: str, port: int):
        self.host = host
        self.port = port
        self.pid: int | None = None
        self.log: Path | None = None

    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.port}"

    def log_tail(self, lines: int = 60) -> str:
        return tail(self.log, lines)

    def stop(self) -> int | None:
        return None


class ExternalBroker(Broker):
    def __init__(self, bootstrap: str):
        host, _, port = bootstrap.rpartition(":")
        super().__init__(host or "127.0.0.1", int(port))
        # "kafka" when the external broker is Apache Kafka: the few tests where
        # Helix's spec is deliberately stricter than Kafka then check Kafka's
        # documented behaviour instead.
        self.kind = os.environ.get("HELIX_TEST_TARGET", "helix")
        pid = os.environ.get("HELIX_TEST_BROKER_PID")
        self.pid = int(pid) if pid else None


class OwnedProcess:
    """A child process the suite started (``self.proc``): alive, kill -9, stop."""

    proc: subprocess.Popen | None = None
    stop_timeout_s: float = 20

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def kill9(self) -> None:
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=30)
        self.proc = None

    def stop(self) -> int | None:
        """SIGTERM, then SIGKILL if it has not exited within
        ``stop_timeout_s``. Returns the exit code (negative: killed by that
        signal), None if not running."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=self.stop_timeout_s)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
        code = self.proc.returncode
        self.proc = None
        return code


class ManagedBroker(OwnedProcess, Broker):
    """A broker process the suite owns: start, kill -9, restart on the same data."""

    managed = True

    def __init__(self, workdir: Path):
        super().__init__("127.0.0.1", free_port())
        self.workdir = workdir
        self.data_dir = workdir / "data"
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.log = workdir / "broker.log"
        self.proc: subprocess.Popen | None = None
        self.starts = 0

    def command(self, port: int | None = None) -> list[str]:
        """The broker's command line; `port` overrides the listener port (used
        to start a second instance on the same data directory)."""
        raise NotImplementedError

    def prepare(self) -> None:
        """One-time setup before the first start (formatting, config files)."""

    def start(self) -> None:
        if self.starts == 0:
            self.prepare()
        self.starts += 1
        logf = open(self.log, "ab")
        logf.write(f"\n===== start #{self.starts}: {shlex.join(self.command())}\n".encode())
        logf.flush()
        self.proc = subprocess.Popen(
            self.command(),
            stdout=logf,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=self.env(),
            start_new_session=True,
        )
        logf.close()
        self.pid = self.proc.pid
        try:
            wait_until_serving(self.host, self.port, self.proc, time.monotonic() + START_TIMEOUT_S, self.log)
        except Exception:
            self.kill9()
            raise

    def env(self) -> dict[str, str]:
        return dict(os.environ)

    def restart(self) -> None:
        """kill -9 (if running) and start again on the same port and data dir."""
        self.kill9()
        self.start()


class HelixBroker(ManagedBroker):
    kind = "helix"

    def __init__(self, binary: Path, workdir: Path, extra_args: list[str] | None = None):
        super().__init__(workdir)
        self.binary = binary
        self.extra_args = list(extra_args or [])
        self.metrics_port = free_port()

    def command(self, port: int | None = None) -> list[str]:
        addr = f"{self.host}:{port or self.port}"
        cmd = [
            str(self.binary),
            "--listen", addr,
            "--advertised", addr,
            "--data-dir", str(self.data_dir),
            "--node-id", "1",
            "--auto-create-topics", "true",
            "--metrics-listen", f"127.0.0.1:{self.metrics_port}",
        ]
        return cmd + self.extra_args + shlex.split(os.environ.get("HELIX_SERVER_ARGS", ""))

    def env(self) -> dict[str, str]:
        env = dict(os.environ)
        env.setdefault("RUST_LOG", "info")
        env.setdefault("NO_COLOR", "1")
        return env


class KafkaBroker(ManagedBroker):
    """Apache Kafka in KRaft combined mode, one node, from a directory of jars."""

    kind = "kafka"

    def __init__(self, libs: Path, workdir: Path):
        super().__init__(workdir)
        self.libs = libs
        self.controller_port = free_port()
        self.props = workdir / "server.properties"

    def classpath(self) -> str:
        return f"{self.libs}/*"

    def prepare(self) -> None:
        log4j = self.workdir / "log4j.properties"
        log4j.write_text(
            "log4j.rootLogger=WARN, stdout\n"
            "log4j.appender.stdout=org.apache.log4j.ConsoleAppender\n"
            "log4j.appender.stdout.layout=org.apache.log4j.PatternLayout\n"
            "log4j.appender.stdout.layout.ConversionPattern=[%d] %p %m (%c)%n\n"
        )
        self.props.write_text(
            f"""process.roles=broker,controller
node.id=1
controller.quorum.voters=1@127.0.0.1:{self.controller_port}
listeners=PLAINTEXT://127.0.0.1:{self.port},CONTROLLER://127.0.0.1:{self.controller_port}
advertised.listeners=PLAINTEXT://127.0.0.1:{self.port}
controller.listener.names=CONTROLLER
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT
inter.broker.listener.name=PLAINTEXT
log.dirs={self.data_dir}
num.partitions=1
default.replication.factor=1
min.insync.replicas=1
offsets.topic.replication.factor=1
offsets.topic.num.partitions=4
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
group.initial.rebalance.delay.ms=0
auto.create.topics.enable=true
log.retention.check.interval.ms=1000
"""
        )
        subprocess.run(
            ["java", "-cp", self.classpath(), "kafka.tools.StorageTool", "format",
             "--cluster-id=" + base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode(), "-c", str(self.props)],
            check=True, capture_output=True,
        )

    def command(self, port: int | None = None) -> list[str]:
        props = self.props
        if port is not None:
            props = self.workdir / f"server-{port}.properties"
            props.write_text(self.props.read_text().replace(f":{self.port}", f":{port}")
                             .replace(f":{self.controller_port}", f":{free_port()}"))
        return [
            "java", "-Xms256m", "-Xmx512m", "-XX:+UseG1GC",
            f"-Dlog4j.configuration=file:{self.workdir / 'log4j.properties'}",
            "-cp", self.classpath(), "kafka.Kafka", str(props),
        ]


def target_description() -> str:
    if os.environ.get("HELIX_TEST_BOOTSTRAP"):
        return f"external broker at {os.environ['HELIX_TEST_BOOTSTRAP']}"
    if os.environ.get("HELIX_TEST_KAFKA_LIBS"):
        return f"Apache Kafka started by the suite from {os.environ['HELIX_TEST_KAFKA_LIBS']}"
    return f"helix-server binary {helix_binary()}"


def helix_binary() -> Path:
    env = os.environ.get("HELIX_SERVER_BIN")
    return Path(env) if env else REPO / "target" / "release" / "helix-server"


def external_bootstrap() -> str | None:
    return os.environ.get("HELIX_TEST_BOOTSTRAP") or None


def new_managed_broker(workdir: Path | None = None) -> ManagedBroker:
    """A started broker owned by the caller (call ``stop()`` when done)."""
    workdir = workdir or Path(tempfile.mkdtemp(prefix="helix-test-"))
    libs = os.environ.get("HELIX_TEST_KAFKA_LIBS")
    if libs:
        broker: ManagedBroker = KafkaBroker(Path(libs), workdir)
    else:
        binary = helix_binary()
        if not os.access(binary, os.X_OK):
            raise RuntimeError(
                f"helix-server binary not found at {binary}: build it with "
                "`cargo build --release -p helix-server` or set HELIX_SERVER_BIN "
                "(or HELIX_TEST_BOOTSTRAP to test a running broker)"
            )
        broker = HelixBroker(binary, workdir)
    broker.start()
    return broker
