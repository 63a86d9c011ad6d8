"""A client never stays stuck on a node that is cut off (issue 29, item 3).

A fresh idempotent librdkafka producer (acks=all) starts 0.1, 0.5, 1.5 and
2.5 s after the leader of a partition is cut off from its peers, in both
of the fault proxy's modes (``blackhole``: connections stay open and move
nothing; ``refuse``: connections break and new ones are refused). Its
bootstrap lists every node, the cut-off one included, so its first
questions may well go there. Every record must be acknowledged, and none
may wait longer than the stall bound: the producer's own delivery timeout,
set to a few election timeouts plus librdkafka's one-second metadata scan.
A record that stalls longer fails its delivery, which fails the test; how
long records actually waited is printed as a figure, never asserted.

The schedule is drawn from a seed (printed; replay with
HELIX_AVAILABILITY_SEED): the order of the trials, a jitter added to each
start delay, the order of the bootstrap list. HELIX_AVAILABILITY_ROUNDS
runs the whole set of trials that many times (default 1);
HELIX_AVAILABILITY_DELAYS replaces the start delays (comma-separated
seconds). HELIX_AVAILABILITY_DEBUG=1 writes each trial's librdkafka debug
log (broker, topic, metadata, msg, eos, protocol) and the cut's wall time
beside the node logs: trialN.log, trialN.meta.
"""

from __future__ import annotations

import logging
import os
import random
import threading
import time

import pytest
from confluent_kafka import Producer

import clients
import harness
from cluster_harness import HelixCluster
from cluster_load import Acked, LoadResult, read_all, verify_exactly_once_in_order
from test_cluster_faults import FAST, create_topic, leader_of, report, wait_in_sync

pytestmark = [pytest.mark.cluster, pytest.mark.managed,
              pytest.mark.skipif(harness.external_bootstrap() is not None
                                 or os.environ.get("HELIX_TEST_KAFKA_LIBS") is not None,
                                 reason="cluster tests start their own Helix nodes")]

PARTITIONS = 3
DELAYS_S = tuple(float(d) for d in os.environ.get("HELIX_AVAILABILITY_DELAYS", "0.1,0.5,1.5,2.5").split(","))
MODES = ("blackhole", "refuse")
ROUNDS = int(os.environ.get("HELIX_AVAILABILITY_ROUNDS", "1"))
# The longest election timeout is 20 ticks of 50 ms (1 s). A record may wait
# for: the old leader to notice it is cut off (one election timeout), the
# majority to elect (one more), the client's metadata round and its retry
# back-off, and librdkafka's one-second metadata scan when an answer came
# from a node that knew no better. Beyond this the client is stuck.
STALL_BOUND_MS = 4000
RECORDS_PER_TRIAL = 30
RECORD_INTERVAL_S = 0.05
# Largest random extra delay added to each trial's start (seeded).
JITTER_S = 0.2


def _seed() -> int:
    raw = os.environ.get("HELIX_AVAILABILITY_SEED")
    return int(raw) if raw else random.SystemRandom().randrange(1 << 32)


def trial_log(workdir, n: int, cut: int, cut_at: float, delay: float) -> logging.Logger | None:
    """With HELIX_AVAILABILITY_DEBUG set: a logger writing trial `n`'s
    librdkafka debug lines to workdir/trialN.log (wall-clock times, to read
    beside the node logs), and the cut to workdir/trialN.meta."""
    if not os.environ.get("HELIX_AVAILABILITY_DEBUG"):
        return None
    log = logging.getLogger(f"availability.trial{n}")
    log.setLevel(logging.DEBUG)
    log.propagate = False
    handler = logging.FileHandler(workdir / f"trial{n}.log")
    handler.setFormatter(logging.Formatter("%(created).3f %(message)s"))
    log.addHandler(handler)
    cut_wall = time.time() - (time.monotonic() - cut_at)
    (workdir / f"trial{n}.meta").write_text(f"cut={cut} cut_at_wall={cut_wall:.3f} delay={delay:.3f}\n")
    return log


