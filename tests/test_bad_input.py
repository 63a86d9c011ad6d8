"""Hostile and malformed input on raw sockets. Each case gets the documented
error or a closed connection; the broker keeps serving other connections;
its memory stays bounded."""

from __future__ import annotations

import os
import socket
import struct
import time

import pytest

import clients
import harness
import kwire


@pytest.fixture
def witness(broker):
    """A connection opened before the bad input, which must still be served after it."""
    conn = kwire.Conn(broker.host, broker.port)
    conn.api_versions()
    yield conn
    conn.close()


def assert_still_serving(broker, witness: kwire.Conn) -> None:
    assert kwire.API_METADATA in witness.api_versions(), "old connection no longer served"
    with kwire.Conn(broker.host, broker.port) as fresh:
        assert kwire.API_METADATA in fresh.api_versions(), "new connection not served"


def raw(broker, timeout: float = 10.0) -> socket.socket:
    s = socket.create_connection((broker.host, broker.port), timeout=timeout)
    return s


def closed_by_peer(s: socket.socket, timeout: float = 10.0) -> tuple[bool, bytes]:
    """Reads until EOF/reset or timeout: (closed, bytes received)."""
    s.settimeout(timeout)
    got = bytearray()
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            chunk = s.recv(65536)
            if not chunk:
                return True, bytes(got)
            got += chunk
    except (ConnectionResetError, BrokenPipeError):
        return True, bytes(got)
    except socket.timeout:
        return False, bytes(got)
    return False, bytes(got)


def send_ignoring_reset(s: socket.socket, data: bytes) -> None:
    try:
        s.sendall(data)
    except (BrokenPipeError, ConnectionResetError):
        pass  # the broker already closed: that is an accepted answer


def api_versions_frame(correlation_id: int = 7) -> bytes:
    return kwire.request_frame(kwire.API_API_VERSIONS, 0, correlation_id, b"")


def test_truncated_frame_is_dropped_when_client_half_closes(broker, witness):
    frame = api_versions_frame()
    with raw(broker) as s:
        s.sendall(frame[:-3])  # header promises 3 more bytes than sent
        # The incomplete request is not answered, and others are served meanwhile.
        s.settimeout(1.0)
        with pytest.raises(socket.timeout):
            s.recv(1)
        assert_still_serving(broker, witness)
        s.shutdown(socket.SHUT_WR)
        closed, got = closed_by_peer(s)
    assert closed, "broker kept a half-closed connection with a truncated frame open"
    assert got == b"", f"broker answered a truncated request: {got!r}"
    assert_still_serving(broker, witness)


@pytest.mark.parametrize("length", [2**31 - 1, 200 * 1024 * 1024, -1, -(2**31), 0, 3],
                         ids=["max_i32", "200MiB", "minus1", "min_i32", "zero", "shorter_than_header"])
def test_bad_frame_length_closes_connection(broker, witness, length):
    with raw(broker) as s:
        send_ignoring_reset(s, struct.pack(">i", length) + b"\x00\x12\x00\x00\x00\x00\x00\x07" + b"\x00" * 64)
        closed, got = closed_by_peer(s)
    assert closed, f"frame length {length}: connection left open"
    assert got == b"", f"frame length {length}: unexpected answer {got!r}"
    assert_still_serving(broker, witness)


def test_unknown_api_key_closes_connection(broker, witness):
    with raw(broker) as s:
        s.sendall(kwire.request_frame(9999, 0, 11, b"\x00" * 16))
        closed, got = closed_by_peer(s)
    assert closed, "unknown API key: connection left open"
    assert got == b"", f"unknown API key answered: {got!r}"
    assert_still_serving(broker, witness)


def test_too_new_api_versions_gets_kip511_fallback(broker, witness):
    with raw(broker) as s:
        body = kwire.compact_string("helix-tests") + kwire.compact_string("1.0") + b"\x00"
        s.sendall(kwire.request_frame(kwire.API_API_VERSIONS, 127, 21, body, flexible=True))
        conn = kwire.Conn.__new__(kwire.Conn)
        conn.sock = s
        r = kwire.Reader(conn.recv_frame())
    assert r.i32() == 21
    err, ranges = kwire.parse_api_versions(r, flexible=False)
    assert err == kwire.ERR_UNSUPPORTED_VERSION
    assert kwire.API_API_VERSIONS in ranges and ranges[kwire.API_API_VERSIONS][0] == 0
    assert_still_serving(broker, witness)


@pytest.mark.parametrize("api_key", [kwire.API_METADATA, kwire.API_PRODUCE, kwire.API_FETCH])
def test_unsupported_version_is_refused(broker, witness, api_key):
    """One past the advertised maximum: UNSUPPORTED_VERSION, or a closed connection."""
    vmax = witness.versions()[api_key][1]
    with raw(broker) as s:
        s.sendall(kwire.request_frame(api_key, vmax + 1, 31, b"\x00" * 32, flexible=True))
        s.settimeout(10)
        closed, got = closed_by_peer(s, timeout=5)
    if got:
        (length, cid) = struct.unpack(">ii", got[:8])
        assert length == len(got) - 4 and cid == 31, f"malformed answer {got!r}"
        assert struct.pack(">h", kwire.ERR_UNSUPPORTED_VERSION) in got[8:], (
            f"answer to API {api_key} v{vmax + 1} carries no UNSUPPORTED_VERSION: {got!r}"
        )
    else:
        assert closed, f"API {api_key} v{vmax + 1}: neither answered nor closed"
    assert_still_serving(broker, witness)


