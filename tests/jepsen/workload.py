"""The clients of the queue test: idempotent producers and consumers (assign
mode and group-subscribe mode), each a thread recording every operation in
the shared history.

A producer sends unique values (``p3-000123``) round robin over the
partitions at a paced rate: ``invoke`` before ``produce()``, then ``ok`` with
the offset from the delivery report, ``fail`` for an error that proves the
record was not written, ``info`` for anything else (a timeout, a fatal
idempotence error: it may or may not be stored). A fatal error ends that
producer instance; a new one (a new process name, as Jepsen does) goes on.
Consumers record each non-empty poll in order; group members commit the
offsets after each poll synchronously and record the outcome.
"""

from __future__ import annotations

import logging
import os
import random
import threading
import time
import uuid

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, Producer, TopicPartition

from .history import FAIL, INFO, INVOKE, OK, History

LOG = logging.getLogger("librdkafka")
# Errors after which the record was certainly not stored (librdkafka never
# sent it, or the broker refused it before appending). Anything else,
# timeouts above all, is indeterminate.
DEFINITE = {KafkaError._PURGE_QUEUE, KafkaError.MSG_SIZE_TOO_LARGE, KafkaError.INVALID_MSG_SIZE,
            KafkaError._UNKNOWN_PARTITION, KafkaError._UNKNOWN_TOPIC, KafkaError.INVALID_MSG,
            KafkaError.RECORD_LIST_TOO_LARGE, KafkaError.INVALID_REQUIRED_ACKS, KafkaError._INVALID_ARG}
# Longest a record may wait in librdkafka before it is reported (info).
MESSAGE_TIMEOUT_MS = 60_000
POLL_BATCH = 500


# A consumer's close() waits on its group coordinator inside librdkafka,
# where no Python signal (pytest's timeout) reaches the thread.
CLOSE_TIMEOUT_S = 30.0


def close_within(consumer: Consumer, what: str, timeout_s: float = CLOSE_TIMEOUT_S) -> None:
    """consumer.close() on a daemon thread, waited for at most timeout_s:
    a close that never returns is raised as an error of the run (naming
    `what`) instead of hanging the thread that called it."""
    done = threading.Event()

    def close() -> None:
        try:
            consumer.close()
        except (KafkaException, RuntimeError) as e:
            LOG.info("%s: close failed: %s", what, e)
        finally:
            done.set()

    threading.Thread(target=close, daemon=True, name=f"close-{what}").start()
    if not done.wait(timeout_s):
        raise RuntimeError(f"{what}: consumer close() did not return within {timeout_s:g} s")


class Client(threading.Thread):
    def __init__(self, name: str, bootstrap: str, topic: str, partitions: int, history: History):
        super().__init__(daemon=True, name=name)
        self.proc = name
        self.bootstrap = bootstrap
        self.topic = topic
        self.partitions = partitions
        self.history = history
        self.stopping = threading.Event()
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            self.body()
        except BaseException as e:  # reported by the runner, never swallowed
            self.error = e
            raise

    def stop(self) -> None:
        self.stopping.set()


