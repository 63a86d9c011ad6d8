"""OffsetCommit for a topic that does not exist (issue 30 item 3): Kafka 3.9
answers UNKNOWN_TOPIC_OR_PARTITION for each such partition (its KafkaApis
checks the metadata before the group coordinator), and commits the rest.
Helix used to answer success."""

from __future__ import annotations

import uuid

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

import clients


def test_offset_commit_for_a_missing_topic_or_partition_is_unknown_topic_or_partition(broker, topic):
    clients.create_topic(broker.bootstrap, topic, 1)
    missing = f"missing-{uuid.uuid4().hex[:8]}"
    c = Consumer({**clients.RDKAFKA, "bootstrap.servers": broker.bootstrap,
                  "group.id": f"g-{uuid.uuid4().hex[:8]}", "enable.auto.commit": False,
                  "allow.auto.create.topics": False})
    try:
        offsets = [TopicPartition(missing, 0, 5), TopicPartition(topic, 0, 0),
                   TopicPartition(topic, 7, 3)]
        try:
            result = c.commit(offsets=offsets, asynchronous=False)
        except KafkaException as e:
            # librdkafka raises when any partition failed; the per-partition
            # results are not returned then: commit them one by one below.
            assert e.args[0].code() in (KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._UNKNOWN_PARTITION), e
            result = None
        if result is not None:
            errors = {(tp.topic, tp.partition): tp.error for tp in result}
            assert errors[(missing, 0)] is not None
            assert errors[(missing, 0)].code() == KafkaError.UNKNOWN_TOPIC_OR_PART
        for tp, want in ((TopicPartition(missing, 0, 5), KafkaError.UNKNOWN_TOPIC_OR_PART),
                         (TopicPartition(topic, 7, 3), KafkaError.UNKNOWN_TOPIC_OR_PART)):
            try:
                out = c.commit(offsets=[tp], asynchronous=False)
                err = out[0].error
            except KafkaException as e:
                err = e.args[0]
            assert err is not None and err.code() == want, (tp, err)
        out = c.commit(offsets=[TopicPartition(topic, 0, 0)], asynchronous=False)
        assert out[0].error is None, out
        committed = c.committed([TopicPartition(topic, 0)], timeout=30)
        assert committed[0].offset == 0, committed
    finally:
        c.close()