def good_batch(value: bytes) -> bytes:
    return kwire.record_batch([kwire.Record(b"key", value, [("h", b"1")])])


def corrupt(kind: str) -> bytes:
    batch = bytearray(good_batch(b"corrupted-" + kind.encode()))
    if kind == "garbage":
        return os.urandom(61) + b"\xff" * 40
    if kind == "bad_crc":
        batch[17] ^= 0xFF
        return bytes(batch)
    if kind == "record_count":
        three = kwire.record_batch([kwire.Record(b"k", b"v%d" % i) for i in range(3)])
        b = bytearray(three)
        struct.pack_into(">i", b, 57, 5)  # claims 5 records, holds 3
        crc = kwire.crc32c(bytes(b[21:]))
        struct.pack_into(">I", b, 17, crc)
        return bytes(b)
    if kind == "batch_length":
        struct.pack_into(">i", batch, 8, len(batch) + 1000)  # longer than the data
        return bytes(batch)
    if kind == "magic":
        batch[16] = 7
        return bytes(batch)
    raise ValueError(kind)


KAFKA_FAILS_WHOLE_REQUEST = {"garbage", "magic"}


@pytest.mark.parametrize("kind", ["garbage", "bad_crc", "record_count", "batch_length", "magic"])
def test_bad_batch_fails_its_partition_only(broker, witness, topic, kind):
    clients.create_topic(broker.bootstrap, topic, 2)
    with kwire.Conn(broker.host, broker.port) as conn:
        try:
            res = conn.produce(topic, {0: good_batch(b"good"), 1: corrupt(kind)})
        except (ConnectionError, kwire.ProtocolError) as e:
            pytest.fail(f"{kind}: broker dropped the whole request ({e}) instead of failing partition 1")
        err1 = res[1][0]
        assert err1 in (kwire.ERR_CORRUPT_MESSAGE, kwire.ERR_INVALID_RECORD), f"{kind}: partition 1 got error {err1}"
        err, hw1, data1 = conn.fetch(topic, 1, 0)
        assert (err, hw1, data1) == (kwire.ERR_NONE, 0, b""), "a bad batch was written"
        if broker.kind == "kafka" and kind in KAFKA_FAILS_WHOLE_REQUEST:
            # Apache Kafka refuses the whole request when a batch cannot even be
            # parsed; Helix (issue 12) fails only that partition.
            assert res[0][0] == kwire.ERR_CORRUPT_MESSAGE, res
            assert conn.fetch(topic, 0, 0)[1] == 0
        else:
            assert res[0] == (kwire.ERR_NONE, 0), f"{kind}: the good partition got {res[0]}"
            (batch,) = conn.fetch_all(topic, 0, 1)
            assert [r.value for r in kwire.decode_records(batch)] == [b"good"]
    assert_still_serving(broker, witness)


@pytest.mark.managed
def test_memory_stays_bounded_under_hostile_frames(broker, witness):
    """Connections that declare huge frames and stream data into them, plus
    garbage batches, must not grow the broker's resident memory."""
    pid = broker.pid
    if pid is None:
        pytest.skip("needs the broker's pid (set HELIX_TEST_BROKER_PID with HELIX_TEST_BOOTSTRAP)")
    # Warm up allocator arenas on a normal path first.
    assert_still_serving(broker, witness)
    before = harness.rss_kib(pid)
    chunk = b"\xab" * (1 << 20)
    socks = []
    try:
        for length in [2**31 - 1] * 16 + [-5] * 4:
            s = raw(broker)
            socks.append(s)
            send_ignoring_reset(s, struct.pack(">i", length))
            for _ in range(4):  # 4 MiB into a frame the broker must refuse
                send_ignoring_reset(s, chunk)
        time.sleep(0.5)
        during = harness.rss_kib(pid)
        for s in socks:
            closed, _ = closed_by_peer(s, timeout=10)
            assert closed, "a connection with a refused frame length stayed open"
    finally:
        for s in socks:
            s.close()
    for _ in range(20):
        with kwire.Conn(broker.host, broker.port) as conn:
            try:
                conn.produce("no-such-topic-for-garbage", {0: os.urandom(512 * 1024)})
            except (ConnectionError, kwire.ProtocolError):
                pass
    after = harness.rss_kib(pid)
    grown_mib = (max(during, after) - before) / 1024
    assert grown_mib < 48, f"RSS grew by {grown_mib:.1f} MiB (from {before} kiB, during {during}, after {after})"
    assert_still_serving(broker, witness)


@pytest.mark.parametrize("batches", [0, 2])
def test_produce_v3_with_other_than_one_batch_per_partition_is_refused(broker, witness, topic, batches):
    """Kafka's rule (ProduceRequest.validateRecords): v3 and later carry
    exactly one record batch per partition; anything else is INVALID_RECORD
    for that partition, and nothing of it is written."""
    clients.create_topic(broker.bootstrap, topic, 2)
    records = b"".join(good_batch(b"b%d" % i) for i in range(batches))
    with kwire.Conn(broker.host, broker.port) as conn:
        res = conn.produce(topic, {0: good_batch(b"good"), 1: records})
        assert res[1][0] == kwire.ERR_INVALID_RECORD, res
        assert res[0] == (kwire.ERR_NONE, 0), res
        err, hw, data = conn.fetch(topic, 1, 0)
        assert (err, hw, data) == (kwire.ERR_NONE, 0, b""), "a refused partition was written"
    assert_still_serving(broker, witness)
