"""Exactly-once copying for the transactional workload: a
consume-transform-produce client (``copier``), the use
``send_offsets_to_transaction`` exists for.

It consumes one topic at read_committed in a group of its own and, for
each poll, runs one transaction (txn_workload.TxnProducer.run_txn) that
writes a copy of every record to the other topic (``c00012-t1-00042-0``:
unique per attempt) and sends the consumer's positions as the group's
offsets, then commits or, on the seeded draw, aborts. Its ``txn`` op names
each copy's source (``copies``: [source value, copy]). After any outcome
but ``ok`` the consumer goes back to the group's committed offsets (an
``assign`` op ``rewind``), so the same records are copied again by a later
transaction: with offsets committed atomically with the copies, each
source value has exactly one committed copy (txn_checker's
``duplicate-copy``).

It needs AddOffsetsToTxn (API key 25) and TxnOffsetCommit (28): the
runner starts it only when the cluster advertises both, and says so when
it does not.
"""

from __future__ import annotations

import random

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaException, Producer

from .history import INFO, OK, History
from .txn_workload import CALL_TIMEOUT_S, Keyspace, Replace, TxnProducer, key_of, split_key
from .workload import LOG, close_within

# Records copied by one transaction at most.
COPY_BATCH = 50
# The Kafka APIs behind send_offsets_to_transaction.
API_ADD_OFFSETS_TO_TXN, API_TXN_OFFSET_COMMIT = 25, 28


class TxnCopier(TxnProducer):
    def __init__(self, bootstrap: str, keyspace: Keyspace, history: History, transactional_id: str,
                 source: str, dest: str, group: str, rng: random.Random):
        super().__init__(0, bootstrap, keyspace, history, transactional_id, rate=1.0, max_txns=0, rng=rng)
        self.name = self.proc = self.base = "copier"
        self.source = source
        self.dest = dest
        self.dest_partitions = keyspace.topics[dest]
        self.group = group

    def _consumer(self) -> Consumer:
        c = Consumer({
            "logger": LOG, "bootstrap.servers": self.bootstrap, "group.id": self.group,
            "isolation.level": "read_committed", "enable.auto.commit": False,
            "auto.offset.reset": "earliest", "session.timeout.ms": 10000, "heartbeat.interval.ms": 1000,
            "topic.metadata.refresh.interval.ms": 1000,
        })

        def changed(kind: str):
            def cb(_consumer, tps) -> None:
                self.history.add(self.proc, OK, "rebalance", kind,
                                 partitions=sorted(key_of(tp.topic, tp.partition) for tp in tps), group=self.group)
            return cb

        c.subscribe([self.source], on_assign=changed("assigned"), on_revoke=changed("revoked"),
                    on_lost=changed("lost"))
        return c

    def body(self) -> None:
        consumer = self._consumer()
        try:
            producer = self._init(self._instance())
            n = 0
            while not self.stopping.is_set():
                msgs = [m for m in consumer.consume(COPY_BATCH, 0.5) if m.error() is None]
                if not msgs:
                    continue
                producer, type_ = self.copy(producer, consumer, msgs, n)
                if type_ != OK:
                    self.rewind(consumer)
                n += 1
        except Replace:
            return  # stopping while no coordinator answered: nothing is open
        finally:
            close_within(consumer, self.proc)

    def copy(self, producer: Producer, consumer: Consumer, msgs: list, n: int) -> tuple[Producer, str]:
        """One transaction copying `msgs`; returns the producer to go on
        with (a replacement after Replace) and the outcome's type."""
        records = [[key_of(m.topic(), m.partition()), m.offset(), m.value().decode()] for m in msgs]
        self.history.add(self.proc, OK, "poll", records)
        txn_id = f"c{n:05d}"
        copies = [[v, f"{txn_id}-{v}"] for _, _, v in records]
        writes = [[key_of(self.dest, split_key(k)[1] % self.dest_partitions), c]
                  for (k, _, _), (_, c) in zip(records, copies)]

        def send_offsets() -> None:
            producer.send_offsets_to_transaction(consumer.position(consumer.assignment()),
                                                 consumer.consumer_group_metadata(), CALL_TIMEOUT_S)

        try:
            return producer, self.run_txn(producer, txn_id, writes, before_end=send_offsets, copies=copies)
        except Replace as why:
            self.history.add(self.proc, INFO, "replace", str(why))
            return self._init(self._replace(producer)), INFO

    def rewind(self, consumer: Consumer) -> None:
        """Back to the group's committed offsets (the beginning where none
        is committed): what was read since is copied again."""
        assigned = consumer.assignment()
        try:
            committed = consumer.committed(assigned, timeout=CALL_TIMEOUT_S)
            for tp in committed:
                tp.offset = tp.offset if tp.offset >= 0 else OFFSET_BEGINNING
                consumer.seek(tp)
        except KafkaException as e:
            # Records read since are then never copied: no check counts a
            # missing copy, only a second one.
            self.history.add(self.proc, INFO, "rewind", str(e))
            return
        self.history.add(self.proc, OK, "assign", "rewind",
                         partitions=sorted(key_of(tp.topic, tp.partition) for tp in assigned))


def supported(versions: dict[int, tuple[int, int]]) -> bool:
    """Whether an ApiVersions answer offers what the copier needs."""
    return API_ADD_OFFSETS_TO_TXN in versions and API_TXN_OFFSET_COMMIT in versions
