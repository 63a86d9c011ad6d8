#!/usr/bin/env python3
"""Log compaction beside Apache Kafka 3.9.1's cleaner, single node, the same
keyed workload (issue 33's figures, docs/BENCHMARKS.md).

    python3 scripts/compaction_bench.py helix|kafka [--backlog-mib 256] [--keys 10000]
        [--rate 1000] [--throttle BYTES_PER_S] [--steady-partitions N]
        [-- extra helix-server flags]

Starts a fresh broker through the tests' harness (HELIX_TEST_KAFKA_LIBS or
the bench's jars for Kafka; target/release/helix-server for Helix), with
the cleaner looking every 200 ms (`log.cleaner.backoff.ms`) and, with
--throttle, `log.cleaner.io.max.bytes.per.second`. Then:

1. `compacted` (1 partition, 1 MiB segments, `cleanup.policy=delete`,
   `min.cleanable.dirty.ratio=0.01`) gets --backlog-mib of 1 KiB values
   over --keys keys in rounds (every key overwritten each round);
2. a steady producer (acks=all, linger 1 ms) writes --rate records/s of
   1 KiB to another topic, `steady` (--steady-partitions, round robin): after --warmup-s (5 s, not counted),
   --baseline-s (10 s) give the p99 without cleaning;
3. `compacted` is made `cleanup.policy=compact` (AlterConfigs) while the
   steady producer goes on; the live `.log` bytes of its partition
   directory are sampled every 100 ms. Cleaning time is from the
   AlterConfigs answer to the last change of those bytes, once they have
   fallen below half and then stayed put for 5 s (so it includes the
   broker noticing the change and its backoff);
4. the steady producer stops. Reported: the pass times as each cleaner
   reports them (`passes_s`: Kafka's LogCleaner INFO line, Helix's
   `helix_compaction_last_clean_duration_ms`), MiB cleaned per second
   (bytes before / cleaning time; docs/BENCHMARKS.md divides by the pass
   time instead), bytes before and after (disk saved), the steady
   producer's p50 / p99 / max delivery latency (librdkafka's
   `msg.latency()`) before the change and while cleaning ran, and on
   Helix the shards leading `compacted` and `steady`.

Prints one JSON line. Live files only: Kafka keeps a cleaned segment's old
files as `.deleted` for `log.segment.delete.delay.ms`; those, `.cleaned`
and `.swap` files are not counted.
"""
import argparse
import json
import os
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

ap = argparse.ArgumentParser()
ap.add_argument("system", choices=["helix", "kafka"])
ap.add_argument("--backlog-mib", type=int, default=256)
ap.add_argument("--keys", type=int, default=10_000)
ap.add_argument("--rate", type=int, default=1000)
ap.add_argument("--throttle", type=float, default=0.0, help="cleaner bytes/s; 0 = unlimited")
ap.add_argument("--steady-partitions", type=int, default=1,
                help="partitions of `steady` (records spread round robin); on Helix, enough to "
                     "share a shard with `compacted` whatever the placement")
ap.add_argument("--warmup-s", type=float, default=5.0)
ap.add_argument("--baseline-s", type=float, default=10.0)
ap.add_argument("helix_flags", nargs="*")
args = ap.parse_args()

if args.system == "kafka":
    os.environ.setdefault("HELIX_TEST_KAFKA_LIBS", os.path.expanduser("~/.cache/helix-bench/kafka-3.9.1/libs"))
else:
    os.environ.pop("HELIX_TEST_KAFKA_LIBS", None)
    os.environ.setdefault("HELIX_SERVER_BIN", str(ROOT / "target/release/helix-server"))

from confluent_kafka import Producer  # noqa: E402
from confluent_kafka.admin import ConfigResource  # noqa: E402

import clients  # noqa: E402
import harness  # noqa: E402

