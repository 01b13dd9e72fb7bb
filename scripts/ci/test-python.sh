#!/usr/bin/env bash
# The Python package's tests: builds python/ (maturin, the tests' dev profile) into the virtual
# environment scripts/setup.sh made (PSYNE_VENV, default /opt/psyne-venv), then runs pytest on
# python/tests with the psyrun given as $1 (default: target/release/psyrun, built if missing).
# Ends with pytest's summary and a "test result:" line that scripts/ci/test.sh adds to its own.
#
# /dev/shm: pytest checks that no test leaves a psyne segment there. As root, pytest runs in a
# mount namespace of its own with a fresh tmpfs on /dev/shm, so that those checks see only its own
# jobs' segments whatever runs beside (in scripts/ci/test.sh, the root tier's MPI and psyne jobs),
# and nothing it leaves outlives it; PSYNE_TEST_SHM=own tells the tests so (their mpirun jobs
# then need not wait for the Rust tests' MPI lock). Without root (or mount namespaces) it uses
# the machine's (PSYNE_TEST_SHM=shared).
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

run=()
shm=shared
if [ "$(id -u)" = 0 ] && unshare --mount true 2>/dev/null; then
  shm=own
  # shellcheck disable=SC2016 # $@ is the inner shell's
  run=(unshare --mount --propagation private sh -c 'mount -t tmpfs -o mode=1777 psyne-pytest /dev/shm && exec "$@"' sh)
fi

# The dev profile, as the Rust tests build: about 10 s less to build than --release, and the
# tests take as long (168.7 s against 169.2 s here: they are small calls).
VIRTUAL_ENV="$venv" PATH="$venv/bin:$PATH" "$venv/bin/maturin" develop --quiet -m python/Cargo.toml
# The C++ half of psyne.torch's blocking all_reduce is built on first import (about 30 s here):
# once now, so that no test's deadline pays for it, and loudly if it cannot be.
PSY_TORCH_HOT=on "$venv/bin/python" -c "import psyne.torch"
pylog=$(mktemp)
trap 'rm -f "$pylog"' EXIT
echo "pytest's /dev/shm: $shm"
PSYNE_TEST_SHM=$shm PSYRUN="$(realpath "$psyrun")" "${run[@]}" "$venv/bin/python" -m pytest -q -p no:cacheprovider python/tests 2>&1 | tee "$pylog"
tail -n 1 "$pylog" | awk '{ p = 0; f = 0; for (i = 1; i < NF; i++) { if ($(i+1) ~ /^passed/) p = $i; if ($(i+1) ~ /^failed/) f = $i } printf "test result: python. %d passed; %d failed;\n", p, f }'
