#!/usr/bin/env bash
# psyne against every MPI on this host (issue 37): Open MPI 4.1 (Debian), MPICH 5 and Intel MPI
# (the PyPI wheels scripts/setup.sh installs in /opt/psyne-mpich and /opt/psyne-impi), each as its
# users run it: the plain C benchmark bench/c/mpi_coll_bench.c built with that MPI's compiler and
# started by that MPI's own launcher (Open MPI's mpirun, Hydra's mpiexec), ranks bound to cores
# (each launcher's default binding: Open MPI and Intel MPI bind by default, Hydra is told
# `-bind-to core`); psyne as psybench under psyrun (which binds by default). One cadence, OSU's:
# each call timed alone, then an untimed barrier, time = mean over ranks. Every result is checked
# element by element (both programs exit non-zero on a wrong element).
#
#   scripts/bench/versus-every-mpi.sh [--allow-dirty] [OUT_DIR]     (default results/versus-every-mpi)
#
# Environment: ROUNDS (5), RANKS (2), SIZES (8,1K,64K,1M,16M,64M), COLLECTIVES (allreduce broadcast
# allgather reducescatter), TRANSPORT (shm, or tcp: every program over loopback TCP, each as its
# users ask for it, as scripts/bench/every-mpi.sh sets it; no copy floors),
# IMB=0 to leave out Intel's IMB-MPI1 (run once a round beside Intel
# MPI's C-benchmark job as Intel's own cross-check of it), FLOORS=0 to leave out the copy floors
# (with 2 ranks, the sizes from 1 MiB up: scripts/probes/copy-floors.sh, a plain C program that
# moves only the bytes the call must move, as one more program in the rotation), VERSUS_TIMEOUT
# (seconds a job may take, default 600). Each round runs one job per program and collective, in
# an order that changes every round as a Williams design does (balanced_order, scripts/bench/order.sh): over n
# rounds (2n for an odd number of programs) each program runs in every position and right after
# every other program equally often. A plain rotation kept the neighbours fixed, so one program
# always ran right after the same other (psyne after Intel MPI) and carried whatever that job
# left behind into every round (results/versus-every-mpi-tcp/order-2026-11-27.md). Before each job the
# machine's cross-core round trip is measured (scripts/probes/core-bounce.c), and again after it,
# and the time the hypervisor ran something else on our vCPUs while the job ran (steal time,
# /proc/stat) is recorded: the report counts the jobs that ran while the VM was in its slow state
# (either probe slow; results/job-swings/) and shows each one's steal time.
#
# Writes OUT_DIR/raw/ (every job's CSV or JSON and runs.csv naming them) and OUT_DIR/README.md
# (scripts/report/versus_every_mpi.py: machine, load, commands, the table of best MPI ÷ psyne per
# cell with the best MPI named, each program's spread across rounds, and IMB beside the C
# benchmark). A tree with uncommitted changes is refused unless --allow-dirty (scripts/report/publish.sh).
set -euo pipefail
cd "$(dirname "$0")/../.."
. scripts/report/publish.sh
set -- "${ARGS[@]}"

out=${1:-results/versus-every-mpi}
rounds=${ROUNDS:-5}
ranks=${RANKS:-2}
sizes=${SIZES:-8,1K,64K,1M,16M,64M}
read -r -a collectives <<<"${COLLECTIVES:-allreduce broadcast allgather reducescatter}"
limit=${VERSUS_TIMEOUT:-600}
transport=${TRANSPORT:-shm}
. scripts/bench/every-mpi.sh
every_mpi_transport versus-every-mpi.sh "$transport"
require_every_mpi versus-every-mpi.sh "$impi/bin/IMB-MPI1"
cargo build --release -q -p psybench -p psyrun
mkdir -p "$out/raw"
raw=$(realpath "$out/raw")
bin=$raw/bin
mkdir -p "$bin"
build_c_benchmarks "$bin"
# The machine's state before each job: the cross-core round trip (results/job-swings/).
gcc -O2 -Wall -Wextra -pthread -o "$bin/core-bounce" scripts/probes/core-bounce.c
bounce() { "$bin/core-bounce" 20000 | awk '{print $7}'; }
# The hypervisor's steal time so far, in ms (every vCPU's, /proc/stat's 8th field, in USER_HZ).
steal_ms() { awk -v hz="$(getconf CLK_TCK)" '$1 == "cpu" {printf "%d\n", $9 * 1000 / hz}' /proc/stat; }

programs=(psyne openmpi mpich5 impi)
# The copy floors' sizes: the sweep's from 1 MiB up, as the benchmarks round them.
floor_sizes=$(python3 - "$sizes" "$ranks" <<'EOF'
import sys
sys.path.insert(0, "scripts/report")
from versus_every_mpi import floor_sizes
print(",".join(str(b) for b in floor_sizes(sys.argv[1], int(sys.argv[2]))))
EOF
)
if [ "${FLOORS:-1}" != 0 ] && [ -n "$floor_sizes" ] && [ "$transport" = shm ]; then
  programs+=(floor)
