#!/usr/bin/env python3
"""Transactional throughput and read_committed end-to-end latency, 3 nodes,
Helix or Apache Kafka 3.9.1 (issue 32's figures).

    scripts/txn_bench.py helix|kafka [--out DIR] [--transactions N] [--producers P]

Starts a fresh 3-node cluster as scripts/bench_cluster.py does, creates
`bench` (6 partitions, RF 3) and runs P transactional producers
(confluent-kafka, distinct transactional ids), each committing N
transactions of 100 records of 1 KiB spread over the six partitions, while
one read_committed consumer reads `bench` from the start. Reports records/s
and transactions/s over the producers' wall time, and the consumer's
end-to-end latency (receipt minus the record's create time, which the
producing client stamps) as p50 / p99 / max. The producers' time starts
after `init_transactions` (Kafka creates `__transaction_state` then). Prints one JSON line and stops
the cluster.
"""
import argparse
import json
import pathlib
import threading
import time

from confluent_kafka import Consumer, Producer

from bench_cluster import Helix, Kafka, create_topic

RECORDS_PER_TXN = 100
VALUE = b"x" * 1024


def produce(bootstrap: str, tid: str, transactions: int, done: list, spans: list) -> None:
    p = Producer({"bootstrap.servers": bootstrap, "transactional.id": tid, "linger.ms": 5})
    # Kafka creates __transaction_state on the first InitProducerId: not
    # part of the figure.
    p.init_transactions(120)
    started = time.monotonic()
    n = 0
    for t in range(transactions):
        p.begin_transaction()
        for i in range(RECORDS_PER_TXN):
            p.produce("bench", VALUE, partition=(t * RECORDS_PER_TXN + i) % 6)
            n += 1
        p.commit_transaction(60)
    spans.append((started, time.monotonic()))
    done.append(n)


def consume(bootstrap: str, expected: int, latencies: list, stop: threading.Event) -> None:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"txn-bench-{time.time()}",
                  "auto.offset.reset": "earliest", "enable.auto.commit": False,
                  "isolation.level": "read_committed", "fetch.wait.max.ms": 10})
    c.subscribe(["bench"])
    try:
        while len(latencies) < expected and not stop.is_set():
            for m in c.consume(num_messages=1000, timeout=0.2):
                if m.error() is None:
                    latencies.append(time.time() * 1000 - m.timestamp()[1])
    finally:
        c.close()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("system", choices=["helix", "kafka"])
    ap.add_argument("--out", default="/tmp/txn-bench")
    ap.add_argument("--transactions", type=int, default=500)
    ap.add_argument("--producers", type=int, default=1)
    a = ap.parse_args()
    out = pathlib.Path(a.out) / a.system
    out.mkdir(parents=True, exist_ok=True)
    system = Helix(out, []) if a.system == "helix" else Kafka(out)
    bootstrap = ",".join(f"127.0.0.1:{p}" for p in system.ports)
    system.start()
    try:
        create_topic(bootstrap)
        expected = a.producers * a.transactions * RECORDS_PER_TXN
        latencies: list = []
        stop = threading.Event()
        reader = threading.Thread(target=consume, args=(bootstrap, expected, latencies, stop))
        reader.start()
        done: list = []
        spans: list = []
        writers = [threading.Thread(target=produce,
                                    args=(bootstrap, f"bench-{i}", a.transactions, done, spans))
                   for i in range(a.producers)]
        for w in writers:
            w.start()
        for w in writers:
            w.join()
        seconds = max(e for _, e in spans) - min(s for s, _ in spans)
        reader.join(timeout=120)
        stop.set()
        lat = sorted(latencies)
        pick = lambda q: round(lat[min(len(lat) - 1, int(q * len(lat)))], 1) if lat else None
        print(json.dumps({
            "system": a.system, "producers": a.producers, "transactions": a.transactions * a.producers,
            "records_per_s": round(sum(done) / seconds), "txn_per_s": round(len(done) and
                                                                         a.transactions * a.producers / seconds, 1),
            "read": len(lat), "e2e_ms": {"p50": pick(0.5), "p99": pick(0.99), "max": pick(1.0)},
        }))
    finally:
        system.stop()


if __name__ == "__main__":
    main()
