#!/usr/bin/env bash
# Whose are the job-to-job swings (issue 37)? JOBS times in a row: the machine's cross-core
# round trip (scripts/probes/core-bounce.c, two threads on cores 0 and 1), one psyne job (psybench
# broadcast under psyrun, OSU cadence) and one Open MPI job (the C benchmark under mpirun, the same
# sizes and cadence). One line per job; if psyne's slow jobs are the machine's, the MPI's jobs and
# the bounce are slow at the same time.
#
#   scripts/bench/job-swings.sh [--allow-dirty] [OUT_DIR]       (default results/job-swings)
#
# Environment: JOBS (10), SIZES (8,1M), COLL (broadcast). Writes OUT_DIR/jobs.csv and prints it.
set -euo pipefail
cd "$(dirname "$0")/../.."
. scripts/report/publish.sh
set -- "${ARGS[@]}"
out=${1:-results/job-swings}
jobs=${JOBS:-10}
sizes=${SIZES:-8,1M}
coll=${COLL:-broadcast}

cargo build --release -q -p psybench -p psyrun
bin=$(mktemp -d)
trap 'rm -rf "$bin"' EXIT
gcc -O2 -Wall -Wextra -pthread -o "$bin/core-bounce" scripts/probes/core-bounce.c
mpicc -O2 -Wall -Wextra -o "$bin/cb-openmpi" bench/c/mpi_coll_bench.c
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
mkdir -p "$out"
csv="$out/jobs.csv"
echo "job,revision,load1,bounce_ns,program,bytes,time_us" >"$csv"
for ((j = 1; j <= jobs; j++)); do
  load=$(cut -d' ' -f1 /proc/loadavg)
  bounce=$("$bin/core-bounce" 20000 | awk '{print $7}')
  target/release/psyrun -n 2 target/release/psybench "$coll" --cadence osu --sizes "$sizes" \
    --json "$bin/psyne.json" >/dev/null
  mpirun --oversubscribe -n 2 "$bin/cb-openmpi" "$coll" --cadence osu --sizes "$sizes" >"$bin/ompi.csv"
  # Both read as scripts/report/versus_every_mpi.py reads them (which also refuses wrong results).
  python3 - "$bin/psyne.json" "$bin/ompi.csv" "$j,$REVISION,$load,$bounce" >>"$csv" <<'EOF'
import sys
from pathlib import Path
sys.path.insert(0, "scripts/report")
from versus_every_mpi import read_c_bench, read_psybench
psyne, ompi, head = sys.argv[1:]
for program, times in (("psyne", read_psybench(Path(psyne))), ("openmpi", read_c_bench(Path(ompi)))):
    for b, t in sorted(times.items()):
        print(f"{head},{program},{b},{t:.3f}")
EOF
done
column -s, -t "$csv"
