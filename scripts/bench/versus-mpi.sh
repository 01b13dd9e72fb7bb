#!/usr/bin/env bash
# psyne against Open MPI on this host, each as its users run it (psyne under psyrun, Open MPI
# under mpirun as a plain MPI program; psybench's MPI backend is cross-checked against a plain C
# benchmark by scripts/bench/mpi-crosscheck.sh), in separate jobs that alternate round by round,
# in two cadences (stream: back to back, slowest rank, as nccl-tests; osu: a barrier after each
# call, mean over ranks, as the OSU micro-benchmarks). Every result is checked against the oracle.
# Two forms:
#
#   scripts/bench/versus-mpi.sh [--allow-dirty] [OUT_DIR]
#       Every collective, every size: the report issue 15 asks for (default results/versus-openmpi).
#       Three layouts: 2 ranks over shared memory, 2 ranks over loopback TCP, 8 ranks over shared
#       memory oversubscribed on this host's cores. For each layout and cadence, ROUNDS rounds
#       (default 3) of three jobs whose order rotates every round: psyne with its built-in choices
#       (PSY_TUNING=off), psyne with the tuning file `psybench tune` wrote for this machine at the
#       start of the run, and Open MPI. scripts/probes/floors.sh measures the floors the report
#       compares with; scripts/report/versus-mpi.py then writes the tables (medians over the
#       rounds), the goal per cell, and one PNG per collective and layout.
#       Environment: ROUNDS (3), CADENCES ("stream osu"), LAYOUTS ("shm2 tcp2 shm8"), SIZES (for
#       the 2-rank layouts), SIZES8 (for 8 ranks), TUNE=0 to reuse OUT_DIR/tuning instead of tuning
#       again.
#
#   scripts/bench/versus-mpi.sh [--allow-dirty] --focus tcp|shm [OUT_DIR] [SIZES]
#       A few runs, two jobs a round (psyne with its built-in choices, Open MPI), the one that
#       goes first swapping each round, with a per-run JSON, CSV, PNG and `psybench compare` table
#       (what scripts/report/ab.py sweeps compares between two builds), this host's raw
#       memory-copy and loopback-TCP bandwidth, and a README (it was scripts/bench/versus-mpi.sh --focus):
#       tcp: all-reduce, 2 ranks over loopback TCP, sizes 8:256M;
#       shm: all-reduce, broadcast, all-gather, reduce-scatter on 2 ranks over shared memory (Open
#       MPI's default vader/CMA path), all-reduce on Group::alloc_shared buffers, all-reduce on 8
#       ranks oversubscribed, and all-reduce unbound (--bind-to none), sizes 8:64M.
#       Environment: ROUNDS (3), CADENCES ("stream osu").
#
# A tree with uncommitted changes is refused (the report names the build it measured) unless
# --allow-dirty is given, which the report then states.
set -euo pipefail
cd "$(dirname "$0")/../.."
. scripts/report/publish.sh
set -- "${ARGS[@]}"
rounds=${ROUNDS:-3}
cadences=(${CADENCES:-stream osu})

scripts/setup.sh >/dev/null
cargo build --release -q -p psybench --features mpi
cargo build --release -q -p psyrun
bench=target/release/psybench
psyrun=target/release/psyrun
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

if [ "${1:-}" = --focus ]; then
  shift
  . scripts/bench/versus-mpi-focus.sh
  exit 0
fi

out=${1:-results/versus-openmpi}
layouts=(${LAYOUTS:-shm2 tcp2 shm8})
sizes=${SIZES:-8,64,512,1K,4K,16K,64K,256K,1M,4M,16M,64M}
sizes8=${SIZES8:-8,512,4K,64K,1M,16M}
mkdir -p "$out/raw"
tuning=$(realpath -m "$out/tuning")
: > "$out/commands.txt"

# Prints a command to the log of commands, then runs it.
logged() {
  echo "$*" >> "$out/commands.txt"
  "$@"
}

# The layout's rank count, psyne transport, sizes and Open MPI's launcher arguments.
layout() {
  case "$1" in
    shm2) n=2 transport=shm run_sizes=$sizes mpi=(mpirun) ;;
    tcp2) n=2 transport=tcp run_sizes=$sizes
      mpi=(mpirun --mca pml ob1 --mca btl tcp,self --mca btl_tcp_if_include lo) ;;
    shm8) n=8 transport=shm run_sizes=$sizes8 mpi=(mpirun --oversubscribe) ;;
    *) echo "unknown layout $1 (shm2, tcp2, shm8)" >&2; exit 2 ;;
  esac
}

load_before=$(cut -d' ' -f1-3 /proc/loadavg)
logged "$bench" peak | tee "$out/peak.txt"
logged scripts/probes/floors.sh | tee "$out/floors.txt"

if [ "${TUNE:-1}" != 0 ]; then
  rm -f "$tuning"
  for l in "${layouts[@]}"; do
    layout "$l"
    # Tuned at the report's own sizes, in the cadence most of the report uses.
    PSY_TRANSPORT=$transport logged "$psyrun" -n "$n" "$bench" tune --transport "$transport" \
      --sizes "$run_sizes" --output "$tuning" --json "$out/raw/tune-$l.json" | tee "$out/tune-$l.txt"
  done
fi

for l in "${layouts[@]}"; do
  layout "$l"
  for cadence in "${cadences[@]}"; do
    sweep=(all --sizes "$run_sizes" --cadence "$cadence")
    for ((round = 1; round <= rounds; round++)); do
      order=(default tuned mpi)
      shift=$(((round - 1) % 3))
      order=("${order[@]:$shift}" "${order[@]:0:$shift}")
      for who in "${order[@]}"; do
        json="$out/raw/$l-$cadence-r$round-$who.json"
        echo "# $l $cadence round $round/$rounds: $who (load $(cut -d' ' -f1 /proc/loadavg))"
        case "$who" in
          default) PSY_TRANSPORT=$transport PSY_TUNING=off logged "$psyrun" -n "$n" "$bench" \
            "${sweep[@]}" --transport "$transport" --json "$json" > "$json.txt" ;;
          tuned) PSY_TRANSPORT=$transport PSY_TUNING=$tuning logged "$psyrun" -n "$n" "$bench" \
            "${sweep[@]}" --transport "$transport" --json "$json" > "$json.txt" ;;
          mpi) logged "${mpi[@]}" -n "$n" "$bench" "${sweep[@]}" --backend mpi --json "$json" \
            > "$json.txt" ;;
        esac
      done
    done
  done
done
load_after=$(cut -d' ' -f1-3 /proc/loadavg)

allow=()
[[ $REVISION == *"--allow-dirty"* ]] && allow=(--allow-dirty)
python3 scripts/report/versus-mpi.py "$out" --load "$load_before / $load_after" \
  --rounds "$rounds" --layouts "${layouts[*]}" --cadences "${cadences[*]}" "${allow[@]}"
for spec in "$out"/plots/*.json; do
  "$bench" plot "$spec" -o "${spec%.json}.png" >/dev/null
done
echo "wrote $out"
