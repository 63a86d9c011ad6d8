"""A Jepsen-style queue test for Helix on real processes (issue 29 items 5-6).

``history`` records every operation, ``workload`` drives idempotent producers
and consumers (assign and group-subscribe), ``nemesis`` injects faults from a
seeded schedule, ``final_read`` reads every partition back and compares the
replicas' stored bytes, ``checker`` reads the whole history and names
anomalies as Jepsen's Kafka checker does, and ``run`` ties them together
(``python3 tests/jepsen/run.py --help``). See docs/RELIABILITY.md.
"""
