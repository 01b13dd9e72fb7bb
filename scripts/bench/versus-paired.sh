#!/usr/bin/env bash
# psyne and each MPI in the same job, size by size (issue 37): psybench built against that MPI and
# started by that MPI's own launcher runs `--backend native,mpi --rounds ROUNDS`, so every size is
# measured with psyne's engine and with the MPI's collective in turn (the first one first in odd
# rounds, last in even ones), on the same cores, a few milliseconds apart. On this VM the machine's
# state changes within seconds (results/job-swings/, results/versus-every-mpi/), so two programs
# measured in separate jobs can land in different states; a ratio of two times measured side by
# side in one window cannot. The report takes the ratio of each pair (MPI ÷ psyne) and gives the
# median and spread of those ratios per MPI, collective and size, beside each side's median time.
#
# Each MPI as its users link and launch it: Open MPI 4.1 (Debian's mpicc, `mpirun`, its default
# binding), MPICH 5 (the PyPI wheel, `mpiexec -bind-to core`), Intel MPI (the PyPI wheel's libmpi,
# ABI-compatible with MPICH's, loaded through LD_LIBRARY_PATH into the MPICH build, started by its
# own `mpiexec`). psybench's MPI backend hands the caller's buffers to the MPI call as they are
# (src/mpi/mod.rs); as a cross-check of that harness, each job is followed by the MPI's plain C
# benchmark (bench/c/mpi_coll_bench.c) under the same launcher, and the report compares the two
# measurements of the MPI (results/mpi-crosscheck/ did so for Open MPI).
#
#   scripts/bench/versus-paired.sh [--allow-dirty] [OUT_DIR]     (default results/versus-paired)
#
# Environment: JOBS (4: jobs per MPI and collective, the MPIs' order rotating), ROUNDS (5: pairs a
# size per job), RANKS (2), SIZES (8,1K,16K,64K,1M,16M,64M), COLLECTIVES (allreduce broadcast
# allgather reducescatter), MPIS (openmpi mpich5 impi), TRANSPORT (shm, or tcp: psyne and every
# MPI over loopback TCP, each MPI as versus-every-mpi.sh sets it: scripts/bench/every-mpi.sh),
# VERSUS_TIMEOUT (seconds a job may take, default 900). Writes OUT_DIR/raw/ (each job's JSON and
# the C benchmark's CSV, runs.csv naming them) and OUT_DIR/README.md (scripts/report/versus_paired.py).
set -euo pipefail
cd "$(dirname "$0")/../.."
. scripts/report/publish.sh
set -- "${ARGS[@]}"

out=${1:-results/versus-paired}
jobs=${JOBS:-4}
rounds=${ROUNDS:-5}
ranks=${RANKS:-2}
sizes=${SIZES:-8,1K,16K,64K,1M,16M,64M}
read -r -a collectives <<<"${COLLECTIVES:-allreduce broadcast allgather reducescatter}"
read -r -a mpis <<<"${MPIS:-openmpi mpich5 impi}"
limit=${VERSUS_TIMEOUT:-900}
transport=${TRANSPORT:-shm}
. scripts/bench/every-mpi.sh
every_mpi_transport versus-paired.sh "$transport"
require_every_mpi versus-paired.sh
mkdir -p "$out/raw"
raw=$(realpath "$out/raw")
# psybench with its MPI backend, once against Open MPI and once against MPICH (which Intel MPI's
# library also serves). rsmpi does not notice a change of MPI (../shared/PITFALLS.md), hence one
# target folder each; its link line has no run path, so MPICH's jobs set LD_LIBRARY_PATH.
build() {
  MPICC=$2 CARGO_TARGET_DIR=target/versus-paired/$1 cargo build --release -q -p psybench --features mpi
}
build openmpi "$(command -v mpicc)"
build mpich "$mpich/bin/mpicc"
mkdir -p "$raw/bin"
build_c_benchmarks "$raw/bin"

export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# The launcher of MPI $1, up to the program.
launcher() {
  case $1 in
    openmpi) echo mpirun --oversubscribe "${openmpi_net[@]}" -n "$ranks" ;;
    mpich5) echo env LD_LIBRARY_PATH="$mpich/lib" "${mpich_net[@]}" "$mpich/bin/mpiexec" -bind-to core -n "$ranks" ;;
    impi) echo env LD_LIBRARY_PATH="$impi/lib" "${impi_net[@]}" "$impi/bin/mpiexec" -n "$ranks" ;;
  esac
}
# The psybench built against MPI $1.
psybench_for() {
  case $1 in
    openmpi) echo target/versus-paired/openmpi/release/psybench ;;
    *) echo target/versus-paired/mpich/release/psybench ;;
  esac
}
# Runs one job; its line goes to runs.csv.
run() {
  local job=$1 coll=$2 who=$3 kind=$4 file=$5
  shift 5
  echo "# job $job/$jobs $coll: $who $kind"
  local rc=0
  timeout -k 10 "$limit" "$@" >"$file" 2>"$file.err" || rc=$?
  echo "$job,$coll,$who,$kind,$rc,$(basename "$file"),\"$*\"" >>"$raw/runs.csv"
  [ "$rc" = 0 ] || echo "versus-paired.sh: $who $kind $coll job $job exited $rc (see $file.err)" >&2
}

load_before=$(python3 scripts/report/lib.py load)
echo "job,collective,mpi,kind,rc,file,command" >"$raw/runs.csv"
for ((job = 1; job <= jobs; job++)); do
  for coll in "${collectives[@]}"; do
    # The MPIs' order rotates job by job.
    n=${#mpis[@]}
    for ((k = 0; k < n; k++)); do
      who=${mpis[$(((k + job - 1) % n))]}
      read -r -a launch <<<"$(launcher "$who")"
      sweep=("$coll" --cadence osu --sizes "$sizes")
      run "$job" "$coll" "$who" paired "$raw/j$job-$coll-$who.txt" \
        "${launch[@]}" "$(psybench_for "$who")" "${sweep[@]}" "${psyne_net[@]}" \
        --backend native,mpi --rounds "$rounds" --json "$raw/j$job-$coll-$who.json"
      run "$job" "$coll" "$who" c-bench "$raw/j$job-$coll-$who.csv" \
        "${launch[@]}" "$raw/bin/cb-$who" "${sweep[@]}"
    done
  done
done
load_after=$(python3 scripts/report/lib.py load)
settings=
if [ "$transport" = tcp ]; then
  settings="psybench \`${psyne_net[*]}\`; Open MPI \`mpirun ${openmpi_net[*]}\`; MPICH 5 \`${mpich_net[*]}\`; Intel MPI \`${impi_net[*]}\`"
fi
python3 scripts/report/versus_paired.py "$out" --revision "$REVISION" --transport "$transport" \
  --settings "$settings" \
  --load-before "$load_before" --load-after "$load_after" \
  --command "scripts/bench/versus-paired.sh $* (JOBS=$jobs ROUNDS=$rounds RANKS=$ranks SIZES=$sizes TRANSPORT=$transport)"
