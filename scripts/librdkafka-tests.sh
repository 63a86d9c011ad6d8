#!/usr/bin/env bash
# librdkafka's own test suite against a 3-node Helix cluster (a hand run,
# not in CI: building its test runner takes about 8 minutes on 2 cores).
#
#   scripts/librdkafka-tests.sh                 # the tests listed below
#   TESTS=0011,0012 scripts/librdkafka-tests.sh # these
#   QUICK=1 scripts/librdkafka-tests.sh         # its whole quick suite (-Q -E)
#
# The source is the librdkafka that the rdkafka-sys crate vendors (the
# workspace builds it anyway, so no other download), copied and built once
# into ~/.cache/helix-tests. The cluster is started on --base-port (default
# 39092) with --default-partitions 4, an authorizer that allows what no
# ACL covers and Kafka's group.initial.rebalance.delay.ms (3000; Helix's
# default is 0, ADR 0020: the static-membership and cooperative tests expect
# both of their consumers in the first generation), as the suite's own
# brokers (trivup) are configured; Kafka version 3.9.1 is announced to the suite so it runs
# the tests of every feature 3.9 has. Tests that need a Kafka installation
# (KAFKA_PATH: 0052, 0077, 0109, 0115, 0119) fail without one on Kafka too.
set -euo pipefail
cd "$(dirname "$0")/.."
cluster=$PWD/scripts/local-cluster.sh

base=${BASE_PORT:-39092}
tests=${TESTS:-0001,0002,0003,0004,0005,0007,0008,0011,0012,0013,0014,0015,0017,0018,0019,0020,0021,0022,0026,0028,0029,0030,0031,0033,0034,0036,0038,0040,0041,0042,0044,0045,0046,0047,0048,0049,0050,0051,0053,0054,0056,0057,0059,0060,0061,0063,0064,0065,0067,0069,0070,0073,0074,0075,0076,0081,0082,0084,0085,0088,0089,0090,0091,0092,0093,0094,0098,0099,0101,0102,0103,0107,0110,0112,0113,0114,0116,0118,0120,0122,0125,0129,0130,0132,0137,0140}
cache=${HELIX_TEST_CACHE:-$HOME/.cache/helix-tests}

src=$(cargo metadata --format-version 1 2>/dev/null | python3 -c '
import json, sys, os
for p in json.load(sys.stdin)["packages"]:
    if p["name"] == "rdkafka-sys":
        print(os.path.join(os.path.dirname(p["manifest_path"]), "librdkafka"))
        break')
[[ -d $src/tests ]] || { echo "librdkafka source not found (rdkafka-sys): $src" >&2; exit 1; }
version=$(basename "$(dirname "$src")")
work=$cache/librdkafka-$version
if [[ ! -x $work/tests/test-runner ]]; then
  rm -rf "$work" && mkdir -p "$cache" && cp -r "$src" "$work" && chmod -R u+w "$work"
  (cd "$work" && ./configure --disable-gssapi >/dev/null && make -j"$(nproc)" libs >/dev/null \
     && make -j"$(nproc)" -C tests build >/dev/null)
fi

data=$(mktemp -d /tmp/helix-librdkafka.XXXXXX)
trap '"$cluster" stop --data-dir "$data" >/dev/null 2>&1 || true; rm -rf "$data"' EXIT
"$cluster" start --nodes 3 --base-port "$base" --data-dir "$data" -- --default-partitions 4 \
  --authorizer standard --allow-everyone-if-no-acl-found true --group-initial-rebalance-delay-ms 3000
printf 'metadata.broker.list=127.0.0.1:%s,127.0.0.1:%s,127.0.0.1:%s\ntest.timeout.multiplier=3\ntest.topic.random=true\n' \
  "$base" $((base + 1)) $((base + 2)) > "$work/tests/test.conf"
cd "$work/tests"
if [[ ${QUICK:-0} == 1 ]]; then
  TEST_KAFKA_VERSION=3.9.1 ./run-test.sh -Q -E
else
  TESTS=$tests TEST_KAFKA_VERSION=3.9.1 ./run-test.sh -E
fi
