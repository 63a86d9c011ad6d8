"""How the transactional workload (tests/jepsen/txn_workload.py) records a
transaction's outcome and recovers, driven with a scripted stand-in for
confluent-kafka's Producer (no broker): a transaction is ``fail`` only when
commit_transaction was never called, ``info`` when it was called and did
not return, and a producer in a state the client cannot leave is replaced
by a new instance with the same transactional.id. The copier
(txn_copier.py) sends its consumer's offsets inside each transaction and
goes back to the committed offsets after one that did not commit."""

from __future__ import annotations

import random

from confluent_kafka import OFFSET_BEGINNING, KafkaError, KafkaException, TopicPartition

from jepsen import txn_workload
from jepsen.history import FAIL, INFO, OK, History
from jepsen.txn_copier import TxnCopier
from jepsen.txn_workload import Keyspace, TxnProducer


class Msg:
    def __init__(self, offset: int):
        self._offset = offset

    def offset(self) -> int:
        return self._offset


class ScriptedProducer:
    """Answers each call from `script` (call name -> list of errors to
    raise in turn, None for success); records what was called."""

    def __init__(self, script: dict | None = None, delivery_error: KafkaError | None = None):
        self.script = {k: list(v) for k, v in (script or {}).items()}
        self.calls: list[str] = []
        self.pending: list = []
        self.next_offset = 0
        self.delivery_error = delivery_error

    def _call(self, name: str) -> None:
        self.calls.append(name)
        todo = self.script.get(name)
        err = todo.pop(0) if todo else None
        if err is not None:
            raise KafkaException(err)

    def init_transactions(self, timeout):
        self._call("init")

    def begin_transaction(self):
        self._call("begin")

    def produce(self, topic, value, partition, on_delivery):
        self.pending.append(on_delivery)

    def flush(self, timeout=None):
        for cb in self.pending:
            cb(self.delivery_error, None if self.delivery_error else Msg(self.next_offset))
            self.next_offset += 1
        self.pending = []
        return 0

    def commit_transaction(self, timeout):
        self._call("commit")

    def abort_transaction(self, timeout):
        self._call("abort")

    def purge(self):
        self.calls.append("purge")


def producer_with(instances: list[ScriptedProducer], abort_p: float = 0.0) -> tuple[TxnProducer, History]:
    h = History()
    p = TxnProducer(0, "unused:9092", Keyspace({"a": 2, "b": 1}), h, "tx-0", rate=1000.0, max_txns=1,
                    rng=random.Random(1), abort_p=abort_p)
    todo = list(instances)
    p._instance = lambda: todo.pop(0)
    return p, h


def txn_completion(h: History) -> dict:
    [op] = [op for op in h.ops if op["f"] == "txn" and op["type"] != "invoke"]
    return op


def retriable(code=KafkaError._TIMED_OUT) -> KafkaError:
    return KafkaError(code, "scripted", retriable=True)


def test_an_acknowledged_commit_is_ok_with_the_offsets():
    p, h = producer_with([ScriptedProducer()])
    p.body()
    op = txn_completion(h)
    assert op["type"] == OK and op["value"]["outcome"] == "committed", op
    assert op["value"]["offsets"] == list(range(len(op["value"]["writes"])))
    assert 2 <= len({k for k, _ in op["value"]["writes"]}) <= 3


def test_an_intended_abort_is_fail():
    inst = ScriptedProducer()
    p, h = producer_with([inst], abort_p=1.0)
    p.body()
    assert txn_completion(h)["type"] == FAIL and "commit" not in inst.calls and "abort" in inst.calls


def test_a_commit_retried_after_a_retriable_error_that_then_succeeds_is_ok():
    inst = ScriptedProducer({"commit": [retriable()]})
    p, h = producer_with([inst])
    p.body()
    assert txn_completion(h)["type"] == OK and inst.calls.count("commit") == 2


def test_a_fatal_commit_is_indeterminate_and_the_instance_is_replaced():
    first = ScriptedProducer({"commit": [KafkaError(KafkaError._FENCED, "fenced", fatal=True)]})
    second = ScriptedProducer()
    p, h = producer_with([first, second])
    p.body()
    op = txn_completion(h)
    assert op["type"] == INFO and op["value"]["outcome"] == "indeterminate", op
    assert [o["process"] for o in h.ops if o["f"] == "init"] == ["txn-0", "txn-0", "txn-0.1", "txn-0.1"]
    assert any(o["f"] == "replace" for o in h.ops) and second.calls == ["init"]


