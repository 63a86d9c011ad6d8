"""A Helix cluster of real processes on 127.0.0.1 for the cluster tests.

Each node is the real ``helix-server`` binary started as the issue asks:
``helix-server --config cluster.toml --node-id N --data-dir DIR``. Every node
gets its own config file, identical but for the peer addresses of the other
nodes: with ``proxies=True`` node i reaches node j through a fault-injecting
TCP proxy of its own (one per directed link), so a test can cut, black-hole
and heal any link without root. Kafka clients connect to the nodes directly.
"""

from __future__ import annotations

import os
import shlex
import signal
import socket
import subprocess
import threading
import time
from pathlib import Path

import harness
import kwire

START_TIMEOUT_S = float(os.environ.get("HELIX_TEST_START_TIMEOUT", "60"))


class LinkProxy:
    """A TCP forwarder for one directed peer link (node i -> node j).

    Modes: ``pass`` forwards; ``blackhole`` keeps connections open but moves
    no bytes (a network that silently loses packets: the transport must
    notice by its own keepalives); ``refuse`` closes every connection and
    accepts none (a peer that is unreachable).
    """

    def __init__(self, target_port: int):
        self.target = ("127.0.0.1", target_port)
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.port = self.sock.getsockname()[1]
        self.mode = "pass"
        self.lock = threading.Lock()
        self.conns: list[tuple[socket.socket, socket.socket]] = []
        self.closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    def set_mode(self, mode: str) -> None:
        assert mode in ("pass", "blackhole", "refuse"), mode
        with self.lock:
            self.mode = mode
            if mode == "refuse":
                # shutdown() first: close() alone does not end a connection
                # whose socket a pump thread is blocked reading (the kernel
                # keeps it open until that read returns), so each end
                # learnt of the cut only when it next sent something, the
                # leader a heartbeat later than the followers. Both ends
                # now see the connection end at once, as when a process
                # dies and its kernel closes its sockets.
                for a, b in self.conns:
                    for s in (a, b):
                        try:
                            s.shutdown(socket.SHUT_RDWR)
                        except OSError:
                            pass
                        try:
                            s.close()
                        except OSError:
                            pass
                self.conns.clear()

    def close(self) -> None:
        self.closed = True
        self.set_mode("refuse")
        try:
            self.sock.close()
        except OSError:
            pass

    def _accept(self) -> None:
        while not self.closed:
            try:
                client, _ = self.sock.accept()
            except OSError:
                return
            with self.lock:
                mode = self.mode
            if mode == "refuse":
                client.close()
                continue
            try:
                upstream = socket.create_connection(self.target, timeout=2)
                upstream.settimeout(None)
            except OSError:
                client.close()
                continue
            with self.lock:
                self.conns.append((client, upstream))
            for src, dst in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(src, dst), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket) -> None:
        while True:
            try:
                data = src.recv(65536)
            except OSError:
                break
            if not data:
                break
            while True:
                with self.lock:
                    mode = self.mode
                if mode == "pass":
                    break
                if mode == "refuse":
                    return
                time.sleep(0.05)  # blackhole: bytes wait, nothing moves
            try:
                dst.sendall(data)
            except OSError:
                break
        for s in (src, dst):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


class Node(harness.OwnedProcess):
    stop_timeout_s = 30

    def __init__(self, cluster: "HelixCluster", node_id: int):
        self.cluster = cluster
        self.id = node_id
        self.kafka_port = harness.free_port()
        self.peer_port = harness.free_port()
        self.metrics_port = harness.free_port()
        self.dir = cluster.workdir / f"node{node_id}"
        self.data_dir = self.dir / "data"
        self.config = self.dir / "cluster.toml"
        self.log = self.dir / "node.log"
        self.proc: subprocess.Popen | None = None
        self.starts = 0
        # Extra environment for this node's process (e.g. HELIX_BOOT_ID_FILE).
        self.env: dict[str, str] = {}

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.kafka_port}"

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc else None

    def command(self) -> list[str]:
        return [
            str(self.cluster.binary),
            "--config", str(self.config),
            "--node-id", str(self.id),
            "--data-dir", str(self.data_dir),
        ] + self.cluster.args + shlex.split(os.environ.get("HELIX_SERVER_ARGS", ""))

    def start(self, wait: bool = True) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        self.starts += 1
        with open(self.log, "ab") as logf:
            logf.write(f"\n===== start #{self.starts}: {shlex.join(self.command())}\n".encode())
            logf.flush()
            env = dict(os.environ)
            env.setdefault("RUST_LOG", "info")
            env.setdefault("NO_COLOR", "1")
            env.update(self.env)
            self.proc = subprocess.Popen(
                self.command(), stdout=logf, stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL, env=env, start_new_session=True,
            )
        if wait:
            self.wait_serving()

    def wait_serving(self) -> None:
        harness.wait_until_serving("127.0.0.1", self.kafka_port, self.proc,
                                   time.monotonic() + START_TIMEOUT_S, self.log)

    def wait_routing(self) -> None:
        """Waits until the node routes clients: its Metadata names a
        controller, which it knows once it hears a majority of the cluster
        (before, it answers with every member and no leader)."""
        deadline = time.monotonic() + START_TIMEOUT_S
        last: object = None
        while True:
            try:
                with kwire.Conn("127.0.0.1", self.kafka_port, timeout=2.0) as conn:
                    _, controller = conn.brokers_and_controller()
                    if controller >= 0:
                        return
                    last = "no controller known yet"
            except (OSError, kwire.ProtocolError) as e:
                last = e
            if time.monotonic() > deadline:
                raise RuntimeError(f"node {self.id} never routed clients: {last}\n{self.log_tail()}")
            time.sleep(0.1)

    def log_tail(self, lines: int = 60) -> str:
        return harness.tail(self.log, lines)


