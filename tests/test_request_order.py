"""A connection's requests take effect in the order the client sent them,
as on Kafka (its socket server handles one request of a connection at a
time): offset commits of one partition pipelined on one connection leave
the last one's offset. Helix ran each request's handler as a task of its
own, and a pipelined stream of commits ended with an earlier offset than
its last while every commit was answered NONE (helix-server
`kafka/request_order.rs`)."""

from __future__ import annotations

import uuid

import kwire
import clients
from test_offsets_bounded import committed_one

API_OFFSET_COMMIT = 8
PIPELINED = 500
ROUNDS = 5


def test_pipelined_commits_of_one_partition_leave_the_last_offset(broker, topic):
    clients.create_topic(broker.bootstrap, topic, 1)
    group = f"order-{uuid.uuid4().hex[:8]}"
    with kwire.Conn(broker.host, broker.port, timeout=60) as conn:
        kwire.find_coordinator(conn, group)
        for round_ in range(ROUNDS):
            first = round_ * PIPELINED + 1
            frames = []
            for offset in range(first, first + PIPELINED):
                body = kwire.offset_commit_body(2, group, -1, "", topic, 0, offset)
                frames.append(kwire.request_frame(API_OFFSET_COMMIT, 2, conn.next_id, body))
                conn.next_id += 1
            conn.send(b"".join(frames))
            for _ in frames:
                r = kwire.Reader(conn.recv_frame())
                r.i32()
                assert kwire.parse_offset_commit(r, 2) == kwire.ERR_NONE
            last = first + PIPELINED - 1
            assert committed_one(broker.bootstrap, group, topic, 0) == last, f"round {round_}"
