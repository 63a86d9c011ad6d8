#!/usr/bin/env python3
"""OffsetCommit load: RATE commits/s (asynchronous, each one partition's
offset) spread over G consumers in G groups, for SECS seconds; reports the
achieved rate and commit latency (issue to on_commit callback)."""
import sys, time
from confluent_kafka import Consumer, TopicPartition
bootstrap, topic, rate, secs, groups = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4]), int(sys.argv[5])
lat, errors, pending = [], [0], {}
def on_commit(err, parts):
    now = time.perf_counter()
    if err is not None:
        errors[0] += 1; return
    for tp in parts:
        t0 = pending.pop((tp.topic, tp.partition, tp.offset), None)
        if t0 is not None: lat.append(now - t0)
cs = [Consumer({'bootstrap.servers': bootstrap, 'group.id': 'bench-%d' % g, 'on_commit': on_commit,
                'enable.auto.commit': False}) for g in range(groups)]
for c in cs: c.commit(offsets=[TopicPartition(topic, 0, 0)], asynchronous=False)
start = time.perf_counter(); n = 0
while True:
    now = time.perf_counter()
    if now - start >= secs: break
    due = int((now - start) * rate)
    while n < due:
        c = cs[n % groups]; off = n + 1; part = n % 6
        pending[(topic, part, off)] = time.perf_counter()
        c.commit(offsets=[TopicPartition(topic, part, off)], asynchronous=True)
        n += 1
    for c in cs: c.poll(0)
    time.sleep(0.0005)
deadline = time.perf_counter() + 10
while pending and time.perf_counter() < deadline:
    for c in cs: c.poll(0.01)
wall = time.perf_counter() - start
lat.sort()
q = lambda p: lat[min(len(lat) - 1, int(p * len(lat)))] * 1000 if lat else float('nan')
print(f"commits: {len(lat)} acknowledged of {n} issued in {secs:.0f}s ({len(lat)/secs:.0f}/s), {errors[0]} errors; "
      f"latency p50 {q(0.5):.2f} ms p99 {q(0.99):.2f} ms p99.9 {q(0.999):.2f} ms max {lat[-1]*1000 if lat else 0:.2f} ms")
for c in cs: c.close()
