#!/usr/bin/env bash
# Produce at 20,000 records/s over PLAINTEXT, SSL and SASL_SSL (SCRAM-SHA-512),
# one Helix node beside one Apache Kafka 3.9.1 node configured the same way
# (issue 34's figures): each broker has the three listeners at once, the
# standard authorizer with super user admin and allow.everyone.if.no.acl.found
# (so the anonymous PLAINTEXT/SSL clients pass), one CA-signed certificate.
#
#   scripts/security_bench.sh [ROUNDS]    (default 2; Helix and Kafka alternate)
#   REVERSE=1 scripts/security_bench.sh   (SASL_SSL first: a JVM's first run is cold)
#
# Each run: ../shared/bench/kafka/rdkafka_bench.py, 1 producer, 300,000 x 1 KiB
# at --rate 20000, linger.ms 1, acks=all, a 6-partition topic (RF 1) per run.
# Prints one line per run: broker protocol records/s p50 p99 p99.9 (ms).
# Kafka comes from ../shared/bench/kafka/secure-broker.sh (jars in
# ~/.cache/helix-bench/kafka-3.9.1/libs).
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-2}
bench=../shared/bench/kafka
bin=${HELIX_SERVER_BIN:-target/release/helix-server}
work=$(mktemp -d /tmp/security-bench-XXXXXX)
trap 'kill "$(cat "$work/helix.pid" 2>/dev/null)" 2>/dev/null || true; DATA=$work/kafka "$bench/secure-broker.sh" stop >/dev/null 2>&1 || true' EXIT
password=$(openssl rand -hex 12)

# Helix: PLAINTEXT 39092, SSL 39093, SASL_SSL 39094.
certs=$work/certs
mkdir -p "$certs"
openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj /CN=bench-ca -keyout "$certs/ca.key" -out "$certs/ca.pem" 2>/dev/null
openssl req -newkey rsa:2048 -nodes -subj /CN=localhost -keyout "$certs/server.key" -out "$certs/server.csr" 2>/dev/null
printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\n' >"$certs/server.ext"
openssl x509 -req -in "$certs/server.csr" -CA "$certs/ca.pem" -CAkey "$certs/ca.key" -CAcreateserial \
  -days 2 -out "$certs/server.pem" -extfile "$certs/server.ext" 2>/dev/null
cat "$certs/server.pem" "$certs/server.key" >"$certs/keystore.pem"
printf '%s\n' "$password" | "$bin" scram-credential --user admin --mechanism SCRAM-SHA-512 >"$work/users.toml"

start_helix() {
  rm -rf "$work/helix-data"
  "$bin" --data-dir "$work/helix-data" --metrics-listen 127.0.0.1:39644 \
    --listeners PLAINTEXT://127.0.0.1:39092,SSL://127.0.0.1:39093,SASL_SSL://127.0.0.1:39094 \
    --ssl-keystore-location "$certs/keystore.pem" --sasl-users-file "$work/users.toml" \
    --sasl-enabled-mechanisms SCRAM-SHA-512 --authorizer standard --super-users User:admin \
    --allow-everyone-if-no-acl-found true >"$work/helix.log" 2>&1 &
  echo $! >"$work/helix.pid"
  for _ in $(seq 1 100); do (exec 3<>/dev/tcp/127.0.0.1/39094) 2>/dev/null && return 0; sleep 0.2; done
  echo "helix did not start; $work/helix.log" >&2; exit 1
}

start_kafka() {
  DATA=$work/kafka ADMIN_PASSWORD=$password EXTRA_CONFIG="listeners=SASL_SSL://127.0.0.1:29192,CONTROLLER://127.0.0.1:29193,PLAINTEXT://127.0.0.1:29194,SSL://127.0.0.1:29195
advertised.listeners=SASL_SSL://127.0.0.1:29192,PLAINTEXT://127.0.0.1:29194,SSL://127.0.0.1:29195
listener.security.protocol.map=SASL_SSL:SASL_SSL,CONTROLLER:SASL_PLAINTEXT,PLAINTEXT:PLAINTEXT,SSL:SSL
allow.everyone.if.no.acl.found=true" "$bench/secure-broker.sh" start >/dev/null
}

run() {  # broker protocol port ca
  local broker=$1 protocol=$2 port=$3 ca=$4 topic="sec-$1-$2-$RANDOM"
  local extra=(-X "security.protocol=$protocol")
  [[ $protocol != PLAINTEXT ]] && extra+=(-X "ssl.ca.location=$ca")
  [[ $protocol == SASL_SSL ]] && extra+=(-X sasl.mechanism=SCRAM-SHA-512 -X sasl.username=admin -X "sasl.password=$password")
  python3 - "$port" "$topic" "$protocol" "$ca" "$password" <<'PY'
import sys
from confluent_kafka.admin import AdminClient, NewTopic
port, topic, protocol, ca, pw = sys.argv[1:]
conf = {"bootstrap.servers": f"127.0.0.1:{port}", "security.protocol": protocol}
if protocol != "PLAINTEXT":
    conf["ssl.ca.location"] = ca
if protocol == "SASL_SSL":
    conf.update({"sasl.mechanism": "SCRAM-SHA-512", "sasl.username": "admin", "sasl.password": pw})
admin = AdminClient(conf)
admin.create_topics([NewTopic(topic, 6, 1)])[topic].result(60)
PY
  python3 "$bench/rdkafka_bench.py" "127.0.0.1:$port" "$topic" --count 300000 --size 1024 --rate 20000 \
    --linger 1 --acks all "${extra[@]}" --json "$work/out.json" >/dev/null
  python3 -c "
import json; o = json.load(open('$work/out.json')); l = o['lat_ms']
print('$broker', '$protocol', o['records_per_s'], l['p50'], l['p99'], l['p99.9'])"
}

echo "broker protocol records/s p50 p99 p99.9 (ms)"
for _ in $(seq 1 "$rounds"); do
  start_helix
  helix_order=(PLAINTEXT:39092 SSL:39093 SASL_SSL:39094)
  kafka_order=(PLAINTEXT:29194 SSL:29195 SASL_SSL:29192)
  if [[ ${REVERSE:-0} == 1 ]]; then
    helix_order=(SASL_SSL:39094 SSL:39093 PLAINTEXT:39092)
    kafka_order=(SASL_SSL:29192 SSL:29195 PLAINTEXT:29194)
  fi
  for p in "${helix_order[@]}"; do run helix "${p%%:*}" "${p##*:}" "$certs/ca.pem"; done
  kill "$(cat "$work/helix.pid")"; wait "$(cat "$work/helix.pid")" 2>/dev/null || true
  start_kafka
  for p in "${kafka_order[@]}"; do run kafka "${p%%:*}" "${p##*:}" "$work/kafka/tls/ca.pem"; done
  DATA=$work/kafka "$bench/secure-broker.sh" stop >/dev/null
done
