"""Request-rate quotas (issue 34 must-have 6, KIP-124, ADR 0028 slice 5):
Kafka 3.9.1's own `kafka-configs.sh` gives one client id
`request_percentage=1` (1% of one request-handler thread's time); that
client sends cheap Metadata requests one after another as fast as a raw
socket lets it. Its answers carry `throttle_time_ms > 0` and its
connection is muted (KIP-219), while another client id sending as many
requests on its own connection is never throttled.

The assertions are on the answers' throttle fields and the node's
throttle counter, never on timings: the throttled client is bounded
because this node stops reading it, which the counter shows.
"""

from __future__ import annotations

import struct

import harness
import kwire
from test_client_quotas import alter

GREEDY = "greedy-metadata"
POLITE = "polite-metadata"
METADATA_V = 4  # throttle_time_ms is the answer's first field from v3
MAX_REQUESTS = 50_000  # bounds the loop if no throttle ever comes
THROTTLES_WANTED = 3


def metadata_throttles(conn: kwire.Conn, client_id: str, count: int | None,
                       stop_after: int | None = None) -> tuple[int, list[int]]:
    """Sends all-topics Metadata requests one at a time as `client_id`:
    `count` of them, or until `stop_after` answers were throttled (at most
    MAX_REQUESTS). Returns how many were sent and the throttles seen."""
    body = struct.pack(">i", -1) + b"\x00"  # all topics, no auto-creation
    sent, throttles = 0, []
    limit = count if count is not None else MAX_REQUESTS
    while sent < limit:
        sent += 1
        conn.send(kwire.request_frame(kwire.API_METADATA, METADATA_V, sent, body,
                                      client_id=client_id))
        r = kwire.Reader(conn.recv_frame())
        assert r.i32() == sent
        throttle = r.i32()
        if throttle > 0:
            throttles.append(throttle)
            if stop_after is not None and len(throttles) >= stop_after:
                break
    return sent, throttles


def counter(broker, name: str) -> int | None:
    port = getattr(broker, "metrics_port", None)
    if port is None:
        return None
    status, text = harness.http_get(port, "/metrics")
    assert status == 200, text
    for line in text.splitlines():
        if line.startswith(name + " "):
            return int(float(line.split()[1]))
    raise AssertionError(f"{name} not in /metrics")


def test_a_client_past_its_request_percentage_is_throttled_and_others_are_not(broker):
    b = broker.bootstrap
    alter(b, "--entity-type", "clients", "--entity-name", GREEDY,
          "--add-config", "request_percentage=1")
    before = counter(broker, "helix_quota_throttles_request_total")
    try:
        with kwire.Conn(broker.host, broker.port, timeout=30) as greedy:
            sent, throttled = metadata_throttles(greedy, GREEDY, None,
                                                 stop_after=THROTTLES_WANTED)
        assert len(throttled) == THROTTLES_WANTED, (
            f"{sent} requests at request_percentage=1, throttled {len(throttled)} times")
        # Kafka bounds a request-quota throttle to one quota window (1 s).
        assert all(0 < t <= 1000 for t in throttled), throttled

        with kwire.Conn(broker.host, broker.port, timeout=30) as polite:
            _, polite_throttles = metadata_throttles(polite, POLITE, sent)
        assert polite_throttles == [], f"unquoted client throttled: {polite_throttles}"

        after = counter(broker, "helix_quota_throttles_request_total")
        if before is not None:
            assert after - before >= THROTTLES_WANTED, (before, after)
    finally:
        alter(b, "--entity-type", "clients", "--entity-name", GREEDY,
              "--delete-config", "request_percentage")


def test_confluent_clients_under_a_request_quota_are_told_to_wait(broker):
    """librdkafka reports the throttle it was told (its throttle_cb) and
    keeps working: every Metadata call still answers."""
    from confluent_kafka.admin import AdminClient

    client_id = "greedy-admin"
    alter(broker.bootstrap, "--entity-type", "clients", "--entity-name", client_id,
          "--add-config", "request_percentage=1")
    throttles: list[float] = []
    admin = AdminClient({"bootstrap.servers": broker.bootstrap, "client.id": client_id,
                         "throttle_cb": lambda e: throttles.append(e.throttle_time)})
    try:
        calls = 0
        while not throttles and calls < 20_000:
            calls += 1
            md = admin.list_topics(timeout=30)
            assert md.brokers, "a Metadata answer names the brokers"
            admin.poll(0)
        admin.poll(0)
        assert throttles, f"{calls} Metadata calls at request_percentage=1 were never throttled"
        assert all(t > 0 for t in throttles), throttles
    finally:
        alter(broker.bootstrap, "--entity-type", "clients", "--entity-name", client_id,
              "--delete-config", "request_percentage")
