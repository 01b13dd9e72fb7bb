#!/usr/bin/env bash
# The test suite, as CI runs it: `scripts/ci/test.sh` runs everything and ends with one summary line
# (`summary: N passed, 0 failed`). `scripts/ci/test.sh TIER...` runs some tiers alone:
#   lint     formatting, then clippy with every feature and once more without (the code behind
#            `cfg(feature)` switches in psyne, psyrun and psybench)
#   unit     every crate's unit tests (`--lib`, bins, examples), the doc tests, and the schedule
#            simulations against the oracle (`sim::` of psyne's tests/it)
#   process  the integration tests on loopback: collectives over real TCP and shared memory with
#            threads, processes under psyrun, launcher supervision and failures, psybench end to
#            end (each crate's tests/it, less `sim::` and `root::`)
#   root     the tests that need root and the packages scripts/setup.sh installs (`root::` of
#            launcher/tests/it and bench/tests/it): psyrun across hosts over SSH in network
#            namespaces, inside Slurm allocations of one host and of three nodes, the MPI backend
#            under mpirun, ordinary MPI programs served by psyrun's PMIx and PMI services. Without
#            root or a package, each says why and passes.
#   python   the Python package (built with maturin into the venv setup.sh made; pytest under
#            the psyrun built here)
#   all      every tier above (the default); the root tier runs beside the others
# The programs the tests run (psyrun, psyne-check, psybench, psyne's examples, train) are built
# once, first, with the tests' profile and features (`cargo build` below); tests never build.
# Each phase's time is printed at the end, before the summary.
set -euo pipefail
cd "$(dirname "$0")/../.."

usage="usage: $0 [all|lint|unit|process|root|python]..."
tiers=()
for t in "${@:-all}"; do
  case $t in
    all) tiers+=(lint unit process root python) ;;
    lint | unit | process | root | python) tiers+=("$t") ;;
    -h | --help) echo "$usage"; exit 0 ;;
    *) echo "$usage" >&2; exit 2 ;;
  esac
done
wants() { [[ " ${tiers[*]} " == *" $1 "* ]]; }

log=$(mktemp)
times=$(mktemp)
# busy: the machine's CPU time so far (user, nice, system, irq, softirq), in clock ticks.
busy() { awk '/^cpu / { print $2 + $3 + $4 + $7 + $8 }' /proc/stat; }
hz=$(getconf CLK_TCK)
# phase NAME COMMAND...: runs COMMAND (its output also into the log the summary counts, or into
# $phase_log), and records how long it took and how much CPU the whole machine spent meanwhile
# (this phase's and any tier's beside it: where the suite's core-seconds go).
phase() {
  local name=$1 start end b0 b1
  shift
  start=$(date +%s.%N)
  b0=$(busy)
  echo "=== $name: $*"
  "$@" 2>&1 | tee -a "${phase_log:-$log}"
  end=$(date +%s.%N)
  b1=$(busy)
  awk -v n="$name" -v s="$start" -v e="$end" -v c="$(((b1 - b0) / hz))" \
    'BEGIN { printf "%-10s %6.1f s %6d core-s busy\n", n, e - s, c }' >>"$times"
}

started_load=$(uptime | sed 's/.*load average//')
started=$(date +%s.%N)
started_busy=$(busy)
phase setup scripts/setup.sh
# The suite asserts the built-in algorithm choices: a tuning file on this machine must not change
# them (tests of tuning files set PSY_TUNING themselves).
export PSY_TUNING=off
# A clone built once gains nothing from incremental compilation's caches, only their cost (set
# CARGO_INCREMENTAL=1 to keep them between runs while editing).
export CARGO_INCREMENTAL=${CARGO_INCREMENTAL:-0}
# Every cargo command selects the whole workspace with every feature, so that all of them share
# one resolution of features and nothing is compiled twice.
features=(--all-features)
# Where the programs the tests run are built (below).
bins=${CARGO_TARGET_DIR:-target}/debug

