#!/usr/bin/env bash
# psyne against Open MPI on this host, in ONE mpirun job per comparison (the two backends
# interleaved per size and alternating which goes first, ROUNDS rounds per size, medians), in two
# cadences: `stream` (back to back, slowest rank: nccl-tests) and `osu` (a barrier after each
# call, mean over ranks: the OSU micro-benchmarks); plus this host's raw memory-copy and
# loopback-TCP bandwidth measured in the same run. Writes CSV, JSON, PNG, the tables and a README
# describing the machine, its load and the commands into results/. psybench calls MPI as an MPI
# program does (in place, no copies: src/mpi/mod.rs); scripts/mpi-crosscheck.sh shows that its MPI
# times agree with a plain C program's.
#
#   scripts/mpi-compare.sh tcp [OUT_DIR] [SIZES]   all-reduce, 2 ranks, both over loopback TCP
#   scripts/mpi-compare.sh shm [OUT_DIR] [SIZES]   all-reduce, broadcast, all-gather, reduce-scatter
#                                                  on 2 ranks over shared memory (Open MPI's default
#                                                  vader/CMA path), and all-reduce on 8 ranks
#                                                  oversubscribed on this host's cores
set -euo pipefail
cd "$(dirname "$0")/.."
mode=${1:-tcp}
rounds=${ROUNDS:-3}
cadences=(${CADENCES:-stream osu})
case "$mode" in
  tcp) out=${2:-results/allreduce-tcp-psyne-vs-openmpi}; sizes=${3:-8:256M} ;;
  shm) out=${2:-results/shm-psyne-vs-openmpi}; sizes=${3:-8:64M} ;;
  *) echo "usage: $0 tcp|shm [OUT_DIR] [SIZES]" >&2; exit 2 ;;
esac

scripts/setup.sh >/dev/null
cargo build --release -q -p psybench --features mpi
bench=target/release/psybench
mkdir -p "$out"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

load_before=$(cut -d' ' -f1-3 /proc/loadavg)
"$bench" peak | tee "$out/peak.txt"
# op ^avx: Open MPI 4.1's AVX reduction component saturates 8/16-bit integer sums
# (open-mpi/ompi#8045); f32 is unaffected, but every result is checked, so keep MPI exact.
if [ "$mode" = tcp ]; then
  peak=$(awk '/^loopback TCP:/ {print $3}' "$out/peak.txt")
  mpi=(mpirun --oversubscribe --mca pml ob1 --mca btl tcp,self --mca btl_tcp_if_include lo --mca op ^avx)
  export PSY_TRANSPORT=tcp
  runs=("allreduce -n 2")
else
  peak=$(awk '/^memory copy:/ {print $3}' "$out/peak.txt")
  mpi=(mpirun --oversubscribe --mca op ^avx)
  export PSY_TRANSPORT=shm
  # The last run leaves the ranks unbound (Open MPI binds each to a core by default), which on
  # this VM changes small-message latency a lot, for both backends.
  # `shared`: psyne's rows all-reduce buffers from Group::alloc_shared (zero-copy).
  runs=("allreduce -n 2" "allreduce -n 2 shared" "broadcast -n 2" "allgather -n 2" "reducescatter -n 2"
    "allreduce -n 8" "allreduce -n 8 shared" "allreduce -n 2 unbound")
fi

commands=()
names=()
whats=()
for run in "${runs[@]}"; do
 for cadence in "${cadences[@]}"; do
  read -r coll _ n bind <<<"$run"
  name="$coll-$n${bind:+-$bind}-$cadence"
  run_sizes=$sizes
  [ "$n" -gt 2 ] && run_sizes=8,1K,64K,1M
  binding=()
  extra=()
  [ "$bind" = unbound ] && run_sizes=8:64K && binding=(--bind-to none)
  [ "$bind" = shared ] && extra=(--shared-buffers)
  cmd=("${mpi[@]}" "${binding[@]}" -n "$n" "$bench" "$coll" "${extra[@]}" --backend native,mpi --sizes "$run_sizes" --peak "$peak"
    --cadence "$cadence" --rounds "$rounds"
    --csv "$out/$name.csv" --json "$out/$name.json" --plot "$out/$name.png")
  commands+=("PSY_TRANSPORT=$PSY_TRANSPORT ${cmd[*]}")
  names+=("$name")
  case "$bind" in
    unbound) what=", unbound (--bind-to none)" ;;
    shared) what=", psyne on shared buffers (Group::alloc_shared + all_reduce_shared)" ;;
    *) what="" ;;
  esac
  whats+=("$coll, $n ranks$what, cadence $cadence")
  "${cmd[@]}" | tee "$out/$name.txt"
  "$bench" compare "$out/$name.json" | tee "$out/$name-compare.txt"
 done
done
load_after=$(cut -d' ' -f1-3 /proc/loadavg)

cpu=$(awk -F': ' '/^model name/ {print $2; exit}' /proc/cpuinfo)
mem=$(awk '/^MemTotal/ {printf "%.1f GiB", $2 / 1048576}' /proc/meminfo)
ompi=$(mpirun --version 2>/dev/null | head -n 1)
{
  echo "# psyne vs Open MPI ($mode)"
  echo
  echo "Made by \`scripts/mpi-compare.sh $mode\` on $(date -u +%Y-%m-%dT%H:%M:%SZ), source revision $(git describe --always --dirty 2>/dev/null || echo unknown)."
  echo "Both backends run in one mpirun job per table, interleaved per size, $rounds rounds per size with the"
  echo "backends alternating which goes first; the ratios are medians over the rounds. f32, sum; every"
  echo "result is checked element by element against the oracle (#wrong column). Two cadences: \`stream\`"
  echo "(back to back, the slowest rank's time per operation, as nccl-tests) and \`osu\` (each call timed"
  echo "alone with an untimed barrier after it, the mean over ranks, as the OSU micro-benchmarks)."
  echo "busbw uses nccl-tests' bus factors; GB/s = 1e9 B/s. The MPI backend calls MPI as a C program"
  echo "would (MPI_IN_PLACE for all-reduce, no copies or allocations per call; see src/mpi/mod.rs), and"
  echo "\`scripts/mpi-crosscheck.sh\` checks its times against a plain C benchmark."
  echo
  echo "| machine | |"
  echo "|---|---|"
  echo "| CPU | $cpu, $(nproc) cores |"
  echo "| memory | $mem |"
  echo "| kernel | $(uname -r) |"
  echo "| MPI | $ompi |"
  echo "| load average before / after | $load_before / $load_after |"
  echo
  echo "Raw bandwidth of this host, same run (\`psybench peak\`); the fits' \"% of peak\" use $peak GB/s:"
  echo
  echo '```'
  cat "$out/peak.txt"
  echo '```'
  for i in "${!names[@]}"; do
    name=${names[$i]}
    echo
    echo "## ${whats[$i]}"
    echo
    echo '```'
    echo "${commands[$i]}"
    echo '```'
    echo
    echo "Ratios per size (\`psybench compare $name.json\`; A = psyne, B = Open MPI):"
    echo
    echo '```'
    cat "$out/$name-compare.txt"
    # psybench compare ends without a newline; the fence needs its own line.
    [ -z "$(tail -c 1 "$out/$name-compare.txt")" ] || echo
    echo '```'
    echo
    echo "Table: \`$name.txt\`; rows: \`$name.csv\`, \`$name.json\`; plot: \`$name.png\`."
  done
} > "$out/README.md"
echo "wrote $out"