SEGMENT = 1 << 20
VALUE = 1024
COMPACTED = {"cleanup.policy": "delete", "segment.bytes": str(SEGMENT), "min.cleanable.dirty.ratio": "0.01"}


class BenchKafka(harness.KafkaBroker):
    """The harness's single-node Kafka with the cleaner settings of the run."""

    def prepare(self) -> None:
        super().prepare()
        log4j = self.workdir / "log4j.properties"
        # The cleaner's own report of each pass ("... MB of log processed in
        # N seconds").
        log4j.write_text(log4j.read_text() + "log4j.logger.kafka.log.LogCleaner=INFO\n")
        extra = "log.cleaner.backoff.ms=200\n"
        if args.throttle > 0:
            extra += f"log.cleaner.io.max.bytes.per.second={args.throttle}\n"
        self.props.write_text(self.props.read_text() + extra)


def start_broker(work: Path):
    if args.system == "kafka":
        b = BenchKafka(Path(os.environ["HELIX_TEST_KAFKA_LIBS"]), work)
    else:
        flags = ["--log-cleaner-backoff-ms", "200"]
        if args.throttle > 0:
            flags += ["--log-cleaner-io-max-bytes-per-second", str(args.throttle)]
        b = harness.HelixBroker(harness.helix_binary(), work, flags + args.helix_flags)
    b.start()
    return b


def partition_dir(b, before: set) -> Path:
    if args.system == "kafka":
        return b.data_dir / "compacted-0"
    (new,) = set((b.data_dir / "topics").glob("*")) - before
    return new / "0" / "wal"


def live_log_bytes(d: Path) -> int:
    total = 0
    for p in d.iterdir():
        if p.name.endswith(".log"):
            try:
                total += p.stat().st_size
            except FileNotFoundError:
                pass
    return total


def write_backlog(bootstrap: str) -> float:
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 20,
                  "batch.size": 256 << 10, "queue.buffering.max.kbytes": 256 << 10})
    blob = os.urandom(VALUE + 64)
    records = args.backlog_mib * (1 << 20) // VALUE
    started = time.monotonic()
    for i in range(records):
        key = b"key-%06d" % (i % args.keys)
        start = (i // args.keys) % 64
        while True:
            try:
                p.produce("compacted", key=key, value=blob[start:start + VALUE])
                break
            except BufferError:
                p.poll(0.01)
        if i % 1000 == 0:
            p.poll(0)
    assert p.flush(300) == 0, "backlog undelivered"
    return time.monotonic() - started


class Steady(threading.Thread):
    """`rate` records/s of 1 KiB to `steady`; (send time, latency s) of each."""

    def __init__(self, bootstrap: str):
        super().__init__(daemon=True)
        self.p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 1})
        self.samples: list[tuple[float, float]] = []
        self.errors = 0
        self.stop = threading.Event()

    def run(self) -> None:
        value = os.urandom(VALUE)
        period = 1.0 / args.rate
        next_t = time.monotonic()

        def on_delivery(err, msg):
            if err is not None:
                self.errors += 1
            else:
                lat = msg.latency()
                self.samples.append((time.monotonic() - lat, lat))

        i = 0
        while not self.stop.is_set():
            now = time.monotonic()
            if now < next_t:
                self.p.poll(min(next_t - now, 0.005))
                continue
            self.p.produce("steady", value=value, partition=i % args.steady_partitions, on_delivery=on_delivery)
            i += 1
            next_t += period
            self.p.poll(0)
        self.p.flush(30)


def passes(b) -> list[float]:
    """Seconds of each cleaning pass as the cleaner itself reports it: Kafka's
    LogCleaner stats; Helix's `helix_compaction_last_clean_duration_ms` (the
    last pass; with one pass per run, that pass)."""
    if args.system == "kafka":
        import re
        text = b.log.read_text(errors="replace")
        return [float(m) for m in re.findall(r"of log processed in ([0-9.]+) seconds", text)]
    from test_operations import scrape, value
    text = b.log.read_text(errors="replace")
    n = text.count("log cleaned topic=compacted ")
    ms = value(scrape(b.metrics_port), "helix_compaction_last_clean_duration_ms", topic="compacted", partition="0")
    return [ms / 1000] if n == 1 else [ms / 1000] + [float("nan")] * (n - 1)


