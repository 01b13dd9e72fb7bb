#!/usr/bin/env bash
# The Python package's tests: builds python/ (maturin, release) into the virtual environment
# scripts/setup.sh made (PSYNE_VENV, default /opt/psyne-venv), then runs pytest on python/tests
# with the psyrun given as $1 (default: target/release/psyrun, built if missing). Ends with
# pytest's summary and a "test result:" line that scripts/ci/test.sh adds to its own.
set -euo pipefail
cd "$(dirname "$0")/../.."

venv="${PSYNE_VENV:-/opt/psyne-venv}"
psyrun="${1:-${CARGO_TARGET_DIR:-target}/release/psyrun}"
if [ ! -x "$psyrun" ]; then
  cargo build --release -p psyrun
  psyrun="${CARGO_TARGET_DIR:-target}/release/psyrun"
fi
if [ ! -x "$venv/bin/python" ]; then
  echo "test-python.sh: no Python environment at $venv; run scripts/setup.sh" >&2
  exit 1
fi

VIRTUAL_ENV="$venv" PATH="$venv/bin:$PATH" "$venv/bin/maturin" develop --release --quiet -m python/Cargo.toml
pylog=$(mktemp)
trap 'rm -f "$pylog"' EXIT
PSYRUN="$(realpath "$psyrun")" "$venv/bin/python" -m pytest -q -p no:cacheprovider python/tests 2>&1 | tee "$pylog"
tail -n 1 "$pylog" | awk '{ p = 0; f = 0; for (i = 1; i < NF; i++) { if ($(i+1) ~ /^passed/) p = $i; if ($(i+1) ~ /^failed/) f = $i } printf "test result: python. %d passed; %d failed;\n", p, f }'