class HelixCluster:
    """``n`` nodes of one cluster; ``args`` go to every node."""

    def __init__(self, workdir: Path, n: int = 3, args: list[str] | None = None,
                 proxies: bool = False, toml_extra: str = ""):
        self.workdir = workdir
        self.binary = harness.helix_binary()
        if not os.access(self.binary, os.X_OK):
            raise RuntimeError(f"helix-server binary not found at {self.binary}")
        self.args = list(args or [])
        self.nodes = [Node(self, i + 1) for i in range(n)]
        self.proxies: dict[tuple[int, int], LinkProxy] = {}
        if proxies:
            for a in self.nodes:
                for b in self.nodes:
                    if a is not b:
                        self.proxies[(a.id, b.id)] = LinkProxy(b.peer_port)
        for node in self.nodes:
            node.dir.mkdir(parents=True, exist_ok=True)
            node.config.write_text(self._config_for(node) + toml_extra)

    def _config_for(self, me: Node) -> str:
        out = []
        if self.proxies:
            # Through proxies every node lists different peer addresses, so
            # the id derived from the list would differ: name one.
            out.append(f'cluster_id = "helix-proxied-{self.nodes[0].kafka_port}"\n')
        for n in self.nodes:
            peer = n.peer_port
            if n is not me and (me.id, n.id) in self.proxies:
                peer = self.proxies[(me.id, n.id)].port
            out.append(f'[[nodes]]\nid = {n.id}\nkafka = "127.0.0.1:{n.kafka_port}"\npeer = "127.0.0.1:{peer}"\n'
                       f'metrics = "127.0.0.1:{n.metrics_port}"\n')
        return "\n".join(out)

    def prepend_config(self, node: Node, settings: str) -> None:
        """Top-level TOML settings for one node: they go before its
        ``[[nodes]]`` tables, where TOML would read them as a table's."""
        node.config.write_text(settings + node.config.read_text())

    def add_sasl_listeners(self, users: Path, settings: str = "") -> dict[int, int]:
        """A SASL_PLAINTEXT listener beside every node's PLAINTEXT one,
        authenticating against the users file ``users``, named in every
        node's ``[[nodes]]`` table as ``advertised_listeners`` (so Metadata
        answers each listener with its own addresses); ``settings`` are
        further top-level settings for every node. Before ``start``.
        Returns each node's SASL port."""
        sasl = {n.id: harness.free_port() for n in self.nodes}

        def listeners(n: Node) -> str:
            return f"PLAINTEXT://127.0.0.1:{n.kafka_port},SASL_PLAINTEXT://127.0.0.1:{sasl[n.id]}"

        for me in self.nodes:
            text = me.config.read_text()
            for n in self.nodes:
                line = f'kafka = "127.0.0.1:{n.kafka_port}"\n'
                text = text.replace(line, line + f'advertised_listeners = "{listeners(n)}"\n')
            me.config.write_text(
                f'listeners = "{listeners(me)}"\nsasl_users_file = "{users}"\n{settings}' + text)
        return sasl

    def node(self, node_id: int) -> Node:
        return self.nodes[node_id - 1]

    @property
    def bootstrap(self) -> str:
        return ",".join(n.bootstrap for n in self.nodes)

    def live_bootstrap(self) -> str:
        return ",".join(n.bootstrap for n in self.nodes if n.alive())

    def start(self) -> "HelixCluster":
        # All at once: a node waits for a majority of the controller.
        for n in self.nodes:
            n.start(wait=False)
        for n in self.nodes:
            n.wait_serving()
        for n in self.nodes:
            n.wait_routing()
        return self

    def stop(self) -> None:
        for n in self.nodes:
            if n.alive():
                n.stop()
        for p in self.proxies.values():
            p.close()

    def kill_all(self) -> None:
        for n in self.nodes:
            if n.proc is not None and n.proc.poll() is None:
                n.proc.send_signal(signal.SIGKILL)
        for n in self.nodes:
            n.kill9()

    def isolate(self, node_id: int, mode: str = "blackhole") -> None:
        """Cuts every link to and from `node_id`."""
        for (a, b), p in self.proxies.items():
            if node_id in (a, b):
                p.set_mode(mode)

    def heal(self) -> None:
        for p in self.proxies.values():
            p.set_mode("pass")

    def wal_dirs(self, node: Node, topic: str | None = None) -> dict[int, Path]:
        """{partition: its WAL directory} on `node` for the topic stored in
        directory `topic` (its id in hex), by default the one user topic the
        cluster holds."""
        if topic is None:
            topics = [d for d in (node.data_dir / "topics").iterdir() if d.is_dir()]
            assert len(topics) == 1, f"node {node.id} holds {len(topics)} topics"
            tdir = topics[0]
        else:
            tdir = node.data_dir / "topics" / topic
            if not tdir.is_dir():
                return {}
        return {int(p.name): p / "wal" for p in tdir.iterdir() if p.name.isdigit()}

    def stored_logs(self, topic: str | None = None) -> dict[int, dict[int, bytes]]:
        """With every node stopped: {node: {partition: the bytes of its
        WAL's .log segments, in order}} of the topic stored in directory
        `topic` (wal_dirs), by default the one user topic the cluster holds
        (replicas of a partition must be byte-identical)."""
        assert not any(n.alive() for n in self.nodes), "stop the cluster first"
        return {n.id: {part: b"".join(s.read_bytes() for s in sorted(wal.glob("*.log")))
                       for part, wal in self.wal_dirs(n, topic).items()}
                for n in self.nodes}

    def logs(self, lines: int = 40) -> str:
        return "\n".join(f"--- node {n.id} ({n.log}) ---\n{n.log_tail(lines)}" for n in self.nodes)
