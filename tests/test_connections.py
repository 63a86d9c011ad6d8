"""Idle and greedy connections (issue 18 item 1), on the real binary:
connections that send nothing are closed after connections_max_idle_ms;
at max_connections the connection idle longest is closed to admit a new
one, so idle connections never lock a working client out; the per-IP limit
(Kafka's max.connections.per.ip) and its overrides hold."""

from __future__ import annotations

import os
import tempfile
import time
from pathlib import Path

import pytest
from confluent_kafka import Producer

import clients
import harness
import kwire

pytestmark = [pytest.mark.managed,
              pytest.mark.skipif(harness.external_bootstrap() is not None
                                 or os.environ.get("HELIX_TEST_KAFKA_LIBS") is not None,
                                 reason="starts a helix-server with its own connection limits")]

IDLE_MS = 1500
ARGS = ["--max-connections", "20", "--connections-max-idle-ms", str(IDLE_MS),
        "--max-connections-per-ip", "4", "--max-connections-per-ip-overrides", "127.0.0.2:30"]


@pytest.fixture
def limited_broker():
    b = harness.HelixBroker(harness.helix_binary(), Path(tempfile.mkdtemp(prefix="helix-conn-")), ARGS)
    b.start()
    try:
        yield b
    finally:
        b.stop()


def answers(conn: kwire.Conn) -> bool:
    try:
        return bool(conn.api_versions())
    except (OSError, kwire.ProtocolError):
        return False


def test_idle_connections_are_closed_and_never_lock_out_a_working_client(limited_broker, topic):
    b = limited_broker
    # Fill every slot with connections that say nothing (from 127.0.0.2,
    # whose per-IP override allows 30).
    idle = [kwire.Conn(b.host, b.port, source="127.0.0.2") for _ in range(20)]
    try:
        # A working client still gets in: the idle ones make room.
        clients.create_topic(b.bootstrap, topic, 1)
        p = Producer({**clients.RDKAFKA, "bootstrap.servers": b.bootstrap, "acks": "all"})
        acked = []
        p.produce(topic, value=b"through-a-full-node", on_delivery=lambda err, msg: acked.append(err))
        assert p.flush(30) == 0 and acked == [None], acked
        assert idle[0].closed_by_peer(timeout=5), "the connection idle longest was not closed"
        # The rest close on their own once idle for connections_max_idle_ms.
        started = time.monotonic()
        still_open = [c for c in idle[1:] if not c.closed_by_peer(timeout=10)]
        assert not still_open, f"{len(still_open)} idle connections still open after {time.monotonic() - started:.1f} s"
        log = b.log.read_text(errors="replace")
        assert "closing idle connection" in log and "idle longest" in log
    finally:
        for c in idle:
            c.close()


def test_the_per_ip_limit_and_its_override_hold(limited_broker):
    b = limited_broker
    held = []
    try:
        for _ in range(4):
            c = kwire.Conn(b.host, b.port)
            held.append(c)
            assert answers(c), "a connection within the per-IP limit is served"
        fifth = kwire.Conn(b.host, b.port)
        held.append(fifth)
        assert fifth.closed_by_peer(timeout=5), "a fifth connection from 127.0.0.1 was served (limit 4)"
        # 127.0.0.2 has an override of 30.
        for _ in range(10):
            c = kwire.Conn(b.host, b.port, source="127.0.0.2")
            held.append(c)
            assert answers(c), "the override admits more connections from 127.0.0.2"
        # A freed place is reused.
        held[0].close()
        deadline = time.monotonic() + 5
        while True:
            c = kwire.Conn(b.host, b.port)
            held.append(c)
            if answers(c) or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        assert answers(c), "a place freed by a closed connection was not reused"
        assert "max_connections_per_ip" in b.log.read_text(errors="replace")
    finally:
        for c in held:
            c.close()


BUDGET_MIB = 32


@pytest.fixture
def budget_broker():
    b = harness.HelixBroker(harness.helix_binary(), Path(tempfile.mkdtemp(prefix="helix-budget-")),
                            ["--queued-max-request-bytes", str(BUDGET_MIB << 20)])
    b.start()
    try:
        yield b
    finally:
        b.stop()


def test_stalled_large_requests_hold_at_most_the_request_budget(budget_broker, topic):
    """Issue 18 item 2: ten connections each sending most of a large request
    and then stalling took the broker to 969 MB. The node-wide request byte
    budget (queued_max_request_bytes) bounds what they hold: a connection
    whose request does not fit is not read until the budget frees."""
    import socket
    import struct
    b = budget_broker
    clients.create_topic(b.bootstrap, topic, 1)
    before = harness.rss_kib(b.pid)
    declared = 60 << 20
    sent_each = 40 << 20
    chunk = b"\xab" * (1 << 20)
    socks = []
    sent = []
    try:
        for _ in range(10):
            s = socket.create_connection((b.host, b.port))
            s.sendall(struct.pack(">i", declared))
            s.setblocking(False)
            socks.append(s)
            sent.append(0)
        # Push up to sent_each bytes into every connection, as far as the
        # broker (and the socket buffers) take them, for a few seconds.
        deadline = time.monotonic() + 8
        while time.monotonic() < deadline and min(sent) < sent_each:
            progressed = False
            for i, s in enumerate(socks):
                if sent[i] >= sent_each:
                    continue
                try:
                    sent[i] += s.send(chunk)
                    progressed = True
                except BlockingIOError:
                    pass
            if not progressed:
                time.sleep(0.05)
        total_sent = sum(sent)
        time.sleep(0.5)
        during = harness.rss_kib(b.pid)
    finally:
        for s in socks:
            s.close()
    grown_mib = (during - before) / 1024
    # Socket buffers let more bytes leave the client than the broker read.
    assert total_sent > (BUDGET_MIB + 32) << 20, f"only {total_sent >> 20} MiB sent: the test did not load the broker"
    assert grown_mib < BUDGET_MIB + 48, \
        f"RSS grew by {grown_mib:.0f} MiB with {total_sent >> 20} MiB sent into stalled requests (budget {BUDGET_MIB} MiB)"
    # Freed when those connections go: a normal client is served again.
    p = Producer({**clients.RDKAFKA, "bootstrap.servers": b.bootstrap, "acks": "all"})
    acked = []
    p.produce(topic, value=b"after", on_delivery=lambda err, msg: acked.append(err))
    assert p.flush(30) == 0 and acked == [None], acked
