"""One Jepsen-style run against a Helix cluster of real processes.

    python3 tests/jepsen/run.py --nodes 3 --duration 60s --seed 7 \\
        --faults kill,pause,partition --report out.json
    python3 tests/jepsen/run.py --workload txn --nodes 3 --duration 60s --seed 7
    python3 tests/jepsen/run.py --workload compact --nodes 3 --duration 35s --seed 7

Starts ``--nodes`` helix-server processes (HELIX_SERVER_BIN) with a fault
proxy on every directed peer link, creates the workload's topics (RF 3, or
the node count if fewer), runs its producers and consumers while the
nemesis applies the seeded schedule, heals everything, lets the consumers
catch up, reads every partition back, stops the cluster, compares the
replicas' bytes and checks the history. Workloads (``--workload``):
``queue`` (the default: idempotent producers, workload.py, checker.py) and
``txn`` (transactional producers and read_committed consumers over two
topics, txn_workload.py, txn_checker.py; the final read reads at
read_committed and read_uncommitted) and ``compact`` (keyed writes and
tombstones over 100 keys to a compacted topic with small segments, nodes
whose cleaners look every 200 ms, readers reading every partition from the
beginning again and again, a final read once no node has anything left to
clean, each replica's stored records compared by offset and by latest
value per key, since replicas clean on their own (ADR 0027);
compact_workload.py, compact_checker.py). Prints a
summary table and every anomaly with the seed, the schedule and the history
around it; writes the report (JSON) and the history (JSONL) beside it.
Exit status 0 when no anomaly was found. The same seed replays the same
schedule (the timing of real processes does the rest).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from confluent_kafka import KafkaException  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

from cluster_harness import HelixCluster  # noqa: E402
import kwire  # noqa: E402
from jepsen import checker, final, nemesis, txn_checker, txn_copier  # noqa: E402
from jepsen.compact_workload import CompactWorkload  # noqa: E402
from jepsen.history import INFO, History, around, format_ops  # noqa: E402
from jepsen.txn_workload import (TRANSACTION_TIMEOUT_MS, Keyspace, TxnAssignConsumer,  # noqa: E402
                                 TxnGroupConsumer, TxnProducer, key_of)
from jepsen.workload import LOG, AssignConsumer, GroupConsumer, IdempotentProducer, group_name  # noqa: E402

FAST = ["--replica-lag-time-max-ms", "3000", "--leader-imbalance-check-interval-ms", "2000",
        "--group-initial-rebalance-delay-ms", "0"]
DRAIN_TIMEOUT_S = 45.0
# After the last heal, every partition must have a leader and a full ISR
# within this (a correct cluster needs a few election timeouts).
HEAL_TIMEOUT_S = 60.0


@dataclass
class Options:
    seed: int
    nodes: int = 3
    duration_s: float = 60.0
    faults: list[str] = field(default_factory=lambda: list(nemesis.DEFAULT_FAULTS))
    partitions: int = 4
    producers: int = 3
    assign_consumers: int = 1
    group_consumers: int = 2
    rate: float = 60.0  # records/s per producer
    workdir: Path | None = None
    server_args: list[str] = field(default_factory=list)
    workload: str = "queue"
    txn_rate: float = 4.0  # transactions/s per transactional producer


class Unsupported(Exception):
    """The cluster does not offer what the workload needs (told, and the
    run stops before any load)."""


class QueueWorkload:
    """Idempotent producers over one topic, consumers (workload.py),
    checked by checker.py."""

    anomalies, informational = checker.ANOMALIES, checker.INFORMATIONAL
    shown = ("producer-fatal",)  # informational counts shown with the anomalies

    def __init__(self, opts: Options):
        self.opts = opts
        self.topic = f"jepsen-{opts.seed}"
        self.topics = {self.topic: opts.partitions}
        self.notes: list[str] = []  # what the run left out, and why (printed with the summary)

    def key(self, topic: str, p: int):
        return p

    def prepare(self, cluster: HelixCluster) -> None:
        pass

    def clients(self, bootstrap: str, history: History, rng: random.Random) -> tuple[list, list]:
        o = self.opts
        group = group_name()
        max_records = int(o.rate * o.duration_s) + 1
        args = (bootstrap, self.topic, o.partitions, history)
        producers = [IdempotentProducer(i, *args, rate=o.rate, max_records=max_records,
                                        rng=random.Random(rng.random()))
                     for i in range(o.producers)]
        consumers = ([AssignConsumer(i, *args, group, random.Random(rng.random()))
                      for i in range(o.assign_consumers)]
                     + [GroupConsumer(i, *args, group, random.Random(rng.random()))
                        for i in range(o.group_consumers)])
        return producers, consumers

    def final_read(self, bootstrap: str, history: History) -> None:
        final.final_read(bootstrap, self.topic, self.opts.partitions, history)

    def after_stop(self, cluster: HelixCluster, dirs: dict[str, str], history: History) -> None:
        """What the workload reads of the stopped nodes' files beside the
        replicas' bytes (compared for every workload)."""

    def check(self, ops: list[dict]) -> checker.Result:
        return checker.check(ops)


