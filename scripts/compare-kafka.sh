#!/usr/bin/env bash
# The same helix-workload profile against Helix and Apache Kafka 3.9.1, one
# after the other on this machine, each on a fresh cluster of N nodes.
#
#   scripts/compare-kafka.sh PROFILE [--nodes 3|1] [--out DIR] [-- helix-workload overrides...]
#
# Helix runs from target/release (built when missing) through
# scripts/local-cluster.sh (Kafka port 29092..); Kafka through
# scripts/kafka/cluster.sh (port 19092.., jars fetched when
# missing). For each: the run's JSON (DIR/helix.json, DIR/kafka.json), the
# brokers' CPU seconds during the measured run (utime+stime from
# /proc/PID/stat; an unmeasured 5 s run of the same profile goes first),
# peak RSS (VmHWM, which counts mapped log pages) and peak RssAnon (sampled
# every 0.5 s: the broker's own memory). Prints both summaries and the
# ratios, and draws both runs on one chart (DIR/compare.svg, .html).
set -euo pipefail
cd "$(dirname "$0")/.."

profile=${1:?usage: scripts/compare-kafka.sh PROFILE [--nodes N] [--out DIR] [-- overrides...]}
shift
nodes=3
out=target/compare-kafka
overrides=()
while (($#)); do
  case $1 in
    --nodes) nodes=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --) shift; overrides=("$@"); break ;;
    *) echo "compare-kafka.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
[[ $nodes == 1 || $nodes == 3 ]] || { echo "--nodes must be 1 or 3 (what cluster.sh starts)" >&2; exit 2; }
((nodes == 1)) && overrides=(--replication-factor 1 "${overrides[@]}")

bench=scripts/kafka
workload=target/release/helix-workload
if [[ ! -x $workload || ! -x target/release/helix-server ]]; then
  cargo build --release -p helix-server -p helix-workload
fi
kafka_libs=${KAFKA_LIBS:-$HOME/.cache/helix-bench/kafka-${KAFKA_VERSION:-3.9.1}/libs}
[[ -d $kafka_libs ]] || bash "$bench/cluster.sh" fetch
mkdir -p "$out"
out=$(cd "$out" && pwd)

cpu_seconds() { # utime + stime of the pids, in seconds
  local total=0 pid fields
  for pid in "$@"; do
    fields=$(sed 's/.*) //' "/proc/$pid/stat")
    total=$((total + $(awk '{print $12 + $13}' <<<"$fields")))
  done
  awk -v t="$total" -v hz="$(getconf CLK_TCK)" 'BEGIN { printf "%.2f", t / hz }'
}

sample_anon() { # every 0.5 s until killed: the largest RssAnon (KiB) of each pid, into $1
  local out=$1 pid
  shift
  declare -A peak
  while true; do
    for pid in "$@"; do
      local kib
      kib=$(awk '/^RssAnon:/ { print $2 }' "/proc/$pid/status" 2>/dev/null || echo 0)
      ((kib > ${peak[$pid]:-0})) && peak[$pid]=$kib
    done
    local list=""
    for pid in "$@"; do list+="${list:+,}$(awk -v k="${peak[$pid]:-0}" 'BEGIN { printf "%.1f", k / 1024 }')"; done
    echo "$list" >"$out"
    sleep 0.5
  done
}

peak_rss_mib() { # VmHWM of each pid, comma-separated
  local pid list=""
  for pid in "$@"; do
    list+="${list:+,}$(awk '/^VmHWM:/ { printf "%.1f", $2 / 1024 }' "/proc/$pid/status")"
  done
  echo "$list"
}

bootstrap() { # nodes from port $1
  local list="" i
  for i in $(seq 0 $((nodes - 1))); do list+="${list:+,}127.0.0.1:$(($1 + i))"; done
  echo "$list"
}

# Both brokers start from the same page cache: written-back and dropped.
# A full cache (earlier runs' log pages) slowed every broker's writes by 2-3x
# on this VM (the kernel copies into pages it must reclaim first), and the
# broker measured second found the first one's pages freed with its data
# directory: Kafka after Helix ran on an empty cache, Helix on a full one.
settle_page_cache() {
  sync
  if ! { echo 3 >/proc/sys/vm/drop_caches; } 2>/dev/null; then
    echo "compare-kafka.sh: cannot drop the page cache (needs root): the two runs may start unequal" >&2
  fi
}