def shards(b) -> list[str] | None:
    """Helix: the shards leading `compacted` and `steady` (the two last
    partitions to get a leader). A swap holds its shard, so the steady
    producer sees it only when both are on one shard."""
    if args.system != "helix":
        return None
    import re
    lines = [l for l in b.log.read_text(errors="replace").splitlines() if "leadership changed" in l]
    n = 1 + args.steady_partitions
    return [m.group(1) for l in lines[-n:] if (m := re.search(r"shard\{index=(\d+)\}", l))]


def profile(lat: list[float]) -> dict:
    if not lat:
        return {}
    lat = sorted(lat)
    return {"n": len(lat), "p50_ms": round(statistics.median(lat) * 1000, 2),
            "p99_ms": round(lat[min(len(lat) - 1, int(len(lat) * 0.99))] * 1000, 2),
            "max_ms": round(lat[-1] * 1000, 2)}


def main() -> None:
    work = Path(tempfile.mkdtemp(prefix=f"compaction-bench-{args.system}-"))
    b = start_broker(work)
    try:
        topics = b.data_dir / "topics"
        before = set(topics.glob("*")) if topics.exists() else set()
        clients.create_topic(b.bootstrap, "compacted", 1, config=COMPACTED)
        d = partition_dir(b, before)
        clients.create_topic(b.bootstrap, "steady", args.steady_partitions)
        backlog_s = write_backlog(b.bootstrap)
        bytes_before = live_log_bytes(d)

        steady = Steady(b.bootstrap)
        steady.start()
        time.sleep(args.warmup_s)
        baseline_from = time.monotonic()
        time.sleep(args.baseline_s)
        a = clients.admin(b.bootstrap)
        changed = time.monotonic()
        for fut in a.alter_configs([ConfigResource("TOPIC", "compacted",
                                                   set_config={**COMPACTED, "cleanup.policy": "compact"})],
                                   request_timeout=30).values():
            fut.result(timeout=30)
        t0 = time.monotonic()
        last = bytes_before
        last_change = t0
        deadline = t0 + 900
        while True:
            now = time.monotonic()
            cur = live_log_bytes(d)
            if cur != last:
                last, last_change = cur, now
            if cur < bytes_before / 2 and now - last_change >= 5:
                break
            assert now < deadline, f"not cleaned within 900 s: {cur} of {bytes_before} bytes"
            time.sleep(0.1)
        steady.stop.set()
        steady.join()
        cleaning_s = last_change - t0
        base = [lat for at, lat in steady.samples if baseline_from <= at < changed]
        during = [lat for at, lat in steady.samples if t0 <= at <= last_change]
        print(json.dumps({
            "system": args.system,
            "throttle_bytes_per_s": args.throttle or None,
            "backlog_mib": args.backlog_mib, "keys": args.keys, "backlog_write_s": round(backlog_s, 1),
            "bytes_before": bytes_before, "bytes_after": last,
            "disk_saved_pct": round(100 * (1 - last / bytes_before), 1),
            "cleaning_s": round(cleaning_s, 2),
            "passes_s": [round(x, 2) for x in passes(b)],
            "shards_compacted_steady": shards(b), "steady_partitions": args.steady_partitions,
            "cleaned_mib_per_s": round(bytes_before / (1 << 20) / cleaning_s, 1) if cleaning_s > 0 else None,
            "steady_rate": args.rate, "steady_errors": steady.errors,
            "steady_before": profile(base), "steady_while_cleaning": profile(during),
            "load_avg": os.getloadavg()[0],
        }))
    finally:
        b.stop()


if __name__ == "__main__":
    main()