class TxnWorkload(QueueWorkload):
    """Transactional producers writing to two topics, read_committed
    consumers (txn_workload.py), checked by txn_checker.py. Needs a
    transaction coordinator: a cluster answering FindCoordinator for a
    transactional id with COORDINATOR_NOT_AVAILABLE throughout
    COORDINATOR_WAIT_S is Unsupported."""

    anomalies, informational = txn_checker.ANOMALIES, txn_checker.INFORMATIONAL
    shown = ("indeterminate", "producer-replaced")
    COORDINATOR_WAIT_S = 20.0

    def __init__(self, opts: Options):
        self.opts = opts
        self.topic = f"jepsen-{opts.seed}-a"  # the nemesis's topic (leader_of)
        self.topics = {self.topic: opts.partitions, f"jepsen-{opts.seed}-b": 2}
        self.keyspace = Keyspace(self.topics)
        self.notes: list[str] = []
        self.copier = False  # whether the cluster offers what txn_copier.py needs

    def key(self, topic: str, p: int):
        return key_of(topic, p)

    def transactional_id(self, i: int) -> str:
        return f"jepsen-{self.opts.seed}-txn-{i}"

    def prepare(self, cluster: HelixCluster) -> None:
        deadline = time.monotonic() + self.COORDINATOR_WAIT_S
        answers: dict[int, object] = {}
        while True:
            for n in cluster.nodes:
                try:
                    with kwire.Conn("127.0.0.1", n.kafka_port, timeout=5.0) as conn:
                        answers[n.id] = kwire.find_coordinator_once(conn, self.transactional_id(0),
                                                                    kwire.COORDINATOR_TRANSACTION)[0]
                except (OSError, kwire.ProtocolError) as e:
                    answers[n.id] = repr(e)
            if kwire.ERR_NONE in answers.values():
                self.copier = self._offers_offsets_in_transactions(cluster)
                return
            if time.monotonic() > deadline:
                break
            time.sleep(0.5)
        if all(a == kwire.ERR_COORDINATOR_NOT_AVAILABLE for a in answers.values()):
            raise Unsupported(f"no transaction coordinator on this {len(cluster.nodes)}-node cluster: "
                              f"FindCoordinator(TRANSACTION) answered COORDINATOR_NOT_AVAILABLE on every node "
                              f"for {self.COORDINATOR_WAIT_S:g} s")
        raise RuntimeError(f"FindCoordinator(TRANSACTION) never answered: {answers}")

    def _offers_offsets_in_transactions(self, cluster: HelixCluster) -> bool:
        """Whether every node advertises AddOffsetsToTxn and TxnOffsetCommit
        (send_offsets_to_transaction); when not, the copier is left out and
        the run says so."""
        missing = []
        for n in cluster.nodes:
            with kwire.Conn("127.0.0.1", n.kafka_port, timeout=5.0) as conn:
                if not txn_copier.supported(conn.api_versions()):
                    missing.append(n.id)
        if missing:
            self.notes.append(f"copier not run: nodes {missing} do not advertise AddOffsetsToTxn and "
                              f"TxnOffsetCommit (send_offsets_to_transaction)")
        return not missing

    def clients(self, bootstrap: str, history: History, rng: random.Random) -> tuple[list, list]:
        o = self.opts
        group = group_name()
        max_txns = int(o.txn_rate * o.duration_s) + 1
        producers = [TxnProducer(i, bootstrap, self.keyspace, history, self.transactional_id(i),
                                 rate=o.txn_rate, max_txns=max_txns, rng=random.Random(rng.random()))
                     for i in range(o.producers)]
        # The copier reads b and writes a: its copies are read by everyone.
        if self.copier:
            source, dest = list(self.topics)[1], self.topic
            producers.append(txn_copier.TxnCopier(bootstrap, self.keyspace, history,
                                                  f"jepsen-{o.seed}-copier", source, dest, f"{group}-copier",
                                                  random.Random(rng.random())))
        args = (bootstrap, self.keyspace, history, group)
        consumers = ([TxnAssignConsumer(i, *args, random.Random(rng.random())) for i in range(o.assign_consumers)]
                     + [TxnGroupConsumer(i, *args, random.Random(rng.random())) for i in range(o.group_consumers)])
        return producers, consumers

    # A read_committed read held back by a transaction the broker keeps open
    # waits no longer than this: twice the producers' transaction timeout,
    # after which the coordinator must have aborted it.
    FINAL_READ_TIMEOUT_S = 2 * TRANSACTION_TIMEOUT_MS / 1000

    def final_read(self, bootstrap: str, history: History) -> None:
        for isolation in ("read_committed", "read_uncommitted"):
            for topic, n in self.topics.items():
                final.final_read(bootstrap, topic, n, history, isolation=isolation, key=key_of,
                                 timeout_s=self.FINAL_READ_TIMEOUT_S)

    def after_stop(self, cluster: HelixCluster, dirs: dict[str, str], history: History) -> None:
        for t in self.topics:
            final.compare_txn_indexes(cluster, t, dirs[t], history, key=key_of)

    def check(self, ops: list[dict]) -> checker.Result:
        return txn_checker.check(ops)


