#!/usr/bin/env bash
# Does psyne's choice of crossing (src/transport/shm/crossing.rs: ring writes through the caches
# or past them, chosen by timing the calls) hold in both of this VM's states? ROUNDS rounds; each
# round runs, per collective, five jobs in a balanced order (scripts/bench/order.sh): psyne as
# shipped (`auto`), psyne with PSY_SHM_STREAM_WRITES=off (`cached`) and =on (`streamed`), Intel MPI
# and Open MPI (bench/c/mpi_coll_bench.c under their own launchers), 2 ranks over shared memory,
# OSU cadence. Before each job the cross-core round trip (scripts/probes/core-bounce.c) says which
# state the machine is in (results/job-swings/).
#
#   scripts/bench/crossing.sh [--allow-dirty] [OUT_DIR]        (default results/crossing)
#
# Environment: ROUNDS (8), SIZES (64K,1M,4M), COLLECTIVES ("allreduce broadcast allgather
# reducescatter"). Writes OUT_DIR/jobs.csv (one line per job and size) and prints the medians per
# state (scripts/report/crossing.py).
set -euo pipefail
cd "$(dirname "$0")/../.."
. scripts/report/publish.sh
set -- "${ARGS[@]}"
. scripts/bench/order.sh
out=${1:-results/crossing}
rounds=${ROUNDS:-8}
sizes=${SIZES:-64K,1M,4M}
read -r -a collectives <<<"${COLLECTIVES:-allreduce broadcast allgather reducescatter}"
impi=/opt/psyne-impi
for need in "$impi/bin/mpiexec" "$(command -v mpicc || true)"; do
  [ -n "$need" ] && [ -x "$need" ] || {
    echo "crossing.sh: Intel MPI and Open MPI are needed (scripts/setup.sh installs them)" >&2
    exit 2
  }
done

cargo build --release -q -p psybench -p psyrun
bin=$(mktemp -d)
trap 'rm -rf "$bin"' EXIT
gcc -O2 -Wall -Wextra -pthread -o "$bin/core-bounce" scripts/probes/core-bounce.c
mpicc -O2 -Wall -Wextra -o "$bin/cb-openmpi" bench/c/mpi_coll_bench.c
# Intel MPI's mpicc wrapper from the wheel has unsubstituted paths (../shared/PITFALLS.md).
gcc -O2 -Wall -Wextra -I"$impi/include" -L"$impi/lib" -Wl,-rpath,"$impi/lib" \
  -o "$bin/cb-impi" bench/c/mpi_coll_bench.c -lmpi
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

# Runs program $1's job of collective $2; its output goes to $3.
job() {
  local who=$1 coll=$2 file=$3
  local sweep=("$coll" --cadence osu --sizes "$sizes")
  case $who in
    auto | cached | streamed)
      local writes=auto
      [ "$who" = cached ] && writes=off
      [ "$who" = streamed ] && writes=on
      PSY_SHM_STREAM_WRITES=$writes target/release/psyrun -n 2 target/release/psybench \
        "${sweep[@]}" --json "$file" >/dev/null
      ;;
    impi) LD_LIBRARY_PATH="$impi/lib" "$impi/bin/mpiexec" -n 2 "$bin/cb-impi" "${sweep[@]}" >"$file" ;;
    openmpi) mpirun -n 2 --bind-to core "$bin/cb-openmpi" "${sweep[@]}" >"$file" ;;
  esac
}

mkdir -p "$out"
csv="$out/jobs.csv"
echo "round,collective,program,revision,load1,bounce_ns,bytes,time_us" >"$csv"
programs=(auto cached streamed impi openmpi)
for ((round = 1; round <= rounds; round++)); do
  for coll in "${collectives[@]}"; do
    read -r -a order <<<"$(balanced_order "$round" "${programs[@]}")"
    for who in "${order[@]}"; do
      load=$(cut -d' ' -f1 /proc/loadavg)
      bounce=$("$bin/core-bounce" 20000 | awk '{print $7}')
      job "$who" "$coll" "$bin/out"
      python3 scripts/report/crossing.py line "$bin/out" \
        "$round,$coll,$who,$REVISION,$load,$bounce" >>"$csv"
    done
  done
done
python3 scripts/report/crossing.py summary "$csv"
