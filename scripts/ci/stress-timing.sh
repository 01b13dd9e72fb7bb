#!/usr/bin/env bash
# Runs the tests that used to depend on timing (ordering sleeps turned into events, wall-clock
# bounds turned into bounds from the job's own timeout, MASTER_PORT reservations, the env://
# roll call's verdict) ROUNDS times (default 20), COPIES copies at once (default 3), and reports
# how many runs of each passed. Exits 1 if any run failed. Heavy: run it on its own.
#   scripts/ci/stress-timing.sh [ROUNDS [COPIES]]
# STRESS_ROOT=1 adds the root tier's timing tests (SSH clusters: serialized by their lock).
set -euo pipefail
cd "$(dirname "$0")/../.."
rounds=${1:-20}
copies=${2:-3}
export PSY_TUNING=off

# crate|filter...: the tests of each crate's tests/it (cargo test filters, matched as substrings).
groups=(
  "psyne|strangers:: nonblocking::a_send_to_a_waiting_receiver failures::a_rank_that_never_calls failures::a_rank_that_leaves failures::a_board_call_has_one_outcome lazy_connections::a_collective_not_every_rank_joins mismatch_roles::a_board_wait_finds interrupt:: rdma::"
  "psyrun|env_rendezvous:: collectives::without_psyrun collectives::ranks_disagreeing collectives::a_rank_killed_during examples::torchrun_style supervision:: hosts_local::the_first_failure_names_its_rank restart::the_timeout shrink::a_stopped_rank root::mpi_examples::under_mpirun_without_pmix"
  "psybench|e2e::sizes_beyond"
)
if [ "${STRESS_ROOT:-0}" = 1 ]; then
  groups+=("psyrun|root::multihost::with_on_failure_continue root::multihost::a_host_whose_sshd_dies")
fi

# The binaries, once (the programs the tests run, then the test binaries, with the same features
# as scripts/ci/test.sh so nothing is compiled again); then each crate's tests/it binary is run
# directly, in its package's directory as cargo would.
cargo build --workspace --bins --examples --all-features
declare -A exe dir
while IFS='|' read -r name path src; do
  exe[$name]=$path
  dir[$name]=${src%/tests/it/main.rs}
done < <(cargo test --workspace --all-features --no-run --test it --message-format=json |
  python3 -c 'import json, sys
for m in map(json.loads, sys.stdin):
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["target"]["name"] == "it":
        print(m["package_id"].split("#")[1].split("@")[0], m["executable"], m["target"]["src_path"], sep="|")')

out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
echo "stress-timing: $rounds rounds x $copies copies; load: $(uptime | sed 's/.*load average/load average/')"
for ((round = 1; round <= rounds; round++)); do
  pids=()
  for ((copy = 1; copy <= copies; copy++)); do
    (
      for g in "${groups[@]}"; do
        crate=${g%%|*}
        read -r -a filters <<<"${g#*|}"
        log="$out/$round.$copy.$crate"
        (cd "${dir[$crate]}" && "${exe[$crate]}" "${filters[@]}") >"$log" 2>&1 || true
      done
    ) &
    pids+=($!)
  done
  for p in "${pids[@]}"; do wait "$p"; done
  echo "round $round done; load: $(uptime | sed 's/.*load average/load average/')"
done

# Per test (crate and name): how many of the rounds x copies runs passed.
status=0
for f in "$out"/*; do
  crate=${f##*.}
  sed -n "s/^test \(.*\) \.\.\. \(ok\|FAILED\)$/$crate \1 \2/p" "$f"
done | awk -v want=$((rounds * copies)) '
  { seen[$1 " " $2] = 1; if ($3 == "ok") ok[$1 " " $2]++ }
  END {
    fails = 0
    for (t in seen) {
      printf "%3d/%d passed  %s\n", ok[t], want, t
      if (ok[t] != want) fails++
    }
    printf "stress-timing: %d tests, %d with a failed run\n", length(seen), fails
    exit fails > 0
  }' || status=1
grep -h -A30 "^failures:" "$out"/* | head -100 || true
exit "$status"