class IdempotentProducer(Client):
    EXTRA_CONF: dict = {}  # added to the producer's configuration

    def __init__(self, idx: int, bootstrap: str, topic: str, partitions: int, history: History,
                 rate: float, max_records: int, rng: random.Random | None = None):
        super().__init__(f"producer-{idx}", bootstrap, topic, partitions, history)
        self.idx = idx
        self.rate = rate
        # Now and then the producer goes quiet for a few seconds (seeded):
        # a producer id with nothing in the log's recent tail is what
        # DeleteRecords and a restart can make replicas forget (item 1).
        self.rng = rng or random.Random(idx)
        self.max_records = max_records
        self.pending: dict[int, dict] = {}
        self.fatal = 0
        self.restarts = 0
        self.flush_timeout_s = MESSAGE_TIMEOUT_MS / 1000 + 10

    def _new_producer(self) -> Producer:
        conf = {
            "logger": LOG, "bootstrap.servers": self.bootstrap,
            "enable.idempotence": True, "acks": "all", "linger.ms": 5,
            "message.timeout.ms": MESSAGE_TIMEOUT_MS, "retry.backoff.ms": 100,
            "topic.metadata.refresh.interval.ms": 1000, **self.EXTRA_CONF,
        }
        # HELIX_JEPSEN_DEBUG=eos,msg (librdkafka debug contexts) sends the
        # producers' debug log to the "librdkafka" logger: to replay a finding.
        if os.environ.get("HELIX_JEPSEN_DEBUG"):
            conf["debug"] = os.environ["HELIX_JEPSEN_DEBUG"]
        return Producer(conf)

    def _delivered(self, inv: dict, err, msg) -> None:
        self.pending.pop(inv["index"], None)
        if err is None:
            self.history.complete(inv, OK, offset=msg.offset())
        else:
            definite = err.code() in DEFINITE and not err.fatal()
            self.history.complete(inv, FAIL if definite else INFO, error=str(err))
            if err.fatal():
                self._fatal(err)

    def body(self) -> None:
        producer = self._new_producer()
        start = time.monotonic()
        seq = 0
        next_quiet = start + self.rng.uniform(3.0, 10.0)
        while not self.stopping.is_set() and seq < self.max_records:
            if time.monotonic() >= next_quiet:
                quiet = self.rng.uniform(1.0, 5.0)
                until = time.monotonic() + quiet
                while time.monotonic() < until and not self.stopping.is_set():
                    self._serve(producer, 0.1)  # delivery reports still come in
                start += quiet  # the pace resumes where it stopped
                next_quiet = time.monotonic() + self.rng.uniform(3.0, 10.0)
            due = min(self.max_records, int((time.monotonic() - start) * self.rate) + 1)
            while seq < due and not self.stopping.is_set():
                value, p, record, extra = self.record(seq)
                seq += 1  # a value is never sent twice, whatever happens to it
                inv = self.history.add(self.proc, INVOKE, "send", value, partition=p, **extra)
                self.pending[inv["index"]] = inv
                try:
                    producer.produce(self.topic, partition=p, **record,
                                     on_delivery=lambda err, msg, inv=inv: self._delivered(inv, err, msg))
                except BufferError:
                    self.pending.pop(inv["index"])
                    self.history.complete(inv, FAIL, error="local queue full")
                    self._serve(producer, 0.05)
                except KafkaException as e:
                    self.pending.pop(inv["index"])
                    self.history.complete(inv, INFO, error=str(e))
                    if e.args[0].fatal():
                        self._fatal(e.args[0])
                if self.fatal:
                    producer = self._restart(producer)
            self._serve(producer, 0.01)
            if self.fatal:
                producer = self._restart(producer)
        self._serve(producer, self.flush_timeout_s, flush=True)
        self._abandon()

    def record(self, seq: int) -> tuple[str, int, dict, dict]:
        """The `seq`th send: its value in the history, its partition, what
        produce() is given beside them, and what the send op records
        beside its value (the compaction workload, compact_workload.py,
        sends keys and tombstones)."""
        value = f"p{self.idx}-{seq:06d}"
        return value, seq % self.partitions, {"value": value.encode()}, {}

    def _serve(self, producer: Producer, timeout: float, flush: bool = False) -> None:
        """poll() or flush(): delivery reports; a fatal error is counted
        (the caller replaces the producer), any other is raised."""
        try:
            producer.flush(timeout) if flush else producer.poll(timeout)
        except KafkaException as e:
            if not e.args[0].fatal():
                raise
            self._fatal(e.args[0])

    def _fatal(self, err) -> None:
        """Recorded once per producer instance (``producer-fatal``): an
        idempotent producer the brokers desynchronised."""
        if not self.fatal:
            self.history.add(self.proc, INFO, "fatal", str(err))
        self.fatal += 1

    def _restart(self, producer: Producer) -> Producer:
        """A fatal error ends this producer (what it still holds is
        reported, or abandoned as info); a new producer process, with a
        new producer id, takes its place, as a crashed client would."""
        try:
            producer.purge()
            producer.flush(5)
        except KafkaException:
            pass
        self._abandon()
        self.fatal = 0
        self.restarts += 1
        self.proc = f"producer-{self.idx}.{self.restarts}"
        return self._new_producer()

    def _abandon(self) -> None:
        for inv in list(self.pending.values()):
            self.history.complete(inv, INFO, error="never answered")
        self.pending.clear()


