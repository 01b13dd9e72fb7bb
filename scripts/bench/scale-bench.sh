#!/usr/bin/env bash
# Issue 19's curve: how long a job that forms a group and runs one all-reduce takes as the rank
# count doubles, for two builds measured alternately on this machine (A: before a change, B:
# after). Each round runs `psyrun -n N examples/allreduce 1` (form the group, all-reduce and
# average one f32, check the result) for every N with A and B, the order swapping every round.
# Prints a CSV line per run (build,ranks,round,wall_s,max_rss_kib,exit) and writes them to
# OUT/runs.csv; wall_s is to the millisecond (the clock read around the job), max_rss_kib the
# largest resident set of any process of the job (psyrun or a rank: GNU time's %M, which covers
# the descendants psyrun waited for).
#
#   scripts/bench/scale-bench.sh A_TARGET_DIR B_TARGET_DIR OUT [RANKS...]     (default 64 128 256 512)
#
# PROBE=1 adds OUT/ranks.csv: per build and rank count, the median and largest over the ranks of
# a rank's open descriptors, sockets and peak resident set (scripts/probes/scale-probe.sh).
#
# Each TARGET_DIR must hold release builds of psyrun and examples/allreduce
# (`cargo build --release -p psyrun && cargo build --release --example allreduce`). ROUNDS
# (default 3).
set -euo pipefail
cd "$(dirname "$0")/../.."
a=$1 b=$2 out=$3
shift 3
ranks=("$@")
[ $# -gt 0 ] || ranks=(64 128 256 512)
rounds=${ROUNDS:-3}
mkdir -p "$out"
csv="$out/runs.csv"
errors=$(mktemp)
usage=$(mktemp)
trap 'rm -f "$errors" "$usage"' EXIT
echo "build,ranks,round,wall_s,max_rss_kib,exit" > "$csv"
echo "# $(date -u +%FT%TZ) load $(cut -d' ' -f1-3 /proc/loadavg)" > "$out/run.txt"
for round in $(seq 1 "$rounds"); do
  order=(A B)
  [ $((round % 2)) -eq 0 ] && order=(B A)
  for n in "${ranks[@]}"; do
    for side in "${order[@]}"; do
      dir=$a
      [ "$side" = B ] && dir=$b
      code=0
      start=$(date +%s%N)
      /usr/bin/time -o "$usage" -f "%M" timeout 600 "$dir/psyrun" -n "$n" \
        "$dir/examples/allreduce" 1 >/dev/null 2>"$errors" || code=$?
      end=$(date +%s%N)
      [ "$code" = 0 ] || { echo "build $side, $n ranks failed (exit $code):" >&2; tail -5 "$errors" >&2; }
      wall=$(awk -v ns=$((end - start)) 'BEGIN { printf "%.3f", ns / 1e9 }')
      rss=$(tail -1 "$usage")
      echo "$side,$n,$round,$wall,$rss,$code" | tee -a "$csv"
    done
  done
done
echo "# $(date -u +%FT%TZ) load $(cut -d' ' -f1-3 /proc/loadavg)" >> "$out/run.txt"
# PROBE=1: one more job per build and rank count, each rank run under scripts/probes/scale-probe.sh,
# for what a rank holds (descriptors, sockets, peak resident set); slower, so not timed.
if [ "${PROBE:-0}" = 1 ]; then
  ranks_csv="$out/ranks.csv"
  echo "build,ranks,median_fds,max_fds,median_sockets,max_sockets,median_hwm_kib,max_hwm_kib" > "$ranks_csv"
  for n in "${ranks[@]}"; do
    for side in A B; do
      dir=$a
      [ "$side" = B ] && dir=$b
      probe=$(mktemp -d)
      PROBE_DIR=$probe timeout 600 "$dir/psyrun" -n "$n" -x PROBE_DIR scripts/probes/scale-probe.sh \
        "$dir/examples/allreduce" 1 >/dev/null 2>"$errors" || { echo "probe $side $n failed" >&2; tail -5 "$errors" >&2; }
      cat "$probe"/* | python3 -c '
import sys, statistics as st
rows = [list(map(int, l.split(",")[1:])) for l in sys.stdin if l.strip()]
cols = list(zip(*rows))
print(",".join(f"{st.median(c):g},{max(c)}" for c in cols))' | sed "s/^/$side,$n,/" | tee -a "$ranks_csv"
      rm -rf "$probe"
    done
  done
fi