def test_an_abortable_commit_error_aborts_and_stays_indeterminate():
    inst = ScriptedProducer({"commit": [KafkaError(KafkaError._STATE, "abortable", txn_requires_abort=True)]})
    p, h = producer_with([inst])
    p.body()
    assert txn_completion(h)["type"] == INFO and inst.calls[-1] == "abort"
    assert not any(o["f"] == "replace" for o in h.ops)


def test_a_failed_send_aborts_and_is_fail():
    inst = ScriptedProducer(delivery_error=KafkaError(KafkaError._MSG_TIMED_OUT, "timed out"))
    p, h = producer_with([inst])
    p.body()
    op = txn_completion(h)
    assert op["type"] == FAIL and op["value"]["outcome"] == "aborted after a failed send", op
    assert "commit" not in inst.calls and inst.calls[-1] == "abort"


def test_an_abort_that_cannot_complete_replaces_the_instance_and_is_fail():
    fatal = KafkaError(KafkaError._FENCED, "fenced", fatal=True)
    first = ScriptedProducer({"abort": [fatal]})
    p, h = producer_with([first, ScriptedProducer()], abort_p=1.0)
    p.body()
    assert txn_completion(h)["type"] == FAIL
    assert any(o["f"] == "replace" for o in h.ops)


def test_init_is_retried_while_the_coordinator_is_away(monkeypatch):
    monkeypatch.setattr(txn_workload, "INIT_RETRY_S", 0.0)
    inst = ScriptedProducer({"init": [retriable(KafkaError.COORDINATOR_NOT_AVAILABLE)]})
    p, h = producer_with([inst])
    p.body()
    assert [o["type"] for o in h.ops if o["f"] == "init"] == ["invoke", FAIL, "invoke", OK]
    assert txn_completion(h)["type"] == OK


class Message:
    def __init__(self, topic: str, partition: int, offset: int, value: str):
        self._t, self._p, self._o, self._v = topic, partition, offset, value

    def error(self):
        return None

    def topic(self):
        return self._t

    def partition(self):
        return self._p

    def offset(self):
        return self._o

    def value(self):
        return self._v.encode()


class ScriptedConsumer:
    """Returns `batches` from consume() in turn, then stops the copier."""

    def __init__(self, copier, batches: list[list[Message]]):
        self.copier = copier
        self.batches = list(batches)
        self.calls: list = []

    def consume(self, n, timeout):
        if not self.batches:
            self.copier.stop()
            return []
        return self.batches.pop(0)

    def assignment(self):
        return [TopicPartition("b", 0)]

    def position(self, tps):
        self.calls.append("position")
        return [TopicPartition("b", 0, 2)]

    def consumer_group_metadata(self):
        return "metadata"

    def committed(self, tps, timeout=None):
        return [TopicPartition("b", 0, -1001)]  # nothing committed yet

    def seek(self, tp):
        self.calls.append(("seek", tp.partition, tp.offset))

    def close(self):
        self.calls.append("close")


class CopyingProducer(ScriptedProducer):
    def send_offsets_to_transaction(self, positions, metadata, timeout):
        self.calls.append("send_offsets")


def copier_with(batches, abort_p: float) -> tuple[TxnCopier, History, CopyingProducer, ScriptedConsumer]:
    h = History()
    c = TxnCopier("unused:9092", Keyspace({"a": 2, "b": 1}), h, "tx-copier", "b", "a", "g-copier",
                  random.Random(1))
    c.abort_p = abort_p
    producer = CopyingProducer()
    consumer = ScriptedConsumer(c, batches)
    c._instance = lambda: producer
    c._consumer = lambda: consumer
    return c, h, producer, consumer


def test_the_copier_commits_copies_with_the_consumers_offsets():
    c, h, producer, consumer = copier_with([[Message("b", 0, 0, "t1-00001-0"), Message("b", 0, 1, "t2-00001-1")]],
                                           abort_p=0.0)
    c.body()
    op = txn_completion(h)
    assert op["type"] == OK and op["value"]["copies"] == [["t1-00001-0", "c00000-t1-00001-0"],
                                                          ["t2-00001-1", "c00000-t2-00001-1"]], op
    assert [k for k, _ in op["value"]["writes"]] == ["a/0", "a/0"]
    assert producer.calls == ["init", "begin", "send_offsets", "commit"], producer.calls
    assert not any(o["f"] == "assign" for o in h.ops)


def test_an_aborted_copy_rewinds_the_consumer_to_the_committed_offsets():
    c, h, producer, consumer = copier_with([[Message("b", 0, 0, "t1-00001-0")]], abort_p=1.0)
    c.body()
    assert txn_completion(h)["type"] == FAIL and producer.calls[-1] == "abort"
    assert ("seek", 0, OFFSET_BEGINNING) in consumer.calls
    assert [o["value"] for o in h.ops if o["f"] == "assign"] == ["rewind"]