class PollingConsumer(Client):
    """Shared by both consumer kinds: polls, records what came back, and
    notes which partitions were (re)assigned during each poll.

    A record's place in the history is its *key*: here the partition number
    of the one topic; the transactional workload (txn_workload.py) reads
    several topics and overrides ``key``, ``topic_partition`` and
    ``topics``. Consumers read at ``isolation.level`` read_committed
    (librdkafka's default, said explicitly). ``EXTRA_CONF`` adds to the
    consumer's configuration; with ``enable.partition.eof`` an end of
    partition counts as read up to its offset (``at_end``)."""

    EXTRA_CONF: dict = {}

    def __init__(self, name: str, bootstrap: str, topic: str, partitions: int, history: History,
                 group: str, rng: random.Random):
        super().__init__(name, bootstrap, topic, partitions, history)
        self.group = group
        self.rng = rng
        # Set once the faults are over: the consumer only reads on (as
        # Jepsen's final polls do), so that "caught up" can be reached.
        self.draining = threading.Event()
        self.rebalanced: set[int] = set()
        self.position: dict[int, int] = {}  # partition -> next offset after what this client read
        self.consumer = Consumer({
            "logger": LOG, "bootstrap.servers": bootstrap, "group.id": group,
            "enable.auto.commit": False, "auto.offset.reset": "earliest",
            "session.timeout.ms": 10000, "heartbeat.interval.ms": 1000,
            "topic.metadata.refresh.interval.ms": 1000,
            "isolation.level": "read_committed", **self.EXTRA_CONF,
        })

    def key(self, topic: str, partition: int):
        return partition

    def topic_partition(self, key, offset: int) -> TopicPartition:
        return TopicPartition(self.topic, int(key), offset)

    def topics(self) -> list[str]:
        return [self.topic]

    def all_keys(self) -> list:
        return list(range(self.partitions))

    def poll_once(self) -> list[tuple[int, int]]:
        self.rebalanced = set()
        msgs = self.consumer.consume(num_messages=POLL_BATCH, timeout=0.5)
        records = [[self.key(m.topic(), m.partition()), m.offset(), m.value().decode()]
                   for m in msgs if m.error() is None]
        for m in msgs:
            if m.error() is not None and m.error().code() == KafkaError._PARTITION_EOF:
                self.at_end(self.key(m.topic(), m.partition()), m.offset())
        msgs = [m for m in msgs if m.error() is None or m.error().code() != KafkaError._PARTITION_EOF]
        # What librdkafka tells the application (an offset reset, say, and
        # why): kept in the history, so an anomaly shows its cause.
        errors = [f"[{self.key(m.topic(), m.partition())}] {m.error()}" for m in msgs if m.error() is not None]
        for e in errors:
            LOG.info("%s: consumer error %s", self.proc, e)
        extra = {"errors": errors} if errors else {}
        if records:
            self.history.add(self.proc, OK, "poll", records, rebalanced=sorted(self.rebalanced), **extra)
            for p, o, _ in records:
                self.position[p] = max(self.position.get(p, 0), o + 1)  # an EOF in the same batch may be past it
        elif self.rebalanced or errors:
            self.history.add(self.proc, OK, "poll", [], rebalanced=sorted(self.rebalanced), **extra)
        return records

    def caught_up(self, ends: dict[int, int]) -> bool:
        return all(self.position.get(p, 0) >= end for p, end in ends.items() if end > 0)

    def at_end(self, key, offset: int) -> None:
        """The consumer reached the end of `key`'s partition at `offset`
        (past any control record a read_committed reader never returns)."""
        self.position[key] = max(self.position.get(key, 0), offset)

    def body(self) -> None:
        try:
            self.begin()
            while not self.stopping.is_set():
                records = self.poll_once()
                self.after_poll(records)
        finally:
            close_within(self.consumer, self.proc)


