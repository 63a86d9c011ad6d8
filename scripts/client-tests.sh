#!/usr/bin/env bash
# The real-client tests (tests/): real Kafka clients (kcat, confluent-kafka,
# kafka-python, the Java client) against a real broker. See docs/testing.md.
#
#   scripts/client-tests.sh [pytest args...]
#
# Target: the helix-server binary in $HELIX_SERVER_BIN (default
# target/release/helix-server), started by the tests; or any running broker
# with HELIX_TEST_BOOTSTRAP=host:port; or an Apache Kafka the tests start from
# HELIX_TEST_KAFKA_LIBS=dir-of-jars. HELIX_TEST_JOBS sets the parallelism
# (default 2: one pytest-xdist worker per core, one test module per worker).
set -euo pipefail
cd "$(dirname "$0")/.."

jobs=${HELIX_TEST_JOBS:-2}
args=(-q)
if [[ $jobs -gt 1 ]] && python3 -c 'import xdist' 2>/dev/null; then
  # A crashed worker (conftest.py's watchdog ended a hung test) is not
  # replaced: with loadfile, xdist would run the hung test again on it.
  args+=(-n "$jobs" --dist loadfile --max-worker-restart 0)
fi
exec python3 -m pytest "${args[@]}" tests "$@"
