"""Protocol behaviour seen on a raw connection: acks=0 gets no response,
pipelined requests are answered in order, Fetch long-polls until data arrives,
and a fetch past the end is OFFSET_OUT_OF_RANGE."""

from __future__ import annotations

import struct
import threading
import time

import clients
import kwire

ERR_OFFSET_OUT_OF_RANGE = 1


def one_record(value: bytes) -> bytes:
    return kwire.record_batch([kwire.Record(b"k", value)])


def test_acks_zero_gets_no_response_but_is_written(broker, topic):
    clients.create_topic(broker.bootstrap, topic, 1)
    with kwire.Conn(broker.host, broker.port) as conn:
        v = conn.pick_version(kwire.API_PRODUCE, 3, 8)
        body = kwire.string(None) + struct.pack(">hi", 0, 10_000) + struct.pack(">i", 1) + kwire.string(topic)
        body += struct.pack(">iii", 1, 0, len(one_record(b"fire-and-forget"))) + one_record(b"fire-and-forget")
        conn.send(kwire.request_frame(kwire.API_PRODUCE, v, 999, body))
        # The next answer on this connection is for the next request, not for acks=0.
        assert conn.produce(topic, {0: one_record(b"acked")}, acks=1) == {0: (kwire.ERR_NONE, 1)}
        assert conn.produce(topic, {0: one_record(b"all")}, acks=-1) == {0: (kwire.ERR_NONE, 2)}
        batches = conn.fetch_all(topic, 0, 3)
    values = [r.value for b in batches for r in kwire.decode_records(b)]
    assert values == [b"fire-and-forget", b"acked", b"all"]


def test_pipelined_requests_answered_in_order(broker, topic):
    partitions = 4
    clients.create_topic(broker.bootstrap, topic, partitions)
    with kwire.Conn(broker.host, broker.port) as conn:
        pv = conn.pick_version(kwire.API_PRODUCE, 3, 8)
        frames = []
        kinds = {}
        for cid in range(1, 301):
            if cid % 3 == 0:
                frames.append(kwire.request_frame(kwire.API_API_VERSIONS, 0, cid, b""))
                kinds[cid] = "versions"
            else:
                part = cid % partitions
                batch = one_record(b"pipelined-%d" % cid)
                body = (kwire.string(None) + struct.pack(">hi", -1, 10_000) + struct.pack(">i", 1)
                        + kwire.string(topic) + struct.pack(">iii", 1, part, len(batch)) + batch)
                frames.append(kwire.request_frame(kwire.API_PRODUCE, pv, cid, body))
                kinds[cid] = f"produce:{part}"
        conn.send(b"".join(frames))  # all 300 before reading any answer
        next_offset = [0] * partitions
        for cid in range(1, 301):
            r = kwire.Reader(conn.recv_frame())
            assert r.i32() == cid, "answers out of request order"
            if kinds[cid].startswith("produce"):
                part = int(kinds[cid].split(":")[1])
                assert r.i32() == 1 and r.string() == topic and r.i32() == 1
                assert r.i32() == part and r.i16() == kwire.ERR_NONE
                assert r.i64() == next_offset[part], "pipelined produce offsets out of order"
                next_offset[part] += 1
            else:
                assert r.i16() == kwire.ERR_NONE


def test_fetch_long_polls_until_data_arrives(broker, topic):
    clients.create_topic(broker.bootstrap, topic, 1)
    with kwire.Conn(broker.host, broker.port) as conn:
        assert conn.produce(topic, {0: one_record(b"first")}) == {0: (kwire.ERR_NONE, 0)}

    def produce_later():
        time.sleep(0.5)
        with kwire.Conn(broker.host, broker.port) as c:
            c.produce(topic, {0: one_record(b"woken")})

    t = threading.Thread(target=produce_later)
    with kwire.Conn(broker.host, broker.port, timeout=30) as conn:
        t.start()
        # min_bytes 1, max_wait 20 s at the end of the log: answered when the record lands.
        err, hw, data = conn.fetch(topic, 0, 1, max_wait_ms=20_000)
    t.join()
    assert err == kwire.ERR_NONE
    assert hw == 2
    (batch,) = kwire.parse_batches(data)
    assert batch.base_offset == 1 and [r.value for r in kwire.decode_records(batch)] == [b"woken"]


def test_fetch_past_the_end_is_out_of_range(broker, topic):
    clients.create_topic(broker.bootstrap, topic, 1)
    with kwire.Conn(broker.host, broker.port) as conn:
        conn.produce(topic, {0: one_record(b"only")})
        err, _hw, data = conn.fetch(topic, 0, 5, max_wait_ms=0)
        assert err == ERR_OFFSET_OUT_OF_RANGE and data == b""
        err, hw, data = conn.fetch(topic, 0, 1, max_wait_ms=0)  # exactly the end: empty, no error
        assert (err, hw, data) == (kwire.ERR_NONE, 1, b"")