class AssignConsumer(PollingConsumer):
    """Assigns every partition from the beginning; now and then (seeded)
    assigns again from the beginning, as Jepsen's assign ops do."""

    def __init__(self, idx: int, *args, reassign_p: float = 0.01):
        super().__init__(f"assign-{idx}", *args)
        self.reassign_p = reassign_p

    def begin(self) -> None:
        parts = self.all_keys()
        self.consumer.assign([self.topic_partition(k, OFFSET_BEGINNING) for k in parts])
        self.position = {}
        self.history.add(self.proc, OK, "assign", "from-beginning", partitions=parts)

    def after_poll(self, records) -> None:
        # Not while draining: a reassignment starts over from offset 0, and
        # in a long run (55,000 records a partition after 30 minutes, at
        # p = 0.01 a poll of at most 500) reading back to the end without
        # one is a matter of luck (11 s of the drain of the 30-minute run
        # of seed 1000).
        if not self.draining.is_set() and self.rng.random() < self.reassign_p:
            self.begin()


class GroupConsumer(PollingConsumer):
    """Subscribes with a group and commits after every poll (synchronously,
    the offsets after what it read). Assignment changes are recorded."""

    # group -> key -> highest acknowledged commit (shared by members)
    committed: dict[str, dict[int, int]] = {}
    # group -> key -> highest end of partition a member reached
    ended: dict[str, dict[int, int]] = {}

    def __init__(self, idx: int, *args):
        super().__init__(f"group-{idx}", *args)

    def _on_change(self, kind: str):
        def cb(consumer, tps) -> None:
            parts = sorted(self.key(tp.topic, tp.partition) for tp in tps)
            self.rebalanced.update(parts)
            for p in parts:
                self.position.pop(p, None)
            self.history.add(self.proc, OK, "rebalance", kind, partitions=parts, group=self.group)
        return cb

    def begin(self) -> None:
        self.consumer.subscribe(self.topics(), on_assign=self._on_change("assigned"),
                                on_revoke=self._on_change("revoked"), on_lost=self._on_change("lost"))
        self.history.add(self.proc, OK, "subscribe", ",".join(self.topics()), partitions=None, group=self.group)

    def caught_up(self, ends: dict[int, int]) -> bool:
        """The group has committed every partition's end (members share
        the partitions out, so this is the group's progress, not its own)."""
        done = GroupConsumer.committed.get(self.group, {})
        ended = GroupConsumer.ended.get(self.group, {})
        return all(max(done.get(p, 0), ended.get(p, 0)) >= end for p, end in ends.items())

    def at_end(self, key, offset: int) -> None:
        super().at_end(key, offset)
        mine = GroupConsumer.ended.setdefault(self.group, {})
        mine[key] = max(mine.get(key, 0), offset)

    def after_poll(self, records) -> None:
        if not records:
            return
        offsets: dict[str, int] = {}
        for p, o, _ in records:
            offsets[str(p)] = o + 1
        inv = self.history.add(self.proc, INVOKE, "commit", offsets, group=self.group)
        try:
            done = self.consumer.commit(offsets=[self.topic_partition(k, o) for k, o in offsets.items()],
                                        asynchronous=False)
        except KafkaException as e:
            self.history.complete(inv, INFO, error=str(e))
            return
        ok = {str(self.key(tp.topic, tp.partition)): tp.offset for tp in done if tp.error is None}
        mine = GroupConsumer.committed.setdefault(self.group, {})
        for tp in done:
            if tp.error is None:
                k = self.key(tp.topic, tp.partition)
                mine[k] = max(mine.get(k, 0), tp.offset)
        if ok:
            self.history.complete(inv, OK, ok)
        if len(ok) < len(offsets):
            self.history.complete(inv, FAIL, {p: o for p, o in offsets.items() if p not in ok})


def group_name() -> str:
    return f"jepsen-{uuid.uuid4().hex[:8]}"
