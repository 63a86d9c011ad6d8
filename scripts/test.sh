#!/usr/bin/env bash
# The whole test suite, exactly as CI runs it (README.md names this command).
# Format, lints, the layering check, every Rust test (unit, proptest, simulation), then the
# real-client tests in tests/ against the real helix-server binary.
set -euo pipefail
cd "$(dirname "$0")/.."

cargo fmt --all -- --check
cargo clippy --workspace --all-targets -- -D warnings
python3 scripts/layers.py   # helix-server's layers run one way (docs/architecture.md)
cargo test --workspace
# The vendored Kafka codec carries Helix's patches (legacy message sets,
# bounded allocations): its own tests run too.
cargo test -p kafka-protocol --lib

if [[ -d tests ]] && compgen -G "tests/test_*.py" >/dev/null; then
  cargo build --release -p helix-server
  export HELIX_SERVER_BIN="$PWD/target/release/helix-server"
  scripts/client-tests.sh
fi