WORKLOADS = {"queue": QueueWorkload, "txn": TxnWorkload, "compact": CompactWorkload}


def parse_duration(text: str) -> float:
    units = {"s": 1, "m": 60, "h": 3600}
    return float(text[:-1]) * units[text[-1]] if text[-1] in units else float(text)


def wait_ready(cluster: HelixCluster, topic: str, partitions: int, timeout_s: float = 90.0) -> None:
    """Until some node's Metadata shows every partition with a leader and a
    full ISR (bounded); the error names what each node last showed."""
    deadline = time.monotonic() + timeout_s
    views: dict[int, object] = {}
    while time.monotonic() < deadline:
        for n in cluster.nodes:
            try:
                admin = AdminClient({"logger": LOG, "bootstrap.servers": n.bootstrap})
                t = admin.list_topics(topic=topic, timeout=3).topics.get(topic)
                view = {p: (m.leader, sorted(m.isrs)) for p, m in t.partitions.items()} if t and not t.error else None
            except Exception as e:
                view = repr(e)
            views[n.id] = view
            if isinstance(view, dict) and len(view) == partitions and all(
                    leader > 0 and len(isr) == replication(len(cluster.nodes)) for leader, isr in view.values()):
                return
        time.sleep(0.3)
    raise RuntimeError(f"{topic}: partitions not all led and in sync after {timeout_s:g} s; "
                       f"Metadata (leader, isr) per node: {views} (node logs under {cluster.workdir})")


def replication(nodes: int) -> int:
    return min(3, nodes)


