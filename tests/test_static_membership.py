"""Static group membership, KIP-345 (issue 30 item 6), with two librdkafka
consumers as librdkafka's own test 0102 drives them: `group.instance.id`
consumer1 and consumer2, regex-subscribed to a 3-partition topic,
`session.timeout.ms` 6000, `max.poll.interval.ms` 9000, polled in turn.

Both get their first assignment; a member restarted within its session
timeout gets its assignment back with no rebalance (the other member sees
no revoke); a member stopped past its session timeout causes exactly one
rebalance, after which the other member owns every partition. Runs against
Helix and against Apache Kafka 3.9.1 (HELIX_TEST_KAFKA_LIBS)."""

from __future__ import annotations

import time
import uuid

from confluent_kafka import Consumer

import clients

SESSION_MS = 6000


class Member:
    """A static consumer and the assignments its callbacks saw."""

    def __init__(self, bootstrap: str, group: str, topic: str, instance: str):
        self.instance = instance
        self.assigned: list[list[int]] = []
        self.revoked: list[list[int]] = []
        self.c = Consumer({**clients.RDKAFKA, "bootstrap.servers": bootstrap, "group.id": group,
                           "group.instance.id": instance, "session.timeout.ms": SESSION_MS,
                           "max.poll.interval.ms": 9000, "enable.auto.commit": False,
                           "auto.offset.reset": "earliest"})
        self.c.subscribe([f"^{topic}.*"], on_assign=self._assign, on_revoke=self._revoke)

    def _assign(self, _c, parts) -> None:
        self.assigned.append(sorted(p.partition for p in parts))

    def _revoke(self, _c, parts) -> None:
        self.revoked.append(sorted(p.partition for p in parts))

    @property
    def owns(self) -> list[int]:
        return self.assigned[-1] if self.assigned else []


def poll_until(members: list[Member], done, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not done():
        assert time.monotonic() < deadline, f"timed out waiting for {what}: " + \
            ", ".join(f"{m.instance} assigned {m.assigned} revoked {m.revoked}" for m in members)
        for m in members:
            m.c.poll(0.2)


def test_static_members_keep_their_assignment_across_a_restart_and_rebalance_once_past_the_session(
        broker, topic):
    clients.create_topic(broker.bootstrap, topic, 3)
    group = f"static-{uuid.uuid4().hex[:8]}"
    c1 = Member(broker.bootstrap, group, topic, "consumer1")
    c2 = Member(broker.bootstrap, group, topic, "consumer2")
    try:
        poll_until([c1, c2], lambda: sorted(c1.owns + c2.owns) == [0, 1, 2] and c1.owns and c2.owns,
                   40, "both static members to be assigned")
        first = (c1.owns, c2.owns)
        c1_rebalances, c1_revokes = len(c1.assigned), len(c1.revoked)

        # consumer2 restarts within its session timeout: a static member
        # does not leave on close, and its successor takes its place.
        c2.c.close()
        c2 = Member(broker.bootstrap, group, topic, "consumer2")
        poll_until([c1, c2], lambda: bool(c2.assigned), 30, "the restarted member's assignment")
        assert c2.owns == first[1], f"restarted member got {c2.owns}, had {first[1]}"
        # Long enough for a rebalance to have reached consumer1, were there one.
        end = time.monotonic() + 3
        while time.monotonic() < end:
            for m in (c1, c2):
                m.c.poll(0.2)
        assert (len(c1.assigned), len(c1.revoked)) == (c1_rebalances, c1_revokes), \
            f"consumer1 saw a rebalance: assigned {c1.assigned} revoked {c1.revoked}"

        # consumer2 stops for good: once its session times out, one rebalance
        # gives consumer1 every partition.
        c2.c.close()
        c2 = None
        poll_until([c1], lambda: c1.owns == [0, 1, 2], 3 * SESSION_MS / 1000 + 20,
                   "consumer1 to own every partition after consumer2's session expired")
        assert len(c1.assigned) == c1_rebalances + 1, f"more than one rebalance: {c1.assigned}"
    finally:
        c1.c.close()
        if c2 is not None:
            c2.c.close()