measure() { # label bootstrap pids...: runs the profile, writes $out/label.json and $out/label.brokers.json
  local label=$1 servers=$2
  shift 2
  local before after rc=0
  settle_page_cache
  # An unmeasured 5 s first, so that neither broker is measured cold (the
  # JVM's JIT, Helix's first segments).
  "$workload" --bootstrap "$servers" --profile "$profile" --duration 5 --warmup 0 --verify false \
    "${overrides[@]}" >/dev/null
  before=$(cpu_seconds "$@")
  sample_anon "$out/$label.anon" "$@" &
  local sampler=$!
  "$workload" --bootstrap "$servers" --profile "$profile" --label "$label" --json "$out/$label.json" \
    "${overrides[@]}" || rc=$?
  after=$(cpu_seconds "$@")
  kill "$sampler" 2>/dev/null || true
  wait "$sampler" 2>/dev/null || true
  printf '{"cpu_seconds": %s, "peak_rss_mib": [%s], "peak_anon_mib": [%s]}\n' \
    "$(awk -v a="$after" -v b="$before" 'BEGIN { printf "%.2f", a - b }')" "$(peak_rss_mib "$@")" \
    "$(cat "$out/$label.anon")" >"$out/$label.brokers.json"
  return $rc
}

status=0
echo "== Helix, $nodes nodes =="
helix_data=$out/helix-data
scripts/local-cluster.sh stop --data-dir "$helix_data" >/dev/null 2>&1 || true
rm -rf "$helix_data"
RUST_LOG=${RUST_LOG:-warn} scripts/local-cluster.sh start --nodes "$nodes" --base-port 29092 --data-dir "$helix_data"
mapfile -t helix_pids < <(for i in $(seq 1 "$nodes"); do cat "$helix_data/node$i.pid"; done)
measure helix "$(bootstrap 29092)" "${helix_pids[@]}" || status=1
scripts/local-cluster.sh stop --data-dir "$helix_data"
# Keep the logs, not the gigabytes of data: a disk filling up across runs
# slows every later run's writes (seen: 1.4 GB left, throughput halved).
for f in "$helix_data"/node*.log; do mv "$f" "$out/helix-$(basename "$f")"; done
rm -rf "$helix_data"

echo "== Apache Kafka 3.9.1, $nodes nodes =="
export DATA=$out/kafka-data
bash "$bench/cluster.sh" stop >/dev/null 2>&1 || true
rm -rf "$DATA"
bash "$bench/cluster.sh" start "$nodes"
mapfile -t kafka_pids < <(for i in $(seq 1 "$nodes"); do cat "$DATA/node$i/pid"; done)
measure kafka "$(bootstrap 19092)" "${kafka_pids[@]}" || status=1
bash "$bench/cluster.sh" stop
for i in $(seq 1 "$nodes"); do rm -rf "$DATA/node$i/data"; done

"$workload" chart --out "$out/compare.svg" "$out/helix.json" "$out/kafka.json"
"$workload" chart --out "$out/compare.html" "$out/helix.json" "$out/kafka.json"
python3 - "$out" <<'EOF'
import json, sys
out = sys.argv[1]
run = {b: json.load(open(f"{out}/{b}.json")) for b in ("helix", "kafka")}
brokers = {b: json.load(open(f"{out}/{b}.brokers.json")) for b in ("helix", "kafka")}
def gib(b):
    r = run[b]
    return r["produce"]["acknowledged"] * r["profile"]["producer"]["message_size"] / 2**30
rows = []
for b in ("helix", "kafka"):
    p = run[b]["produce"]
    cpu = brokers[b]["cpu_seconds"]
    rows.append((b, p["msgs_per_sec"], p["mib_per_sec"], p["latency_ms"]["p50"], p["latency_ms"]["p99"],
                 p["latency_ms"]["p999"], cpu / max(gib(b), 1e-9), max(brokers[b]["peak_rss_mib"]),
                 max(brokers[b]["peak_anon_mib"])))
print(f"{'':6} {'msg/s':>10} {'MiB/s':>8} {'p50 ms':>8} {'p99 ms':>8} {'p99.9':>8} {'CPU s/GiB':>10} "
      f"{'peak RSS MiB':>13} {'peak anon MiB':>14}")
for r in rows:
    print(f"{r[0]:6} {r[1]:>10,.0f} {r[2]:>8.1f} {r[3]:>8.2f} {r[4]:>8.2f} {r[5]:>8.2f} {r[6]:>10.1f} {r[7]:>13.1f} {r[8]:>14.1f}")
h, k = rows
print(f"throughput Helix/Kafka {h[2] / max(k[2], 1e-9):.2f}x | p99 Kafka/Helix {k[4] / max(h[4], 1e-9):.2f}x | "
      f"CPU per GiB Kafka/Helix {k[6] / max(h[6], 1e-9):.2f}x | peak anon memory per node Kafka/Helix {k[8] / max(h[8], 1e-9):.2f}x")
print("peak RSS is VmHWM: it counts log pages a broker maps to serve reads (Helix maps its segments), "
      "which the kernel can drop; peak anon (RssAnon, sampled every 0.5 s) is the broker's own memory")
print(f"chart: {out}/compare.svg, {out}/compare.html")
EOF
exit $status