def run(opts: Options) -> dict:
    if opts.nodes == 1:
        opts.faults = single_node_faults(opts.faults)
    steps = nemesis.schedule(opts.seed, opts.duration_s, opts.nodes, opts.faults, opts.partitions)
    workdir = opts.workdir or Path(tempfile.mkdtemp(prefix=f"jepsen-{opts.seed}-"))
    history = History()
    workload = WORKLOADS[opts.workload](opts)
    topics = workload.topics
    cluster = new_cluster(workdir, opts)
    errors: list[str] = []
    unsupported = None
    clients: list = []
    phases: dict[str, float] = {}
    t0 = time.monotonic()

    def phase(name: str) -> None:
        phases[name] = round(time.monotonic() - t0 - sum(phases.values()), 1)

    try:
        cluster.start()
        admin = AdminClient({"logger": LOG, "bootstrap.servers": cluster.bootstrap})
        configs = getattr(workload, "topic_config", {})
        futures = admin.create_topics([NewTopic(t, num_partitions=n, replication_factor=replication(opts.nodes),
                                                config=configs.get(t, {}))
                                       for t, n in topics.items()], operation_timeout=30)
        for t, n in topics.items():
            futures[t].result(timeout=30)
            wait_ready(cluster, t, n)
        workload.prepare(cluster)
        phase("start")
        rng = random.Random(opts.seed)
        producers, consumers = workload.clients(cluster.bootstrap, history, rng)
        clients = producers + consumers
        for c in clients:
            c.start()
        nem = nemesis.Nemesis(cluster, workload.topic, history)
        stopping = threading.Event()
        started = time.monotonic()
        nem_error: list[BaseException] = []

        def nemesis_body():
            try:
                nem.run(steps, started, started + opts.duration_s, stopping)
            except BaseException as e:
                nem_error.append(e)

        nt = threading.Thread(target=nemesis_body, daemon=True, name="nemesis")
        nt.start()
        stopping.wait(opts.duration_s)
        stopping.set()
        nt.join(timeout=120)
        errors += [f"nemesis: {e!r}" for e in nem_error]
        phase("faults")
        nem.heal_all()
        try:
            for t, n in topics.items():
                wait_ready(cluster, t, n, timeout_s=HEAL_TIMEOUT_S)
        except RuntimeError as e:  # a liveness failure: told, and the safety checks still run
            errors.append(f"liveness: {str(e)[:3000]}")
        phase("heal")
        for p in producers:
            p.stop()
        for p in producers:
            p.join(timeout=p.flush_timeout_s + 30)
        phase("flush")
        try:
            ends = {workload.key(t, p): hw for t, n in topics.items()
                    for p, (_, hw) in final.watermarks(cluster.bootstrap, t, n, history).items()}
        except KafkaException as e:  # noted in the history; the final read will say what it can
            errors.append(f"liveness: no watermarks after healing: {e}")
            ends = {}
        for c in consumers:
            c.draining.set()
        deadline = time.monotonic() + DRAIN_TIMEOUT_S
        while time.monotonic() < deadline and not all(c.caught_up(ends) for c in consumers if c.is_alive()):
            time.sleep(0.2)
        behind = {c.name: {str(k): [c.position.get(k), end] for k, end in ends.items()}
                  for c in consumers if c.is_alive() and not c.caught_up(ends)}
        if behind:  # not an anomaly by itself (the final read decides): where each one stood
            history.add("final", INFO, "drain-timeout", behind)
        for c in consumers:
            c.stop()
        for c in clients:
            c.join(timeout=60)
        errors += [f"{c.name}: {c.error!r}" for c in clients if c.error is not None]
        phase("drain")
        workload.final_read(cluster.bootstrap, history)
        phase("final-read")
        for t, n in topics.items():
            settle = final.await_replicas_settled(cluster, t, n)
            if not settle["settled"]:
                errors.append(f"{t}: replicas never settled: {settle['view']}")
                (workdir / f"unsettled-metrics-{t}.json").write_text(json.dumps(settle, indent=1))
        phase("settle")
        dirs = final.topic_dirs(cluster.bootstrap, list(topics)) if len(topics) > 1 else {}
        cluster.stop()
        workload.after_stop(cluster, dirs, history)
        for t in topics:
            stored = cluster.stored_logs(dirs.get(t))
            final.compare_replicas({node: {workload.key(t, p): b for p, b in logs.items()}
                                    for node, logs in stored.items()}, history)
        phase("stop-compare")
    except Unsupported as e:
        unsupported = str(e)
        errors.append(f"unsupported: {e}")
    except Exception as e:  # told in the report; an interrupt or pytest's timeout unwinds on
        errors.append(f"run: {e!r}")
    finally:
        for c in clients:
            c.stop()
        for n in cluster.nodes:  # a node left paused by a failed run must hear SIGTERM
            if n.alive():
                os.kill(n.pid, signal.SIGCONT)
        cluster.stop()
    result = workload.check(history.ops)
    return {"seed": opts.seed, "nodes": opts.nodes, "duration_s": opts.duration_s, "faults": opts.faults,
            "workload": opts.workload, "unsupported": unsupported, "notes": workload.notes,
            "workdir": str(workdir), "phases_s": phases, "schedule": [s.describe() for s in steps], "errors": errors,
            "check": result.to_json(), "_history": history, "_result": result, "_workload": workload}


