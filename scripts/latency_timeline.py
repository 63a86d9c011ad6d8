#!/usr/bin/env python3
"""Latency over time at a fixed rate: where a stall happens, not just that
one did.

    scripts/latency_timeline.py BOOTSTRAP SECONDS RATE [--topic bench]

Produces RATE records/s of 1 KiB (confluent-kafka, acks=all, idempotent,
linger 1 ms) to the topic for SECONDS, then prints one line per half-second
window of send time: records, p50 and max latency (send to acknowledgement;
the send time is the scheduled one, so a stalled client is counted too),
and the window's wall-clock start to match against broker logs.
"""
import argparse
import time

from confluent_kafka import Producer


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("bootstrap")
    ap.add_argument("seconds", type=float)
    ap.add_argument("rate", type=int)
    ap.add_argument("--topic", default="bench")
    a = ap.parse_args()
    p = Producer({"bootstrap.servers": a.bootstrap, "acks": "all", "linger.ms": 1,
                  "enable.idempotence": True, "queue.buffering.max.kbytes": 1 << 20,
                  "message.timeout.ms": 60000})
    lat = []
    start = time.monotonic()
    wall0 = time.time()
    n = 0
    value = b"x" * 1024
    while time.monotonic() - start < a.seconds:
        due = int((time.monotonic() - start) * a.rate)
        while n < due:
            t0 = start + n / a.rate
            try:
                p.produce(a.topic, value=value,
                          on_delivery=lambda err, msg, t0=t0: lat.append((t0, time.monotonic() - t0)))
                n += 1
            except BufferError:
                p.poll(0.01)
        p.poll(0.001)
    p.flush(60)
    windows = {}
    for t0, latency in lat:
        windows.setdefault(int((t0 - start) * 2), []).append(latency)
    for w in sorted(windows):
        ls = sorted(windows[w])
        print(f"t={w / 2:5.1f}s n={len(ls):5d} p50={ls[len(ls) // 2] * 1000:8.1f}ms "
              f"max={ls[-1] * 1000:8.1f}ms wall={time.strftime('%H:%M:%S', time.gmtime(wall0 + w / 2))}")


if __name__ == "__main__":
    main()
