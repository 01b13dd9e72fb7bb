#!/usr/bin/env bash
# The whole test suite, as CI runs it: system packages, formatting, lints, then every test of the
# workspace (schedules against the oracle, collectives over real TCP with threads and with
# processes under psyrun, launcher supervision and failure handling).
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/setup.sh
cargo fmt --all -- --check
cargo clippy --workspace --all-targets -- -D warnings
cargo test --workspace --all-targets
cargo test --workspace --doc
