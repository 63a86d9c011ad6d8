"""One Jepsen-style run against a Helix cluster of real processes.

    python3 tests/jepsen/run.py --nodes 3 --duration 60s --seed 7 \\
        --faults kill,pause,partition --report out.json

Starts ``--nodes`` helix-server processes (HELIX_SERVER_BIN) with a fault
proxy on every directed peer link, creates a topic (RF 3), runs idempotent
producers and consumers while the nemesis applies the seeded schedule, heals
everything, lets the consumers catch up, reads every partition back, stops
the cluster, compares the replicas' bytes and checks the history. Prints a
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
from jepsen import checker, final, nemesis  # noqa: E402
from jepsen.history import History, around, format_ops  # noqa: E402
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
                    leader > 0 and len(isr) == min(3, len(cluster.nodes)) for leader, isr in view.values()):
                return
        time.sleep(0.3)
    raise RuntimeError(f"{topic}: partitions not all led and in sync after {timeout_s:g} s; "
                       f"Metadata (leader, isr) per node: {views} (node logs under {cluster.workdir})")


def run(opts: Options) -> dict:
    steps = nemesis.schedule(opts.seed, opts.duration_s, opts.nodes, opts.faults, opts.partitions)
    workdir = opts.workdir or Path(tempfile.mkdtemp(prefix=f"jepsen-{opts.seed}-"))
    history = History()
    topic = f"jepsen-{opts.seed}"
    cluster = new_cluster(workdir, opts)
    errors: list[str] = []
    clients: list = []
    phases: dict[str, float] = {}
    t0 = time.monotonic()

    def phase(name: str) -> None:
        phases[name] = round(time.monotonic() - t0 - sum(phases.values()), 1)

    try:
        cluster.start()
        admin = AdminClient({"logger": LOG, "bootstrap.servers": cluster.bootstrap})
        admin.create_topics([NewTopic(topic, num_partitions=opts.partitions, replication_factor=3)],
                            operation_timeout=30)[topic].result(timeout=30)
        wait_ready(cluster, topic, opts.partitions)
        phase("start")
        rng = random.Random(opts.seed)
        group = group_name()
        max_records = int(opts.rate * opts.duration_s) + 1
        args = (cluster.bootstrap, topic, opts.partitions, history)
        producers = [IdempotentProducer(i, *args, rate=opts.rate, max_records=max_records,
                                        rng=random.Random(rng.random()))
                     for i in range(opts.producers)]
        consumers = ([AssignConsumer(i, *args, group, random.Random(rng.random()))
                      for i in range(opts.assign_consumers)]
                     + [GroupConsumer(i, *args, group, random.Random(rng.random()))
                        for i in range(opts.group_consumers)])
        clients = producers + consumers
        for c in clients:
            c.start()
        nem = nemesis.Nemesis(cluster, topic, history)
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
            wait_ready(cluster, topic, opts.partitions, timeout_s=HEAL_TIMEOUT_S)
        except RuntimeError as e:  # a liveness failure: told, and the safety checks still run
            errors.append(f"liveness: {str(e)[:3000]}")
        phase("heal")
        for p in producers:
            p.stop()
        for p in producers:
            p.join(timeout=p.flush_timeout_s + 30)
        phase("flush")
        try:
            ends = {p: hw for p, (_, hw) in final.watermarks(cluster.bootstrap, topic, opts.partitions,
                                                             history).items()}
        except KafkaException as e:  # noted in the history; the final read will say what it can
            errors.append(f"liveness: no watermarks after healing: {e}")
            ends = {}
        for c in consumers:
            c.draining.set()
        deadline = time.monotonic() + DRAIN_TIMEOUT_S
        while time.monotonic() < deadline and not all(c.caught_up(ends) for c in consumers if c.is_alive()):
            time.sleep(0.2)
        for c in consumers:
            c.stop()
        for c in clients:
            c.join(timeout=60)
        errors += [f"{c.name}: {c.error!r}" for c in clients if c.error is not None]
        phase("drain")
        final.final_read(cluster.bootstrap, topic, opts.partitions, history)
        phase("final-read")
        settle = final.await_replicas_settled(cluster, topic, opts.partitions)
        phase("settle")
        if not settle["settled"]:
            errors.append(f"replicas never settled: {settle['view']}")
            (workdir / "unsettled-metrics.json").write_text(json.dumps(settle, indent=1))
        cluster.stop()
        final.compare_replicas(cluster.stored_logs(), history)
        phase("stop-compare")
    except Exception as e:  # told in the report; an interrupt or pytest's timeout unwinds on
        errors.append(f"run: {e!r}")
    finally:
        for c in clients:
            c.stop()
        for n in cluster.nodes:  # a node left paused by a failed run must hear SIGTERM
            if n.alive():
                os.kill(n.pid, signal.SIGCONT)
        cluster.stop()
    result = checker.check(history.ops)
    return {"seed": opts.seed, "nodes": opts.nodes, "duration_s": opts.duration_s, "faults": opts.faults,
            "workdir": str(workdir), "phases_s": phases, "schedule": [s.describe() for s in steps], "errors": errors,
            "check": result.to_json(), "_history": history, "_result": result}


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
    lines = [f"seed={report['seed']} nodes={report['nodes']} duration={report['duration_s']}s "
             f"faults={','.join(report['faults'])}",
             "ops:          " + ", ".join(f"{k} {v}" for k, v in st["ops"].items()),
             "faults:       " + (", ".join(f"{k} {v}" for k, v in st["faults"].items()) or "none"),
             f"acknowledged: {st['acknowledged']}"]
    for name in checker.ANOMALIES + checker.INFORMATIONAL:
        tag = " (informational)" if name in checker.INFORMATIONAL else ""
        lines.append(f"{name + tag:<36} {check['counts'][name]}")
    lines.append("longest unavailability per partition: " + ", ".join(
        f"p{p} {u['longest_s']}s (from {u['from_s']}s)" for p, u in check["unavailability_s"].items()))
    lines.append("phases (s): " + ", ".join(f"{k} {v}" for k, v in report["phases_s"].items()))
    for e in report["errors"]:
        lines.append(f"ERROR {e}")
    lines.append("VALID" if check["valid"] and not report["errors"] else "INVALID")
    return "\n".join(lines)


def violations(report: dict, per_anomaly: int = 3) -> str:
    """Every anomaly found, with the seed, the schedule and the history
    around its first cases."""
    result = report["_result"]
    ops = report["_history"].ops
    found = [n for n in checker.ANOMALIES + ("producer-fatal",) if result.counts[n]]
    if not found:
        return ""
    out = [f"anomalies with seed={report['seed']} (replay: --seed {report['seed']} --nodes {report['nodes']} "
           f"--duration {report['duration_s']}s --faults {','.join(report['faults'])})",
           "schedule:", *("  " + s for s in report["schedule"])]
    for name in found:
        out.append(f"== {name}: {result.counts[name]}")
        for case in result.cases[name][:per_anomaly]:
            out.append(f"  case {json.dumps({k: v for k, v in case.items() if k != 'index'})[:400]}")
            out.append(format_ops(around(ops, case["index"], case.get("partition"))))
    return "\n".join(out)


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
    ap.add_argument("--nodes", type=int, default=3, choices=(3, 5))
    ap.add_argument("--duration", default="60s", help="e.g. 45s, 30m")
    ap.add_argument("--seed", type=int, default=None, help="default: random, printed")
    ap.add_argument("--faults", default=",".join(nemesis.DEFAULT_FAULTS),
                    help=f"comma-separated, of {','.join(nemesis.ALL_FAULTS)} (or 'all', or 'none')")
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--rate", type=float, default=60.0, help="records/s per producer")
    ap.add_argument("--report", type=Path, default=None)
    ap.add_argument("--workdir", type=Path, default=None)
    a = ap.parse_args(argv)
    faults = {"all": list(nemesis.ALL_FAULTS), "none": []}.get(a.faults, [f for f in a.faults.split(",") if f])
    unknown = [f for f in faults if f not in nemesis.ALL_FAULTS]
    if unknown:
        ap.error(f"unknown faults {unknown}")
    quiet_librdkafka()
    # SIGTERM (timeout(1), a CI runner) unwinds like Ctrl-C, so the cluster
    # is stopped in run()'s finally, never left behind.
    signal.signal(signal.SIGTERM, _interrupted)
    seed = a.seed if a.seed is not None else random.randrange(1 << 31)
    print(f"seed={seed}", flush=True)
    report = run(Options(seed=seed, nodes=a.nodes, duration_s=parse_duration(a.duration), faults=faults,
                         partitions=a.partitions, rate=a.rate, workdir=a.workdir))
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