class Trial:
    """One fresh producer writing RECORDS_PER_TRIAL records, paced, and
    what became of each."""

    def __init__(self, bootstrap: str, topic: str, first_seq: int, debug_log: logging.Logger | None = None):
        self.topic = topic
        self.first_seq = first_seq
        self.result = LoadResult()
        self.sent_at: dict[int, float] = {}
        self.stalls: list[float] = []
        self.lock = threading.Lock()
        self.producer = Producer({
            **clients.RDKAFKA, "bootstrap.servers": bootstrap,
            "enable.idempotence": True, "acks": "all", "linger.ms": 2,
            "message.timeout.ms": STALL_BOUND_MS, "retry.backoff.ms": 50,
            "topic.metadata.refresh.interval.ms": 1000,
            **({"debug": "broker,topic,metadata,msg,eos,protocol", "logger": debug_log} if debug_log else {}),
        })

    def _delivered(self, err, msg) -> None:
        seq = int(msg.value())
        now = time.monotonic()
        with self.lock:
            self.stalls.append(now - self.sent_at[seq])
            if err is not None:
                self.result.errors.append(f"seq {seq}: {err}")
            else:
                self.result.acked[seq] = Acked(msg.partition(), msg.offset(), now)

    def run(self) -> None:
        for i in range(RECORDS_PER_TRIAL):
            seq = self.first_seq + i
            with self.lock:
                self.sent_at[seq] = time.monotonic()
            self.producer.produce(self.topic, value=b"%012d" % seq,
                                  partition=i % PARTITIONS, on_delivery=self._delivered)
            self.result.sent += 1
            self.producer.poll(RECORD_INTERVAL_S)
        left = self.producer.flush(STALL_BOUND_MS / 1000 + 10)
        if left:
            self.result.errors.append(f"{left} records never answered")


@pytest.mark.parametrize("mode", MODES)
def test_a_fresh_producer_finds_the_new_leader_after_a_cut(tmp_path, topic, mode):
    seed = _seed()
    rng = random.Random(seed)
    print(f"HELIX_AVAILABILITY_SEED={seed} mode={mode} rounds={ROUNDS}")
    cluster = HelixCluster(tmp_path, 3, args=FAST, proxies=True).start()
    all_acked = LoadResult()
    figures = []
    try:
        create_topic(cluster.node(1).bootstrap, topic, PARTITIONS)
        wait_in_sync(cluster, topic)
        schedule = [d for _ in range(ROUNDS) for d in DELAYS_S]
        rng.shuffle(schedule)
        for n, delay in enumerate(schedule):
            delay += rng.uniform(0, JITTER_S)
            cut = leader_of(cluster, topic, 0)
            nodes = list(cluster.nodes)
            rng.shuffle(nodes)
            bootstrap = ",".join(x.bootstrap for x in nodes)
            cluster.isolate(cut, mode)
            cut_at = time.monotonic()
            time.sleep(max(0.0, cut_at + delay - time.monotonic()))
            trial = Trial(bootstrap, topic, first_seq=n * RECORDS_PER_TRIAL,
                          debug_log=trial_log(tmp_path, n, cut, cut_at, delay))
            trial.run()
            cluster.heal()
            longest = max(trial.stalls, default=0.0)
            figures.append({"delay_s": round(delay, 3), "cut": cut, "longest_stall_s": round(longest, 3)})
            print(f"trial {n}: seed {seed} mode {mode} cut node {cut} start {delay:.3f}s after the cut: "
                  f"{len(trial.result.acked)}/{trial.result.sent} acknowledged, longest wait {longest:.3f}s")
            assert not trial.result.errors and len(trial.result.acked) == trial.result.sent, (
                f"seed {seed}, mode {mode}, node {cut} cut, producer started {delay:.3f}s later: "
                f"{trial.result.errors[:5]}\n{cluster.logs()}")
            all_acked.acked.update(trial.result.acked)
            all_acked.sent += trial.result.sent
            wait_in_sync(cluster, topic)
        stored = read_all(cluster.bootstrap, topic, PARTITIONS)
        verify_exactly_once_in_order(all_acked, stored)
        report(f"fresh_producer_after_cut_{mode}", {
            "seed": seed, "trials": figures,
            "longest_stall_s": max(f["longest_stall_s"] for f in figures)})
    finally:
        cluster.stop()
