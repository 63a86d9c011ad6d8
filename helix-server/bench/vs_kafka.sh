#!/usr/bin/env bash
# Side-by-side figures for docs/BENCHMARKS.md (helix-server section): a single
# helix-server (release build) and a single Apache Kafka 3.9.1 broker
# (scripts/kafka/cluster.sh start 1), each driven by librdkafka through
# scripts/kafka/rdkafka_bench.py, acks=all, 1 KiB values, topic of 6
# partitions: 1 producer, 4 producers (with the broker's CPU seconds per GiB
# ingested, utime+stime from /proc/PID/stat), 20,000 records/s for latency,
# and the broker's RSS at the end.
#
# usage: helix-server/bench/vs_kafka.sh [helix|kafka|both]   (from the repo root)
# env:   COUNT1 (300000) COUNT4 (400000) RATE (20000) RATE_SECONDS (15)
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
KAFKA_BENCH=$ROOT/scripts/kafka
BENCH="$KAFKA_BENCH/rdkafka_bench.py"
COUNT1=${COUNT1:-300000}
COUNT4=${COUNT4:-400000}
RATE=${RATE:-20000}
RATE_SECONDS=${RATE_SECONDS:-15}
HELIX_PORT=${HELIX_PORT:-29518}
KAFKA_PORT=${KAFKA_PORT:-29600}
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT

cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
rss_kib() { awk '/VmRSS/ {print $2}' "/proc/$1/status"; }

create_topic() {
  python3 - "$1" <<'PY'
import sys
from confluent_kafka.admin import AdminClient, NewTopic
a = AdminClient({"bootstrap.servers": sys.argv[1]})
for _, f in a.create_topics([NewTopic("bench", 6, 1)]).items():
    f.result()
PY
}

run_suite() {  # name bootstrap pid
  local name=$1 bs=$2 pid=$3 c0 c1 ticks hz
  hz=$(getconf CLK_TCK)
  create_topic "$bs"
  echo "== $name: 1 producer, $COUNT1 records"
  python3 "$BENCH" "$bs" bench --producers 1 --count "$COUNT1" --size 1024 --acks all | grep '^produce'
  echo "== $name: 4 producers, $COUNT4 records"
  c0=$(cpu_ticks "$pid")
  python3 "$BENCH" "$bs" bench --producers 4 --count "$COUNT4" --size 1024 --acks all | grep '^produce'
  c1=$(cpu_ticks "$pid")
  ticks=$((c1 - c0))
  python3 -c "print('== $name: broker CPU over the 4-producer run: %.2f s for %.3f GiB = %.2f s/GiB' % ($ticks/$hz, $COUNT4*1024/2**30, ($ticks/$hz)/($COUNT4*1024/2**30)))"
  echo "== $name: 1 producer at $RATE records/s, linger 1 ms"
  python3 "$BENCH" "$bs" bench --producers 1 --count $((RATE * RATE_SECONDS)) --size 1024 --acks all --linger 1 --rate "$RATE" | grep '^produce'
  echo "== $name: RSS $(( $(rss_kib "$pid") / 1024 )) MiB"
}

helix() {
  local bin="$ROOT/target/release/helix-server"
  [ -x "$bin" ] || (cd "$ROOT" && cargo build --release -p helix-server)
  "$bin" --listen "127.0.0.1:$HELIX_PORT" --data-dir "$WORK/helix" --log-level warn &
  local pid=$!
  for _ in $(seq 100); do (exec 3<>"/dev/tcp/127.0.0.1/$HELIX_PORT") 2>/dev/null && break; sleep 0.1; done
  run_suite helix "127.0.0.1:$HELIX_PORT" "$pid"
  kill -TERM "$pid"; wait "$pid" || true
}

kafka() {
  export BASE_PORT=$KAFKA_PORT DATA="$WORK/kafka"
  "$KAFKA_BENCH/cluster.sh" start 1 >/dev/null
  local pid; pid=$(cat "$DATA"/node1/pid)
  run_suite kafka "127.0.0.1:$KAFKA_PORT" "$pid"
  "$KAFKA_BENCH/cluster.sh" stop >/dev/null
}

case "${1:-both}" in
  helix) helix ;;
  kafka) kafka ;;
  both) helix; kafka ;;
esac
