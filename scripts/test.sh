#!/usr/bin/env bash
# The whole test suite, as CI runs it: system packages, formatting, lints, then every test of the
# workspace (schedules against the oracle, collectives over real TCP with threads and with
# processes under psyrun, launcher supervision and failure handling, psybench end to end, and the
# MPI backend against Open MPI under mpirun, psyrun across hosts over SSH and inside Slurm
# allocations of one host and of three nodes: multihost.rs, slurm.rs, slurm_nodes.rs, root only),
# then the Python package (built with maturin into the virtual environment setup.sh made; pytest
# under psyrun). Ends with one summary line.
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/setup.sh
# The suite asserts the built-in algorithm choices: a tuning file on this machine must not change
# them (tests of tuning files set PSY_TUNING themselves).
export PSY_TUNING=off
cargo fmt --all -- --check
# Without features psyne needs no MPI; with them (the MPI backend) Open MPI is used for real.
cargo clippy --workspace --all-targets -- -D warnings
cargo clippy --workspace --all-targets --all-features -- -D warnings

log=$(mktemp)
trap 'rm -f "$log"' EXIT
cargo test --workspace --all-targets --all-features 2>&1 | tee "$log"
cargo test --workspace --doc --all-features 2>&1 | tee -a "$log"

# The Python package: build it into the venv setup.sh made, then its pytest suites (which run the
# psyrun the Rust tests just built). Its closing line joins the summary below.
scripts/test-python.sh "${CARGO_TARGET_DIR:-target}/debug/psyrun" 2>&1 | tee -a "$log"
awk '/^test result:/ { for (i = 1; i <= NF; i++) { if ($(i+1) ~ /^passed/) p += $i; if ($(i+1) ~ /^failed/) f += $i } }
     END { printf "summary: %d passed, %d failed\n", p, f }' "$log"
