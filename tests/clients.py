"""Helpers shared by the client tests: topic creation through a real admin
client, and waiting for metadata to show what was created."""

from __future__ import annotations

import time

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient, NewTopic


def admin(bootstrap: str) -> AdminClient:
    return AdminClient({"bootstrap.servers": bootstrap})


def create_topic(bootstrap: str, name: str, partitions: int, config: dict[str, str] | None = None,
                 timeout: float = 30.0) -> None:
    """CreateTopics through confluent-kafka's AdminClient, then waits until the
    metadata shows every partition with a leader."""
    a = admin(bootstrap)
    futures = a.create_topics([NewTopic(name, num_partitions=partitions, replication_factor=1,
                                        config=config or {})], operation_timeout=timeout)
    futures[name].result(timeout=timeout)
    wait_for_partitions(bootstrap, name, partitions, timeout)


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
