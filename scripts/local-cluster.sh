#!/usr/bin/env bash
# A local Helix cluster on 127.0.0.1 in one command.
#
#   scripts/local-cluster.sh start  [--nodes 3|5] [--base-port P] [--data-dir D] [-- helix-server flags...]
#   scripts/local-cluster.sh stop   [--data-dir D]
#   scripts/local-cluster.sh status [--data-dir D]
#
# Node i (1..n) serves Kafka on P+i-1, its peer transport on P+100+i-1 and
# its metrics endpoint (/metrics, /health, /ready) on P+200+i-1
# (defaults: 3 nodes, P = 9092, D = ./helix-cluster). The cluster file is
# D/cluster.toml; node i keeps its data in D/node<i>, its log in
# D/node<i>.log and its pid in D/node<i>.pid. The binary is $HELIX_SERVER_BIN,
# else target/release/helix-server (built when missing).
set -euo pipefail
cd "$(dirname "$0")/.."

cmd=${1:-}
shift || true
nodes=3
base=9092
data=./helix-cluster
extra=()
while (($#)); do
  case $1 in
    --nodes) nodes=$2; shift 2 ;;
    --base-port) base=$2; shift 2 ;;
    --data-dir) data=$2; shift 2 ;;
    --) shift; extra=("$@"); break ;;
    *) echo "local-cluster.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
[[ $nodes =~ ^[1-9][0-9]*$ ]] || { echo "--nodes must be a positive number" >&2; exit 2; }
[[ $base =~ ^[0-9]+$ ]] || { echo "--base-port must be a number" >&2; exit 2; }
bin=${HELIX_SERVER_BIN:-target/release/helix-server}

alive() { [[ -f $1 ]] && kill -0 "$(cat "$1")" 2>/dev/null; }

port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

start() {
  if [[ ! -x $bin ]]; then
    echo "building helix-server (release)..."
    cargo build --release -p helix-server
  fi
  mkdir -p "$data"
  local conf=$data/cluster.toml
  : >"$conf"
  for i in $(seq 1 "$nodes"); do
    printf '[[nodes]]\nid = %d\nkafka = "127.0.0.1:%d"\npeer = "127.0.0.1:%d"\nmetrics = "127.0.0.1:%d"\n\n' \
      "$i" $((base + i - 1)) $((base + 100 + i - 1)) $((base + 200 + i - 1)) >>"$conf"
  done
  for i in $(seq 1 "$nodes"); do
    if alive "$data/node$i.pid"; then
      echo "node $i already running (pid $(cat "$data/node$i.pid"))"
      continue
    fi
    RUST_LOG=${RUST_LOG:-info} nohup "$bin" --config "$conf" --node-id "$i" \
      --data-dir "$data/node$i" "${extra[@]}" >>"$data/node$i.log" 2>&1 </dev/null &
    echo $! >"$data/node$i.pid"
  done
  local deadline=$((SECONDS + 60)) bootstrap=()
  for i in $(seq 1 "$nodes"); do
    local port=$((base + i - 1))
    until port_open "$port"; do
      if ! alive "$data/node$i.pid"; then
        echo "node $i exited; its log:" >&2
        tail -n 30 "$data/node$i.log" >&2
        exit 1
      fi
      if ((SECONDS > deadline)); then
        echo "node $i not serving on $port after 60 s (log: $data/node$i.log)" >&2
        exit 1
      fi
      sleep 0.2
    done
    bootstrap+=("127.0.0.1:$port")
  done
  echo "cluster of $nodes nodes is up; bootstrap: $(IFS=,; echo "${bootstrap[*]}")"
  echo "metrics (/metrics, /health, /ready): http://127.0.0.1:$((base + 200)) .. :$((base + 200 + nodes - 1))"
}

stop() {
  local any=0
  for pidfile in "$data"/node*.pid; do
    [[ -f $pidfile ]] || continue
    if alive "$pidfile"; then
      kill -TERM "$(cat "$pidfile")"
      any=1
    fi
  done
  local deadline=$((SECONDS + 30))
  for pidfile in "$data"/node*.pid; do
    [[ -f $pidfile ]] || continue
    while alive "$pidfile" && ((SECONDS < deadline)); do sleep 0.2; done
    if alive "$pidfile"; then
      echo "$(basename "$pidfile" .pid) did not stop on SIGTERM; killing" >&2
      kill -KILL "$(cat "$pidfile")" || true
    fi
    rm -f "$pidfile"
  done
  ((any)) && echo "stopped" || echo "nothing was running"
}

status() {
  local conf=$data/cluster.toml
  [[ -f $conf ]] || { echo "no cluster in $data"; exit 1; }
  local i=0
  grep -E '^kafka = ' "$conf" | sed -E 's/kafka = "(.*)"/\1/' | while read -r addr; do
    i=$((i + 1))
    local state=down pid=-
    if alive "$data/node$i.pid"; then
      pid=$(cat "$data/node$i.pid")
      state=running
      port_open "${addr##*:}" && state=serving
    fi
    printf 'node %d  %-21s  pid %-8s  %s\n' "$i" "$addr" "$pid" "$state"
  done
}

case $cmd in
  start) start ;;
  stop) stop ;;
  status) status ;;
  *) sed -n '2,14p' "$0" >&2; exit 2 ;;
esac