def new_cluster(workdir: Path, opts: Options) -> HelixCluster:
    """harness.free_port() closes the port it found, so two of a node's
    ports, or a proxy's, can come out equal: draw again (bounded)."""
    for _ in range(10):
        cluster = HelixCluster(workdir, opts.nodes, args=FAST + opts.server_args, proxies=True)
        ports = [port for n in cluster.nodes for port in (n.kafka_port, n.peer_port, n.metrics_port)]
        ports += [p.port for p in cluster.proxies.values()]
        if len(set(ports)) == len(ports):
            nemesis.give_boot_ids(cluster)
            return cluster
        cluster.stop()
    raise RuntimeError("no distinct ports for the cluster in 10 draws")


def summary(report: dict) -> str:
    check = report["check"]
    st = check["stats"]
    w = report["_workload"]
    lines = [f"workload={report['workload']} seed={report['seed']} nodes={report['nodes']} "
             f"duration={report['duration_s']}s faults={','.join(report['faults'])}",
             "ops:          " + ", ".join(f"{k} {v}" for k, v in st["ops"].items()),
             "faults:       " + (", ".join(f"{k} {v}" for k, v in st["faults"].items()) or "none"),
             f"acknowledged: {st['acknowledged']}"]
    if "cleaner_passes" in st:
        lines.append(f"cleaner passes seen: {st['cleaner_passes']}")
    if "transactions" in st:
        lines.append("transactions: " + ", ".join(f"{k} {v}" for k, v in st["transactions"].items()))
    for name in w.anomalies + w.informational:
        tag = " (informational)" if name in w.informational else ""
        lines.append(f"{name + tag:<36} {check['counts'][name]}")
    lines.append("longest unavailability per partition: " + ", ".join(
        f"{place(p)} {u['longest_s']}s (from {u['from_s']}s)" for p, u in check["unavailability_s"].items()))
    lines.append("phases (s): " + ", ".join(f"{k} {v}" for k, v in report["phases_s"].items()))
    for note in report.get("notes") or ():
        lines.append(f"NOTE {note}")
    for e in report["errors"]:
        lines.append(f"ERROR {e}")
    lines.append("VALID" if check["valid"] and not report["errors"] else "INVALID")
    return "\n".join(lines)


def place(p) -> str:
    """A partition number as p3; a name (the txn workload's
    "transactions") as it is."""
    return f"p{p}" if str(p).isdigit() else str(p)


def violations(report: dict, per_anomaly: int = 3) -> str:
    """Every anomaly found, with the seed, the schedule and the history
    around its first cases."""
    result = report["_result"]
    ops = report["_history"].ops
    w = report["_workload"]
    found = [n for n in w.anomalies + w.shown if result.counts[n]]
    if not found:
        return ""
    out = [f"anomalies with seed={report['seed']} (replay: --workload {report['workload']} "
           f"--seed {report['seed']} --nodes {report['nodes']} "
           f"--duration {report['duration_s']}s --faults {','.join(report['faults'])})",
           "schedule:", *("  " + s for s in report["schedule"])]
    for name in found:
        out.append(f"== {name}: {result.counts[name]}")
        for case in result.cases[name][:per_anomaly]:
            out.append(f"  case {json.dumps({k: v for k, v in case.items() if k != 'index'})[:400]}")
            out.append(format_ops(around(ops, case["index"], case.get("partition"))))
            if case.get("writer_index") is not None:  # G1a: also where the writer ended
                out.append("  writer:\n" + format_ops(around(ops, case["writer_index"], case.get("partition"))))
    return "\n".join(out)


