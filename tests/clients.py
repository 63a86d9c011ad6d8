"""Helpers shared by the client tests: topic creation through a real admin
client, and waiting for metadata to show what was created."""

from __future__ import annotations

import logging
import time

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient, NewTopic

import kwire


# librdkafka's log lines go to Python logging (pytest shows them with a failing
# test) instead of straight to the terminal.
RDKAFKA = {"logger": logging.getLogger("librdkafka")}


def admin(bootstrap: str) -> AdminClient:
    return AdminClient({**RDKAFKA, "bootstrap.servers": bootstrap})


def create_topic(bootstrap: str, name: str, partitions: int, config: dict[str, str] | None = None,
                 timeout: float = 30.0) -> None:
    """CreateTopics through confluent-kafka's AdminClient, then waits until the
    metadata shows every partition with a leader."""
    a = admin(bootstrap)
    futures = a.create_topics([NewTopic(name, num_partitions=partitions, replication_factor=1,
                                        config=config or {})], operation_timeout=timeout)
    futures[name].result(timeout=timeout)
    wait_for_partitions(bootstrap, name, partitions, timeout)
    wait_until_fetchable(bootstrap, name, partitions, timeout)


# Errors a client retries while a new partition comes up: UNKNOWN_TOPIC_OR_PARTITION,
# LEADER_NOT_AVAILABLE, NOT_LEADER_OR_FOLLOWER. (Kafka shows a new topic in its
# metadata slightly before its partitions serve Produce and Fetch.)
RETRIABLE_NEW_PARTITION = {3, 5, 6}


def wait_until_fetchable(bootstrap: str, name: str, partitions: int, timeout: float = 30.0) -> None:
    """Waits until every partition answers a raw Fetch at offset 0 without error,
    so raw-protocol tests (which do not retry) start on a serving partition."""
    host, _, port = bootstrap.rpartition(":")
    deadline = time.monotonic() + timeout
    with kwire.Conn(host, int(port)) as conn:
        for p in range(partitions):
            while True:
                err = conn.fetch(name, p, 0, max_wait_ms=0)[0]
                if err == kwire.ERR_NONE:
                    break
                if err not in RETRIABLE_NEW_PARTITION or time.monotonic() > deadline:
                    raise AssertionError(f"new topic {name} partition {p}: Fetch at 0 answers error {err}")
                time.sleep(0.1)


def wait_for_partitions(bootstrap: str, name: str, partitions: int, timeout: float = 30.0) -> None:
    a = admin(bootstrap)
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        try:
            md = a.list_topics(topic=name, timeout=5)
            t = md.topics.get(name)
            if t is not None and t.error is None and len(t.partitions) == partitions and all(
                p.leader >= 0 for p in t.partitions.values()
            ):
                return
            last = t.error if t is not None else "absent"
        except KafkaException as e:
            last = e
        time.sleep(0.2)
    raise AssertionError(f"topic {name} never showed {partitions} partitions with leaders: {last}")
