"""kafka-python (pure Python client): produce/consume round trip and the admin
client (create/delete/list topics, describe configs, create partitions)."""

from __future__ import annotations

import time

import pytest
from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import ConfigResource, ConfigResourceType, NewPartitions, NewTopic
from kafka.errors import TopicAlreadyExistsError

import clients


def admin(broker) -> KafkaAdminClient:
    return KafkaAdminClient(bootstrap_servers=broker.bootstrap, request_timeout_ms=30_000)


def consume_all(broker, topic: str, partitions: list[int], expected: int, timeout: float = 60.0):
    c = KafkaConsumer(bootstrap_servers=broker.bootstrap, group_id=None, enable_auto_commit=False,
                      auto_offset_reset="earliest")
    try:
        tps = [TopicPartition(topic, p) for p in partitions]
        c.assign(tps)
        c.seek_to_beginning(*tps)
        out = []
        deadline = time.monotonic() + timeout
        while len(out) < expected and time.monotonic() < deadline:
            for recs in c.poll(timeout_ms=500, max_records=2000).values():
                out.extend(recs)
        # Nothing beyond what was produced.
        for recs in c.poll(timeout_ms=500).values():
            out.extend(recs)
        return out
    finally:
        c.close()


@pytest.mark.parametrize("compression", [None, "gzip"])
def test_produce_consume_round_trip(broker, topic, compression):
    partitions = 3
    n = 600
    clients.create_topic(broker.bootstrap, topic, partitions)
    p = KafkaProducer(bootstrap_servers=broker.bootstrap, acks="all", compression_type=compression,
                      linger_ms=5)
    futures = []
    for i in range(n):
        futures.append(p.send(topic, key=b"key-%d" % (i % 17), value=b"value-%05d" % i,
                              headers=[("seq", b"%d" % i), ("client", b"kafka-python")]))
    p.flush(timeout=60)
    acked = {}
    for i, f in enumerate(futures):
        md = f.get(timeout=30)
        acked[(md.partition, md.offset)] = i
    p.close()
    assert len(acked) == n, "two records acknowledged at the same offset"

    recs = consume_all(broker, topic, list(range(partitions)), n)
    assert len(recs) == n, f"read {len(recs)} of {n}"
    last_offset: dict[int, int] = {}
    for r in recs:
        i = acked[(r.partition, r.offset)]
        assert r.key == b"key-%d" % (i % 17)
        assert r.value == b"value-%05d" % i
        assert list(r.headers) == [("seq", b"%d" % i), ("client", b"kafka-python")]
        assert r.offset == last_offset.get(r.partition, -1) + 1, "offset gap or reorder"
        last_offset[r.partition] = r.offset


def test_admin_create_list_describe_delete(broker, topic):
    a = admin(broker)
    try:
        # validate_only creates nothing.
        a.create_topics([NewTopic(topic, 2, 1)], validate_only=True)
        assert topic not in a.list_topics()

        a.create_topics([NewTopic(topic, 2, 1, topic_configs={"retention.ms": "7200000",
                                                               "max.message.bytes": "500000"})])
        clients.wait_for_partitions(broker.bootstrap, topic, 2)
        assert topic in a.list_topics()
        with pytest.raises(TopicAlreadyExistsError):
            a.create_topics([NewTopic(topic, 2, 1)])

        res = a.describe_configs([ConfigResource(ConfigResourceType.TOPIC, topic)], config_filter="all")
        configs = res["topic"][topic]
        assert configs["retention.ms"]["value"] == "7200000"
        assert configs["retention.ms"]["config_source"] == "DYNAMIC_TOPIC_CONFIG"
        assert configs["max.message.bytes"]["value"] == "500000"
        assert configs["max.message.bytes"]["config_source"] == "DYNAMIC_TOPIC_CONFIG"
        # Configs not set on the topic are reported with their defaults.
        assert configs["cleanup.policy"]["value"] == "delete"
        assert configs["cleanup.policy"]["config_source"] != "DYNAMIC_TOPIC_CONFIG"

        a.delete_topics([topic])
        deadline = time.monotonic() + 30
        while topic in a.list_topics() and time.monotonic() < deadline:
            time.sleep(0.2)
        assert topic not in a.list_topics()
    finally:
        a.close()


def test_admin_describe_broker_configs(broker):
    a = admin(broker)
    try:
        md = a.describe_cluster()
        brokers = md["brokers"]
        assert len(brokers) == 1 and f"{brokers[0]['host']}:{brokers[0]['port']}" == broker.bootstrap, md
        node = str(brokers[0]["broker_id"])
        res = a.describe_configs([ConfigResource(ConfigResourceType.BROKER, node)], config_filter="all")
        configs = res["broker"][node]
        # The broker-wide defaults its topics inherit, with real values.
        ms = configs.get("log.retention.ms", {}).get("value")
        hours = configs.get("log.retention.hours", {}).get("value")
        retention_ms = int(ms) if ms is not None else int(hours) * 3_600_000
        assert retention_ms == -1 or retention_ms > 0, configs
        assert broker.bootstrap in configs["advertised.listeners"]["value"]
        assert int(configs["message.max.bytes"]["value"]) > 0
        assert int(configs["num.partitions"]["value"]) >= 1
        assert configs["auto.create.topics.enable"]["value"] == "true"
    finally:
        a.close()


def test_admin_create_partitions_then_produce_to_new_partition(broker, topic):
    a = admin(broker)
    try:
        a.create_topics([NewTopic(topic, 2, 1)])
        clients.wait_for_partitions(broker.bootstrap, topic, 2)
        a.create_partitions({topic: NewPartitions(5)})
        clients.wait_for_partitions(broker.bootstrap, topic, 5)
        (desc,) = a.describe_topics([topic])
        assert sorted(p["partition_index"] for p in desc["partitions"]) == list(range(5))
    finally:
        a.close()

    p = KafkaProducer(bootstrap_servers=broker.bootstrap, acks="all")
    metas = [p.send(topic, value=b"on-%d" % part, partition=part).get(timeout=30) for part in range(5)]
    p.close()
    assert [(m.partition, m.offset) for m in metas] == [(part, 0) for part in range(5)]
    recs = consume_all(broker, topic, [4], 1)
    assert [(r.offset, r.value) for r in recs] == [(0, b"on-4")]
