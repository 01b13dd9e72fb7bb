#!/usr/bin/env bash
# What two Open MPI settings cost a plain C MPI program (bench/c/mpi_coll_bench.c), measured
# alternately in one session: the thread level (MPI_Init against
# MPI_Init_thread(MPI_THREAD_FUNNELED)) and the AVX reduction component (Open MPI's default
# against `--mca op ^avx`). In-place f32 all-reduce, 2 ranks on shared memory, stream cadence,
# ROUNDS rounds (default 5; the order of the settings rotates each round), medians.
#
#   scripts/bench/mpi-settings.sh [OUT_DIR]     (default results/mpi-settings)
set -euo pipefail
cd "$(dirname "$0")/../.."
# Refuses a dirty tree unless --allow-dirty (taken out of the arguments); sets REVISION.
. scripts/report/publish.sh
set -- "${ARGS[@]}"
out=${1:-results/mpi-settings}
rounds=${ROUNDS:-5}
sizes=8,64K,1M,16M
scripts/setup.sh >/dev/null
mkdir -p "$out" target/mpi-crosscheck
cbench=target/mpi-crosscheck/mpi_coll_bench
mpicc -O2 -Wall -Wextra -o "$cbench" bench/c/mpi_coll_bench.c
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

names=(default funneled no-avx)
declare -A cmd
cmd[default]="mpirun -n 2 $cbench allreduce --sizes $sizes --no-header"
cmd[funneled]="mpirun -n 2 $cbench allreduce --sizes $sizes --no-header --funneled"
cmd[no-avx]="mpirun --mca op ^avx -n 2 $cbench allreduce --sizes $sizes --no-header"

load_before=$(cut -d' ' -f1-3 /proc/loadavg)
rows="$out/runs.csv"
echo "setting,round,collective,cadence,ranks,bytes,count,iters,warmup,in_place,time_us_avg,time_us_max,time_us_min,wrong" > "$rows"
for ((round = 1; round <= rounds; round++)); do
  for ((k = 0; k < ${#names[@]}; k++)); do
    name=${names[$(((k + round) % ${#names[@]}))]}
    echo "round $round/$rounds: $name" >&2
    timeout -k 10 600 ${cmd[$name]} | sed "s/^/$name,$round,/" >> "$rows"
  done
done
load_after=$(cut -d' ' -f1-3 /proc/loadavg)

{
  echo "# What Open MPI's thread level and AVX reductions cost a plain MPI program"
  echo
  echo "Made by \`scripts/bench/mpi-settings.sh\` on $(date -u +%Y-%m-%dT%H:%M:%SZ), source revision $REVISION."
  echo "\`bench/c/mpi_coll_bench.c\`, in-place f32 all-reduce (sum), 2 ranks on shared memory (Open MPI's"
  echo "default vader path, each rank bound to a core), stream cadence, the slowest rank's time per call;"
  echo "the three settings alternate, $rounds rounds (the order rotates each round), medians over the rounds."
  echo
  scripts/report/lib.py machine-table "$load_before" "$load_after"
  echo
  echo "Commands:"
  echo
  echo '```'
  for name in "${names[@]}"; do echo "${cmd[$name]}"; done
  echo '```'
  echo
  python3 - "$rows" <<'PY'
import csv, statistics, sys
rows = list(csv.DictReader(open(sys.argv[1])))
settings = ["default", "funneled", "no-avx"]
sizes = sorted({int(r["bytes"]) for r in rows})
med = {(s, b): statistics.median(float(r["time_us_max"]) for r in rows
                                 if r["setting"] == s and int(r["bytes"]) == b)
       for s in settings for b in sizes}
def size(b):
    for unit, shift in (("MiB", 20), ("KiB", 10)):
        if b >= 1 << shift:
            return f"{b >> shift} {unit}"
    return f"{b} B"
print("| size | MPI_Init (µs) | MPI_THREAD_FUNNELED (µs) | ÷ | `--mca op ^avx` (µs) | ÷ |")
print("|---:|---:|---:|---:|---:|---:|")
for b in sizes:
    d, f, n = (med[(s, b)] for s in settings)
    print(f"| {size(b)} | {d:.2f} | {f:.2f} | {f / d:.2f} | {n:.2f} | {n / d:.2f} |")
wrong = sum(int(r["wrong"]) for r in rows)
print()
print(f"÷: the setting's time over MPI_Init's with Open MPI's defaults. Wrong elements over all runs: {wrong}.")
PY
  echo
  echo "Rows: \`runs.csv\` (every round)."
} > "$out/README.md"
cat "$out/README.md"