def single_node_faults(faults: list[str]) -> list[str]:
    """On one node: no peer links to cut, no minority to kill, no second
    replica to lose a disk beside."""
    return [f for f in faults if f not in nemesis.NET_FAULTS + ("kill-minority", "disk-loss-election")]


def _interrupted(signum, _frame) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def quiet_librdkafka() -> None:
    """librdkafka's complaints about nodes the nemesis took down are
    expected: kept out of the summary (DEBUG to see them)."""
    import logging
    log = logging.getLogger("librdkafka")
    log.propagate = False
    debug_file = os.environ.get("HELIX_JEPSEN_DEBUG_FILE")
    if debug_file:  # with HELIX_JEPSEN_DEBUG (workload.py): a replay's client log
        handler = logging.FileHandler(debug_file)
        handler.setFormatter(logging.Formatter("%(asctime)s %(threadName)s %(message)s"))
        log.addHandler(handler)
        log.setLevel(logging.DEBUG)
    else:
        log.addHandler(logging.NullHandler())


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--workload", default="queue", choices=sorted(WORKLOADS),
                    help="queue: idempotent producers (default); txn: transactions, read_committed consumers; "
                         "compact: keyed writes and tombstones on a compacted topic, readers from the start")
    ap.add_argument("--nodes", type=int, default=3, choices=(1, 3, 5),
                    help="1: a single node, with the process faults only (no peer links to cut)")
    ap.add_argument("--duration", default="60s", help="e.g. 45s, 30m")
    ap.add_argument("--seed", type=int, default=None, help="default: random, printed")
    ap.add_argument("--faults", default=",".join(nemesis.DEFAULT_FAULTS),
                    help=f"comma-separated, of {','.join(nemesis.ALL_FAULTS)} (or 'all', or 'none')")
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--rate", type=float, default=None,
                    help="records/s per producer (queue, default 60); transactions/s per producer (txn, default 4)")
    ap.add_argument("--report", type=Path, default=None)
    ap.add_argument("--workdir", type=Path, default=None)
    a = ap.parse_args(argv)
    faults = {"all": list(nemesis.ALL_FAULTS), "none": []}.get(a.faults, [f for f in a.faults.split(",") if f])
    unknown = [f for f in faults if f not in nemesis.ALL_FAULTS]
    if unknown:
        ap.error(f"unknown faults {unknown}")
    if a.workload == "txn" and "trim" in faults:
        ap.error("trim is not a fault of the txn workload (its checker places records by topic/partition)")
    if a.workload == "compact" and "trim" in faults:
        ap.error("trim is not a fault of the compact workload (DeleteRecords may remove a key's latest value)")
    quiet_librdkafka()
    # SIGTERM (timeout(1), a CI runner) unwinds like Ctrl-C, so the cluster
    # is stopped in run()'s finally, never left behind.
    signal.signal(signal.SIGTERM, _interrupted)
    seed = a.seed if a.seed is not None else random.randrange(1 << 31)
    print(f"seed={seed}", flush=True)
    rates = {"txn_rate": a.rate} if a.workload == "txn" else {"rate": a.rate}
    report = run(Options(seed=seed, nodes=a.nodes, duration_s=parse_duration(a.duration), faults=faults,
                         partitions=a.partitions, workdir=a.workdir, workload=a.workload,
                         **{k: v for k, v in rates.items() if v is not None}))
    print(summary(report))
    text = violations(report)
    if text:
        print(text)
    if a.report:
        report["_history"].dump(a.report.with_suffix(".history.jsonl"))
        a.report.write_text(json.dumps({k: v for k, v in report.items() if not k.startswith("_")}, indent=1))
    return 0 if report["check"]["valid"] and not report["errors"] else 1


if __name__ == "__main__":
    sys.exit(main())