if wants lint; then
  phase fmt cargo fmt --all -- --check
fi

# clippy_in_build: whether the builds below run clippy too. `cargo clippy` is `cargo check` with
# clippy-driver as the workspace's rustc wrapper; the same wrapper on `cargo build` lints every
# workspace target it compiles while compiling it, so the suite's builds (every target, every
# feature) are its clippy pass, with no second compilation of the workspace and its dependencies
# (about a minute here). clippy-driver takes its lint flags from CLIPPY_ARGS as `cargo clippy`
# passes them; a probe first checks that this driver fails a file with a lint in it, else clippy
# runs on its own after the build (as it does when only the lint tier runs).
clippy_in_build=0
if wants lint && { wants unit || wants process || wants root || wants python; }; then
  driver=$(command -v clippy-driver || true)
  clippy_args=-D__CLIPPY_HACKERY__warnings__CLIPPY_HACKERY__ # `-D warnings`, as cargo clippy joins it
  probe=$(mktemp -d)
  printf 'pub fn f() -> u8 {\n    return 1;\n}\n' >"$probe/lib.rs"
  if [ -n "$driver" ] &&
    ! CLIPPY_ARGS=$clippy_args "$driver" rustc --edition 2021 --crate-type lib --emit metadata \
      -o "$probe/lib.rmeta" "$probe/lib.rs" >"$probe/out" 2>&1 &&
    grep -q needless_return "$probe/out"; then
    clippy_in_build=1
    export RUSTC_WORKSPACE_WRAPPER=$driver CLIPPY_ARGS=$clippy_args
  else
    echo "test.sh: clippy-driver did not fail a probe with a lint; clippy runs on its own" >&2
  fi
  rm -rf "$probe"
fi

if wants unit || wants process || wants root || wants python; then
  # Everything the tests run and every test binary, in one profile and feature set: the programs
  # (launcher/tests/it/common: BUILD_COMMAND), then the test binaries, which reuse the libraries.
  phase build cargo build --workspace --bins --examples "${features[@]}"
  phase build-tests cargo test --workspace --all-targets "${features[@]}" --no-run
fi
# Tiers that run beside the others, in the background, each into a log of its own that is shown
# (and counted in the summary) when it has ended: the root tier, mostly waiting (on SSH clusters,
# Slurm, MPI jobs, one at a time by their machine-wide locks). A failing tier ends the script: the
# tiers beside are waited for first, so nothing is left running, and their output is shown.
beside_pids=()
beside_names=()
beside_logs=()
# beside NAME COMMAND...: runs phase NAME in the background.
beside() {
  local name=$1 blog
  shift
  blog=$(mktemp)
  (phase_log=$blog phase "$name" "$@") >/dev/null 2>&1 &
  beside_pids+=("$!")
  beside_names+=("$name")
  beside_logs+=("$blog")
}
# Waits for every tier beside, shows each one's output and adds it to the log the summary counts;
# returns the first failing tier's status.
wait_beside() {
  local i s status=0
  for i in "${!beside_pids[@]}"; do
    s=0
    wait "${beside_pids[$i]}" || s=$?
    echo "=== ${beside_names[$i]} (ran beside the tiers above):"
    cat "${beside_logs[$i]}"
    cat "${beside_logs[$i]}" >>"$log"
    rm -f "${beside_logs[$i]}"
    [ "$status" != 0 ] || status=$s
  done
  beside_pids=()
  return "$status"
}
trap 'wait_beside || true; rm -f "$log" "$times"' EXIT

# started_tests LOG: waits (at most two minutes) until cargo test writing LOG runs its tests.
started_tests() {
  local i
  for i in $(seq 1200); do
    grep -q '^     Running ' "$1" 2>/dev/null && return 0
    sleep 0.1
  done
  echo "test.sh: the tests beside have not started after 120 s; going on" >&2
}

