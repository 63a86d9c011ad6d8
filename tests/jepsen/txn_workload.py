"""The clients of the transactional workload (``run.py --workload txn``):
transactional producers and read_committed consumers over several topics,
each a thread recording every operation in the shared history.

Records are placed by *key*, ``"<topic>/<partition>"``, so one history
spans several topics. A producer (``transactional.id`` of its own) runs one
transaction at a time: it writes unique values (``t1-00042-0``) to 2 or 3
keys, then commits or, on a seeded draw (1 in 4 by default), aborts. One
``txn`` operation per transaction: the invocation holds the writes and the
intended end; the completion holds each write's offset (or error) and the
outcome:

- ``ok``: ``commit_transaction`` returned: committed.
- ``fail``: ``commit_transaction`` was never called (an intended abort, or a
  send that failed first): nothing can ever commit it.
- ``info``: ``commit_transaction`` was called and did not return success
  (an error, a timeout, a fence): indeterminate.

A producer in an abortable error state aborts; one with a fatal error or in
a state the client will not leave (fenced, a timed-out abort) is replaced
by a new instance with the same ``transactional.id``, whose
``init_transactions`` fences the old one and aborts what it left open: what
the client documentation asks, and what a restarted application does.
"""

from __future__ import annotations

import random
import time

from confluent_kafka import KafkaException, Producer, TopicPartition

from .history import FAIL, INFO, INVOKE, OK, History
from .workload import LOG, AssignConsumer, Client, GroupConsumer

# librdkafka requires message.timeout.ms <= transaction.timeout.ms. Kept
# short so a transaction left open by a producer that lost its coordinator
# is aborted (and stops holding back the last stable offset) within a run.
TRANSACTION_TIMEOUT_MS = 20_000
MESSAGE_TIMEOUT_MS = 15_000
# Longest any one transactional call (init, flush, commit, abort) waits.
CALL_TIMEOUT_S = 20.0
ABORT_P = 0.25
# Pause between init_transactions attempts while no coordinator answers.
INIT_RETRY_S = 0.5


def key_of(topic: str, partition: int) -> str:
    return f"{topic}/{partition}"


def split_key(key: str) -> tuple[str, int]:
    topic, partition = key.rsplit("/", 1)
    return topic, int(partition)


class Keyspace:
    """The topics of a run and their partition counts: every key."""

    def __init__(self, topics: dict[str, int]):
        self.topics = dict(topics)

    def keys(self) -> list[str]:
        return [key_of(t, p) for t, n in self.topics.items() for p in range(n)]


class Replace(Exception):
    """This producer instance cannot go on (fatal, fenced, stuck): the
    caller replaces it."""


