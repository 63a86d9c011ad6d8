"""Consumer groups (issue 13), bad input on raw sockets: stale generations,
unknown members, empty protocol lists and huge group ids get Kafka's error
codes, change nothing, and the broker keeps serving.

Marked `groups` (select them alone with `-m groups`)."""

from __future__ import annotations

import uuid

import pytest
from confluent_kafka import TopicPartition

import clients
import kwire
from test_groups import consumers, group_consumer, poll_until, produce_n  # noqa: F401 (fixture)

pytestmark = pytest.mark.groups

ERR_ILLEGAL_GENERATION = 22
ERR_INCONSISTENT_GROUP_PROTOCOL = 23
ERR_INVALID_GROUP_ID = 24
ERR_UNKNOWN_MEMBER_ID = 25
ERR_MEMBER_ID_REQUIRED = 79


@pytest.fixture
def stable_group(broker, topic, consumers):
    """A group with one real member that committed offset 10 on partition 0."""
    clients.create_topic(broker.bootstrap, topic, 1)
    produce_n(broker, topic, 20, 1)
    group = f"g-{uuid.uuid4().hex[:8]}"
    c = consumers(broker, group)
    c.subscribe([topic])
    poll_until([c], lambda: len(c.assignment()) == 1)
    c.commit(offsets=[TopicPartition(topic, 0, 10)], asynchronous=False)
    return group, c


def committed(c, topic: str) -> int:
    (tp,) = c.committed([TopicPartition(topic, 0)], timeout=30)
    return tp.offset


def test_offset_commit_with_stale_generation_or_unknown_member_is_refused(broker, topic, stable_group):
    group, member = stable_group
    with kwire.Conn(broker.host, broker.port) as conn:
        v = conn.pick_version(kwire.API_OFFSET_COMMIT, 2, 7)
        r = conn.request(kwire.API_OFFSET_COMMIT, v,
                         kwire.offset_commit_body(v, group, 999_999, member.memberid(), topic, 0, 15))
        assert kwire.parse_offset_commit(r, v) == ERR_ILLEGAL_GENERATION
        r = conn.request(kwire.API_OFFSET_COMMIT, v,
                         kwire.offset_commit_body(v, group, 999_999, "no-such-member", topic, 0, 16))
        assert kwire.parse_offset_commit(r, v) == ERR_UNKNOWN_MEMBER_ID
    assert committed(member, topic) == 10, "a refused commit changed the committed offset"


def test_sync_group_from_non_member_is_refused(broker, stable_group):
    group, member = stable_group
    with kwire.Conn(broker.host, broker.port) as conn:
        v = conn.pick_version(kwire.API_SYNC_GROUP, 1, 3)
        r = conn.request(kwire.API_SYNC_GROUP, v, kwire.sync_group_body(v, group, 1, "no-such-member"))
        r.i32()
        assert r.i16() == ERR_UNKNOWN_MEMBER_ID
    assert member.assignment(), "the real member lost its assignment"


def test_join_group_with_no_protocols_is_refused(broker):
    group = f"g-{uuid.uuid4().hex[:8]}"
    with kwire.Conn(broker.host, broker.port) as conn:
        v = conn.pick_version(kwire.API_JOIN_GROUP, 2, 5)
        r = conn.request(kwire.API_JOIN_GROUP, v, kwire.join_group_body(v, group, "", []))
        err, _gen, _member = kwire.parse_join_group(r, v)
        assert err == ERR_INCONSISTENT_GROUP_PROTOCOL
        assert kwire.API_METADATA in conn.api_versions()


def test_join_group_with_ten_thousand_character_group_id(broker):
    """Kafka has no limit on group ids: the join proceeds (MEMBER_ID_REQUIRED
    first, v4+) and the broker keeps serving."""
    group = "g" * 10_000
    with kwire.Conn(broker.host, broker.port) as conn:
        v = conn.pick_version(kwire.API_JOIN_GROUP, 2, 5)
        r = conn.request(kwire.API_JOIN_GROUP, v,
                         kwire.join_group_body(v, group, "", [("range", b"\x00\x01\x00\x00\x00\x00")]))
        err, _gen, member = kwire.parse_join_group(r, v)
        assert err in (kwire.ERR_NONE, ERR_MEMBER_ID_REQUIRED, ERR_INVALID_GROUP_ID), err
        if err == ERR_MEMBER_ID_REQUIRED:
            assert member, "MEMBER_ID_REQUIRED without a member id"
        assert kwire.API_METADATA in conn.api_versions()
    with kwire.Conn(broker.host, broker.port) as fresh:
        assert kwire.API_METADATA in fresh.api_versions()