others() { # whether any tier but $1 is wanted
  local t
  for t in lint unit process root python; do
    [ "$t" != "$1" ] && wants "$t" && return 0
  done
  return 1
}
# The root tier runs a thread per test, so that every test starts at once and waits for its
# machine-wide lock: libtest starts tests in name order, and with fewer threads than tests the
# threads all wait on the MPI lock (mpi::, mpi_programs::) while the cluster's lock (multihost::,
# slurm::) stands idle (with 16 threads, 108 s of it in a run here). Waiting costs nothing.
root_test=(cargo test --workspace "${features[@]}" --test it -- root:: --test-threads 128)
if wants root; then
  if others root; then
    beside root "${root_test[@]}"
    # cargo locks the target directory until its tests run: the next cargo command (clippy)
    # waits until the root tier's has started them, so that it is not the one kept waiting.
    started_tests "${beside_logs[-1]}"
  else
    phase root "${root_test[@]}"
  fi
fi

if wants lint; then
  # One full pass with every feature (the MPI backend, RDMA), which is how the tests build: the
  # builds above were it (clippy_in_build), or it runs here, after the build when there was one,
  # sharing its build scripts and proc-macros (about half of a check from nothing). Then, without
  # features, the targets whose code has `cfg(feature)` switches (psyne's lib and its unit tests,
  # psyne-check, psybench and their tests), so code only the feature-less build compiles is
  # linted too.
  [ "$clippy_in_build" = 1 ] || phase clippy cargo clippy --workspace --all-targets "${features[@]}" -- -D warnings
  phase clippy-nf cargo clippy -p psyne -p psyrun -p psybench --lib --bins --tests -- -D warnings
  # The module docs are the architecture: every intra-doc link in them must resolve, private
  # items included (the crates' overviews name their private modules, so those links are allowed).
  RUSTDOCFLAGS="-D warnings -A rustdoc::private_intra_doc_links" \
    phase rustdoc cargo doc --workspace --no-deps --document-private-items "${features[@]}" -q
  # Every path, link and anchor the README, docs/ and results/README.md name exists, and every
  # psyrun and psybench flag they show is in that tool's --help (built above when a test tier
  # runs; otherwise the flags are not checked).
  if [ -x "$bins/psyrun" ] && [ -x "$bins/psybench" ]; then
    phase docs python3 scripts/ci/check-docs.py --bin-dir "$bins"
  else
    phase docs python3 scripts/ci/check-docs.py
  fi
fi

if wants unit; then
  phase unit cargo test --workspace "${features[@]}" --lib --bins --examples --benches
  phase sim cargo test --workspace "${features[@]}" --test it -- sim::
  phase doc cargo test --workspace --doc "${features[@]}"
fi
if wants process; then
  phase process cargo test --workspace "${features[@]}" --test it -- --skip sim:: --skip root::
fi
if wants python; then
  # Builds the Python package into the venv setup.sh made, then its pytest suites, which run the
  # psyrun built above. Its closing line joins the summary below. (The extension builds as users
  # build it: rustc, not the linting wrapper.) It runs after the process tier, not beside it:
  # beside, with pytest in a /dev/shm of its own, the suite took 702 s against 665 s here (the
  # three tiers at once ran 1,217 core-seconds against 1,096).
  phase python env -u RUSTC_WORKSPACE_WRAPPER -u CLIPPY_ARGS scripts/ci/test-python.sh "$bins/psyrun"
fi
wait_beside

echo "time per phase, and the machine's CPU meanwhile (load average at the start$started_load; at the end$(uptime | sed "s/.*load average//"))":
cat "$times"
awk -v s="$started" -v e="$(date +%s.%N)" -v c="$((($(busy) - started_busy) / hz))" \
  'BEGIN { printf "%-10s %6.1f s %6d core-s busy\n", "total", e - s, c }'
awk '/^test result:/ { for (i = 1; i <= NF; i++) { if ($(i+1) ~ /^passed/) p += $i; if ($(i+1) ~ /^failed/) f += $i } }
     END { printf "summary: %d passed, %d failed\n", p, f }' "$log"