class TxnProducer(Client):
    def __init__(self, idx: int, bootstrap: str, keyspace: Keyspace, history: History, transactional_id: str,
                 rate: float, max_txns: int, rng: random.Random, abort_p: float = ABORT_P):
        super().__init__(f"txn-{idx}", bootstrap, "", 0, history)
        self.base = f"txn-{idx}"  # process name; a replacement adds .N
        self.idx = idx
        self.keys = keyspace.keys()
        self.transactional_id = transactional_id
        self.rate = rate  # transactions/s
        self.max_txns = max_txns
        self.rng = rng
        self.abort_p = abort_p
        self.restarts = 0
        # The runner joins a producer within this: a transaction in flight
        # ends within a few bounded calls.
        self.flush_timeout_s = 4 * CALL_TIMEOUT_S

    def _instance(self) -> Producer:
        return Producer({
            "logger": LOG, "bootstrap.servers": self.bootstrap,
            "transactional.id": self.transactional_id, "enable.idempotence": True, "acks": "all",
            "linger.ms": 5, "transaction.timeout.ms": TRANSACTION_TIMEOUT_MS,
            "message.timeout.ms": MESSAGE_TIMEOUT_MS, "retry.backoff.ms": 100,
            "topic.metadata.refresh.interval.ms": 1000,
        })

    def _replace(self, old: Producer) -> Producer:
        """A new instance (a new process name, as Jepsen does) in place of
        one that cannot go on; what the old one holds is dropped."""
        try:
            old.purge()
            old.flush(0)
        except KafkaException:
            pass
        self.restarts += 1
        self.proc = f"{self.base}.{self.restarts}"
        return self._instance()

    def _init(self, producer: Producer) -> Producer:
        """init_transactions, retried while the coordinator is away; an
        instance with a fatal error is replaced. Raises Replace once the
        run is stopping."""
        while True:
            inv = self.history.add(self.proc, INVOKE, "init", self.transactional_id)
            try:
                producer.init_transactions(CALL_TIMEOUT_S)
                self.history.complete(inv, OK)
                return producer
            except KafkaException as e:
                err = e.args[0]
                self.history.complete(inv, INFO if err.fatal() else FAIL, error=str(err))
                if self.stopping.is_set():
                    raise Replace(f"init_transactions: {err}") from e
                if err.fatal():
                    producer = self._replace(producer)
                else:
                    time.sleep(INIT_RETRY_S)

    def body(self) -> None:
        try:
            producer = self._init(self._instance())
            start = time.monotonic()
            n = 0
            while n < self.max_txns and not self.stopping.wait(max(0.0, start + n / self.rate - time.monotonic())):
                try:
                    self.transaction(producer, n)
                except Replace as why:
                    self.history.add(self.proc, INFO, "replace", str(why))
                    producer = self._init(self._replace(producer))
                n += 1
        except Replace:
            return  # stopping while no coordinator answered: nothing is open

    def transaction(self, producer: Producer, n: int) -> str:
        """One transaction of unique values to 2 or 3 partitions."""
        txn_id = f"t{self.idx}-{n:05d}"
        keys = self.rng.sample(self.keys, self.rng.choice((2, 3)))
        writes = [[k, f"{txn_id}-{i}"] for i, k in enumerate(k for k in keys for _ in range(self.rng.choice((1, 2))))]
        return self.run_txn(producer, txn_id, writes)

    def run_txn(self, producer: Producer, txn_id: str, writes: list[list], before_end=None, **fields) -> str:
        """One transaction writing `writes` ([key, value]), recorded as one
        ``txn`` op (see the module's doc for the outcomes; `fields` go into
        its value), committed or, on the seeded draw, aborted; `before_end`
        (sending a consumer's offsets) runs inside it once every write was
        acknowledged. Returns the outcome's type; raises Replace when this
        instance must go."""
        end = "abort" if self.rng.random() < self.abort_p else "commit"
        inv = self.history.add(self.proc, INVOKE, "txn", {"id": txn_id, "writes": writes, "end": end, **fields})
        offsets: list = [None] * len(writes)
        errors: list[str] = []

        def delivered(i: int):
            def cb(err, msg) -> None:
                if err is None:
                    offsets[i] = msg.offset()
                else:
                    errors.append(f"{writes[i][1]}: {err}")
            return cb

        committing = False

        def done(type_: str, outcome: str, **extra) -> None:
            self.history.complete(inv, type_, {"id": txn_id, "writes": writes, "end": end, "offsets": list(offsets),
                                               "outcome": outcome, "errors": list(errors), **fields, **extra})
            return type_

        try:
            producer.begin_transaction()
            for i, (k, v) in enumerate(writes):
                topic, p = split_key(k)
                producer.produce(topic, value=v.encode(), partition=p, on_delivery=delivered(i))
            left = producer.flush(CALL_TIMEOUT_S)
            if left or errors:
                errors.append(f"{left} sends unanswered" if left else "a send failed")
                self._abort(producer, errors)
                return done(FAIL, "aborted after a failed send")
            if before_end is not None:
                before_end()
            if end == "abort":
                self._abort(producer, errors)
                return done(FAIL, "aborted")
            committing = True
            self._commit(producer, errors)
            return done(OK, "committed")
        except (KafkaException, BufferError, Replace) as e:
            errors.append(repr(e))
            # Never committed unless commit_transaction was called.
            type_ = done(INFO if committing else FAIL, "indeterminate" if committing else "aborted")
            # An abortable error: abort (the outcome of a commit stays
            # indeterminate; an abort after a commit was sent may refuse).
            if isinstance(e, KafkaException) and e.args[0].txn_requires_abort():
                try:
                    self._abort(producer, errors)
                    return type_
                except Replace:
                    pass
            raise Replace(errors[-1]) from e

    def _commit(self, producer: Producer, errors: list[str]) -> None:
        """commit_transaction, retried while the client says the error is
        retriable (the commit may then still go through); anything else
        propagates (indeterminate)."""
        deadline = time.monotonic() + 2 * CALL_TIMEOUT_S
        while True:
            try:
                producer.commit_transaction(CALL_TIMEOUT_S)
                return
            except KafkaException as e:
                err = e.args[0]
                errors.append(f"commit: {err}")
                if not err.retriable() or err.fatal() or time.monotonic() > deadline:
                    raise

    def _abort(self, producer: Producer, errors: list[str]) -> None:
        """abort_transaction, retried while retriable; an abort that does
        not complete leaves the instance unusable (Replace)."""
        deadline = time.monotonic() + 2 * CALL_TIMEOUT_S
        while True:
            try:
                producer.abort_transaction(CALL_TIMEOUT_S)
                return
            except KafkaException as e:
                err = e.args[0]
                errors.append(f"abort: {err}")
                if not err.retriable() or err.fatal() or time.monotonic() > deadline:
                    raise Replace(f"abort: {err}") from e


class KeyedConsumer:
    """Mixed into the queue workload's consumers: records are placed by
    ``topic/partition`` over every topic of the keyspace, read at
    read_committed, and the end of each partition (librdkafka's partition
    EOF, whose offset is past any control or aborted record) counts as
    having read up to it: a read_committed reader never returns the marker
    that ends the log."""

    EXTRA_CONF = {"enable.partition.eof": True, "isolation.level": "read_committed"}

    def key(self, topic: str, partition: int) -> str:
        return key_of(topic, partition)

    def topic_partition(self, key, offset: int) -> TopicPartition:
        topic, p = split_key(key)
        return TopicPartition(topic, p, offset)

    def topics(self) -> list[str]:
        return list(self.keyspace.topics)

    def all_keys(self) -> list[str]:
        return self.keyspace.keys()


class TxnAssignConsumer(KeyedConsumer, AssignConsumer):
    def __init__(self, idx: int, bootstrap: str, keyspace: Keyspace, history: History, group: str,
                 rng: random.Random):
        self.keyspace = keyspace
        super().__init__(idx, bootstrap, "", 0, history, group, rng)


class TxnGroupConsumer(KeyedConsumer, GroupConsumer):
    def __init__(self, idx: int, bootstrap: str, keyspace: Keyspace, history: History, group: str,
                 rng: random.Random):
        self.keyspace = keyspace
        super().__init__(idx, bootstrap, "", 0, history, group, rng)