fi

export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# The command line of each program's job for collective $1, up to the benchmark's own flags.
job() {
  local who=$1 coll=$2
  local sweep=("$coll" --cadence osu --sizes "$sizes")
  case $who in
    psyne) echo target/release/psyrun -n "$ranks" target/release/psybench "${sweep[@]}" "${psyne_net[@]}" --json ;;
    openmpi) echo mpirun --oversubscribe "${openmpi_net[@]}" -n "$ranks" "$bin/cb-openmpi" "${sweep[@]}" ;;
    mpich5) echo env "${mpich_net[@]}" "$mpich/bin/mpiexec" -bind-to core -n "$ranks" "$bin/cb-mpich5" "${sweep[@]}" ;;
    impi) echo env LD_LIBRARY_PATH="$impi/lib" "${impi_net[@]}" "$impi/bin/mpiexec" -n "$ranks" "$bin/cb-impi" "${sweep[@]}" ;;
    floor) echo scripts/probes/copy-floors.sh "$coll" "$floor_sizes" ;;
  esac
}
# IMB-MPI1's name of collective $1, and its message lengths (bytes per rank's buffer as IMB counts
# them: all-gather and reduce-scatter per rank, so the C benchmark's sizes divided by the ranks).
imb_name() {
  case $1 in
    allreduce) echo Allreduce ;; broadcast) echo Bcast ;;
    allgather) echo Allgather ;; reducescatter) echo Reduce_scatter_block ;;
  esac
}

# balanced_order: scripts/bench/order.sh.
. scripts/bench/order.sh

load_before=$(python3 scripts/report/lib.py load)
echo "round,collective,program,rc,bounce_ns,bounce_after_ns,steal_ms,file,command" >"$raw/runs.csv"
for ((round = 1; round <= rounds; round++)); do
  for coll in "${collectives[@]}"; do
    read -r -a order <<<"$(balanced_order "$round" "${programs[@]}")"
    for who in "${order[@]}"; do
      cmd=$(job "$who" "$coll")
      if [ "$who" = psyne ]; then
        file="$raw/r$round-$coll-$who.json"
        cmdline="$cmd $file"
      elif [ "$who" = floor ]; then
        file="$raw/r$round-$coll-$who.txt"
        cmdline="$cmd"
      else
        file="$raw/r$round-$coll-$who.csv"
        cmdline="$cmd"
      fi
      echo "# round $round/$rounds $coll: $who"
      ns=$(bounce)
      stolen=$(steal_ms)
      rc=0
      if [ "$who" = psyne ]; then
        timeout -k 10 "$limit" $cmdline >"$raw/r$round-$coll-$who.txt" 2>&1 || rc=$?
      else
        timeout -k 10 "$limit" $cmdline >"$file" 2>"$raw/r$round-$coll-$who.err" || rc=$?
      fi
      stolen=$(($(steal_ms) - stolen))
      after=$(bounce)
      echo "$round,$coll,$who,$rc,$ns,$after,$stolen,$(basename "$file"),\"$cmdline\"" >>"$raw/runs.csv"
      [ "$rc" = 0 ] || echo "versus-every-mpi.sh: $who $coll round $round exited $rc" >&2
    done
    if [ "${IMB:-1}" != 0 ]; then
      file="$raw/r$round-$coll-imb.txt"
      msglens="$raw/imb-msglen-$coll"
      python3 - "$sizes" "$coll" "$ranks" >"$msglens" <<'EOF'
import sys
sys.path.insert(0, "scripts/report")
from versus_every_mpi import imb_lengths
for n in imb_lengths(sys.argv[1], sys.argv[2], int(sys.argv[3])):
    print(n)
EOF
      cmdline="env LD_LIBRARY_PATH=$impi/lib ${impi_net[*]} $impi/bin/mpiexec -n $ranks $impi/bin/IMB-MPI1 $(imb_name "$coll") -msglen $msglens -msglog 27 -npmin $ranks"
      ns=$(bounce)
      stolen=$(steal_ms)
      rc=0
      timeout -k 10 "$limit" $cmdline >"$file" 2>&1 || rc=$?
      stolen=$(($(steal_ms) - stolen))
      after=$(bounce)
      echo "$round,$coll,imb,$rc,$ns,$after,$stolen,$(basename "$file"),\"$cmdline\"" >>"$raw/runs.csv"
    fi
  done
done
load_after=$(python3 scripts/report/lib.py load)
python3 scripts/report/versus_every_mpi.py "$out" --revision "$REVISION" --transport "$transport" \
  --load-before "$load_before" --load-after "$load_after" --rounds "$rounds" \
  --command "scripts/bench/versus-every-mpi.sh $* (ROUNDS=$rounds RANKS=$ranks SIZES=$sizes TRANSPORT=$transport)"
