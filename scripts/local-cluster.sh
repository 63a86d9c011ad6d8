#!/usr/bin/env bash
# A local Helix cluster on 127.0.0.1 in one command.
#
#   scripts/local-cluster.sh start  [--nodes 3|5] [--base-port P] [--data-dir D] [--secure] [-- helix-server flags...]
#   scripts/local-cluster.sh stop   [--data-dir D]
#   scripts/local-cluster.sh status [--data-dir D]
#
# Node i (1..n) serves Kafka on P+i-1, its peer transport on P+100+i-1 and
# its metrics endpoint (/metrics, /health, /ready) on P+200+i-1
# (defaults: 3 nodes, P = 9092, D = ./helix-cluster). The cluster file is
# D/cluster.toml; node i keeps its data in D/node<i>, its log in
# D/node<i>.log and its pid in D/node<i>.pid. The binary is $HELIX_SERVER_BIN,
# else target/release/helix-server (built when missing).
#
# --secure: the client listener of every node is SASL_SSL (SCRAM-SHA-512,
# also SCRAM-SHA-256 and PLAIN) with a certificate from a CA generated for
# the cluster (openssl), one user `admin` with a random password, ACLs
# enforced with `admin` as the one super user; the nodes
# talk to each other over mutual TLS with the same CA. Written
# into D/secure/: ca.pem (the CA certificate), client.properties (librdkafka's
# names: `kcat -F D/secure/client.properties`, confluent-kafka) and
# java-client.properties (the Java client's names, for the Kafka tools'
# --command-config). Kept across restarts; `stop` leaves them.
set -euo pipefail
cd "$(dirname "$0")/.."

cmd=${1:-}
shift || true
nodes=3
base=9092
data=./helix-cluster
extra=()
secure=0
while (($#)); do
  case $1 in
    --secure) secure=1; shift ;;
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

# The cluster's CA, one certificate per node (for 127.0.0.1 and localhost),
# the admin user's SCRAM credentials and the client property files, made
# once in $data/secure.
make_secure() (
  local dir=$data/secure
  umask 077
  mkdir -p "$dir"
  command -v openssl >/dev/null || { echo "--secure needs the openssl command" >&2; exit 1; }
  ossl() { openssl "$@" >/dev/null 2>&1 || { echo "openssl $1 failed" >&2; exit 1; }; }
  if [[ ! -f $dir/ca.pem ]]; then
    ossl req -x509 -newkey rsa:2048 -nodes -days 365 -subj "/CN=helix-local-ca" \
      -keyout "$dir/ca.key" -out "$dir/ca.pem"
  fi
  for i in $(seq 1 "$nodes"); do
    [[ -f $dir/node$i-keystore.pem ]] && continue
    ossl req -newkey rsa:2048 -nodes -subj "/CN=helix-node-$i" \
      -keyout "$dir/node$i.key" -out "$dir/node$i.csr"
    printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth,clientAuth\n' >"$dir/node$i.ext"
    ossl x509 -req -in "$dir/node$i.csr" -CA "$dir/ca.pem" -CAkey "$dir/ca.key" \
      -CAcreateserial -days 365 -out "$dir/node$i.pem" -extfile "$dir/node$i.ext"
    cat "$dir/node$i.pem" "$dir/node$i.key" >"$dir/node$i-keystore.pem"
    rm -f "$dir/node$i.csr" "$dir/node$i.ext"
  done
  if [[ ! -f $dir/users.toml ]]; then
    local password
    password=$(openssl rand -hex 16)
    for mechanism in SCRAM-SHA-512 SCRAM-SHA-256; do
      printf '%s\n' "$password" | "$bin" scram-credential --user admin --mechanism "$mechanism"
      echo
    done >"$dir/users.toml"
    local ca addrs=() bootstrap
    ca=$(cd "$dir" && pwd)/ca.pem
    for i in $(seq 1 "$nodes"); do addrs+=("127.0.0.1:$((base + i - 1))"); done
    bootstrap=$(IFS=,; echo "${addrs[*]}")
    cat >"$dir/client.properties" <<PROPS
bootstrap.servers=$bootstrap
security.protocol=SASL_SSL
sasl.mechanism=SCRAM-SHA-512
sasl.username=admin
sasl.password=$password
ssl.ca.location=$ca
PROPS
    cat >"$dir/java-client.properties" <<PROPS
bootstrap.servers=$bootstrap
security.protocol=SASL_SSL
sasl.mechanism=SCRAM-SHA-512
sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required username="admin" password="$password";
ssl.truststore.type=PEM
ssl.truststore.location=$ca
PROPS
  fi
)

# The flags that make node $1 secure.
secure_flags() {
  local dir=$data/secure i=$1
  printf '%s\n' --listeners "SASL_SSL://127.0.0.1:$((base + i - 1))" \
    --ssl-keystore-location "$dir/node$i-keystore.pem" \
    --ssl-truststore-location "$dir/ca.pem" \
    --sasl-users-file "$dir/users.toml" \
    --sasl-enabled-mechanisms SCRAM-SHA-512,SCRAM-SHA-256,PLAIN \
    --authorizer standard --super-users User:admin
  if ((nodes > 1)); then
    printf '%s\n' --peer-ssl-keystore-location "$dir/node$i-keystore.pem" \
      --peer-ssl-truststore-location "$dir/ca.pem"
  fi
}

start() {
  if [[ ! -x $bin ]]; then
    echo "building helix-server (release)..."
    cargo build --release -p helix-server
  fi
  mkdir -p "$data"
  ((secure)) && make_secure
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
    local flags=()
    ((secure)) && mapfile -t flags < <(secure_flags "$i")
    RUST_LOG=${RUST_LOG:-info} nohup "$bin" --config "$conf" --node-id "$i" \
      --data-dir "$data/node$i" "${flags[@]}" "${extra[@]}" >>"$data/node$i.log" 2>&1 </dev/null &
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
  if ((secure)); then
    echo "SASL_SSL (SCRAM-SHA-512, user admin); CA: $data/secure/ca.pem"
    echo "  kcat -F $data/secure/client.properties -L"
    echo "  kafka-topics.sh --bootstrap-server 127.0.0.1:$base --command-config $data/secure/java-client.properties --list"
  fi
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
  *) sed -n '2,22p' "$0" >&2; exit 2 ;;
esac
