#!/usr/bin/env bash
# Cross-checks psybench's MPI backend against a plain C MPI benchmark (bench/c/mpi_coll_bench.c):
# the same collectives, sizes, iteration counts and cadences, run alternately in one session on
# the same mpirun settings, so psybench's MPI numbers can be held against what an MPI user
# measures. Per size the median over rounds of each program's time is compared (max over ranks
# with max, mean over ranks with mean); a cell agrees when psybench / C is within ±15%.
#
#   scripts/bench/mpi-crosscheck.sh [OPTIONS] [OUT_DIR]     (default OUT_DIR: results/mpi-crosscheck)
#
#   --quick             1 round, sizes 8,64K (a smoke test of the harness)
#   --rounds N          rounds (default 3); the program that runs first alternates per round
#   --sizes LIST        sizes (default 8,64K,1M,16M,64M)
#   --cadences LIST     psybench cadences (default stream,osu); psybench's `isolated` (a barrier,
#                       then the timed call) is held against the C program's `osu`
#   --transports LIST   shm (Open MPI's default, vader) and/or tcp (ob1 over loopback) (default both)
#   --collectives LIST  default allreduce,broadcast,allgather,reducescatter
#   --ranks N           default 2
#   --tolerance F       default 0.15
#   --no-avx            add `--mca op ^avx` (Open MPI without its AVX reductions, which saturate
#                       8/16-bit integer sums; f32 sums run slower without them: results/mpi-settings/). Off by
#                       default: MPI as its users run it.
#
# Every mpirun is stopped after CROSSCHECK_TIMEOUT seconds (default 900; TERM, then KILL 10 s later).
# Writes OUT_DIR/raw/ (every run's output and runs.csv listing them), OUT_DIR/agreement.csv and
# OUT_DIR/README.md (machine, load, commands, table, verdict). Exits 1 if any cell is outside the
# tolerance, a result was wrong or a run failed (the report is written anyway), 2 on usage errors.
set -euo pipefail
cd "$(dirname "$0")/../.."
# Refuses a dirty tree unless --allow-dirty (taken out of the arguments); sets REVISION.
. scripts/report/publish.sh
set -- "${ARGS[@]}"

usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//' >&2; exit 2; }

rounds=
sizes=
cadences=stream,osu
transports=shm,tcp
collectives=allreduce,broadcast,allgather,reducescatter
ranks=2
tolerance=0.15
out=
quick=
op_flags=()
while [ $# -gt 0 ]; do
  case "$1" in
    --quick) quick=1 ;;
    --rounds) rounds=${2:?--rounds needs a number}; shift ;;
    --sizes) sizes=${2:?--sizes needs a list}; shift ;;
    --cadences) cadences=${2:?--cadences needs a list}; shift ;;
    --transports) transports=${2:?--transports needs a list}; shift ;;
    --collectives) collectives=${2:?--collectives needs a list}; shift ;;
    --ranks) ranks=${2:?--ranks needs a number}; shift ;;
    --tolerance) tolerance=${2:?--tolerance needs a fraction}; shift ;;
    --no-avx) op_flags=(--mca op ^avx) ;;
    -h|--help) usage ;;
    -*) echo "mpi-crosscheck.sh: unknown option $1" >&2; usage ;;
    *) [ -z "$out" ] || { echo "mpi-crosscheck.sh: one OUT_DIR only" >&2; usage; }; out=$1 ;;
  esac
  shift
done
out=${out:-results/mpi-crosscheck}
# --quick sets what --rounds and --sizes leave unset.
rounds=${rounds:-${quick:+1}}
rounds=${rounds:-3}
sizes=${sizes:-${quick:+8,64K}}
sizes=${sizes:-8,64K,1M,16M,64M}
case "$rounds" in ''|*[!0-9]*|0) echo "mpi-crosscheck.sh: --rounds must be a positive number" >&2; exit 2 ;; esac
IFS=, read -r -a cadence_list <<<"$cadences"
IFS=, read -r -a transport_list <<<"$transports"
IFS=, read -r -a coll_list <<<"$collectives"
for t in "${transport_list[@]}"; do
  case "$t" in shm|tcp) ;; *) echo "mpi-crosscheck.sh: unknown transport $t (shm or tcp)" >&2; exit 2 ;; esac
done
# psybench's cadence -> the C program's.
c_cadence() {
  case "$1" in
    stream) echo stream ;;
    osu|isolated) echo osu ;;
    *) echo "mpi-crosscheck.sh: unknown cadence $1 (stream, osu, or isolated)" >&2; return 2 ;;
  esac
}
for c in "${cadence_list[@]}"; do c_cadence "$c" >/dev/null || exit 2; done

scripts/setup.sh >/dev/null
mkdir -p target/mpi-crosscheck
cbench=target/mpi-crosscheck/mpi_coll_bench
mpicc -O2 -Wall -Wextra -o "$cbench" bench/c/mpi_coll_bench.c
cargo build --release -q -p psybench --features mpi
bench=target/release/psybench
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

# Every cadence asked for must exist in this psybench (`osu` is newer than `isolated`): a usage
# error shows before anything runs (one rank of the native backend, one 8-byte call).
for c in "${cadence_list[@]}"; do
  if ! probe=$("$bench" allreduce --cadence "$c" --sizes 8 --iters 1 --warmup 0 2>&1); then
    printf '%s\n' "$probe" >&2
    echo "mpi-crosscheck.sh: $bench allreduce --cadence $c failed (above); if it does not know" \
      "the cadence, build one that does, or pass --cadences stream,isolated" >&2
    exit 2
  fi
done

mkdir -p "$out/raw"
rm -f "$out"/raw/*
runs="$out/raw/runs.csv"
echo "round,transport,collective,cadence,program,rc,path" >"$runs"
commands=()
failed=0
# Nothing hangs: a run that outlives this is stopped (TERM, then KILL 10 s later).
limit=${CROSSCHECK_TIMEOUT:-900}

run() { # round transport coll cadence program -- command...
  local round=$1 t=$2 coll=$3 cad=$4 prog=$5 file rc=0
  shift 6
  local name="r$round-$t-$coll-$cad"
  if [ "$prog" = c ]; then
    file=$name-c.csv
    timeout -k 10 "$limit" "$@" >"$out/raw/$file" 2>"$out/raw/$name-c.err" || rc=$?
  else
    file=$name-psybench.json
    timeout -k 10 "$limit" "$@" --json "$out/raw/$file" >"$out/raw/$name-psybench.txt" 2>&1 || rc=$?
  fi
  echo "$round,$t,$coll,$cad,$prog,$rc,raw/$file" >>"$runs"
  if [ "$rc" -ne 0 ]; then
    echo "  $prog exited $rc (see $out/raw/$name-*)" >&2
    failed=1
  fi
}

load_before=$(cut -d' ' -f1-3 /proc/loadavg)
started=$(date -u +%Y-%m-%dT%H:%M:%SZ)
for ((round = 1; round <= rounds; round++)); do
  for t in "${transport_list[@]}"; do
    # Open MPI as its users run it (its AVX reductions on, unless --no-avx). Both programs get the
    # same mpirun, so the same binding (Open MPI's default: each rank bound to a core for 2 ranks).
    mpi=(mpirun --oversubscribe "${op_flags[@]}")
    if [ "$t" = tcp ]; then
      mpi+=(--mca pml ob1 --mca btl tcp,self --mca btl_tcp_if_include lo)
    fi
    mpi+=(-n "$ranks")
    for coll in "${coll_list[@]}"; do
      for cad in "${cadence_list[@]}"; do
        ccad=$(c_cadence "$cad")
        c_cmd=("${mpi[@]}" "$cbench" "$coll" --cadence "$ccad" --sizes "$sizes")
        p_cmd=("${mpi[@]}" "$bench" "$coll" --backend mpi --cadence "$cad" --sizes "$sizes")
        if [ "$round" -eq 1 ]; then
          commands+=("${c_cmd[*]}" "${p_cmd[*]} --json OUT.json")
        fi
        echo "round $round/$rounds: $t $coll $cad" >&2
        # Alternate which program goes first: C first in odd rounds, psybench first in even ones.
        if [ $((round % 2)) -eq 1 ]; then
          run "$round" "$t" "$coll" "$cad" c -- "${c_cmd[@]}"
          run "$round" "$t" "$coll" "$cad" psybench -- "${p_cmd[@]}"
        else
          run "$round" "$t" "$coll" "$cad" psybench -- "${p_cmd[@]}"
          run "$round" "$t" "$coll" "$cad" c -- "${c_cmd[@]}"
        fi
      done
    done
  done
done
load_after=$(cut -d' ' -f1-3 /proc/loadavg)

summary_rc=0
scripts/report/crosscheck-summary.py "$out" --tolerance "$tolerance" >"$out/summary.md" || summary_rc=$?

pct=$(python3 -c "print(round($tolerance * 100))")
{
  echo "# psybench's MPI backend vs a plain C MPI benchmark"
  echo
  echo "Made by \`scripts/bench/mpi-crosscheck.sh${quick:+ --quick}\` (rounds $rounds, sizes $sizes, cadences $cadences," \
    "transports $transports, $ranks ranks${op_flags[*]:+, ${op_flags[*]}}) from $started to $(date -u +%Y-%m-%dT%H:%M:%SZ)," \
    "source revision $REVISION."
  echo
  echo "Both programs call the same MPI collectives (f32, sum, root 0; all-reduce in place with"
  echo "MPI_IN_PLACE, all-gather and reduce-scatter out of place) at the same sizes (as nccl-tests"
  echo "defines them), with the same iterations (\`clamp(2^30 / bytes, 5, 1000)\`, warm-up"
  echo "\`clamp(iters / 10, 2, 20)\`) and cadence, under the same \`mpirun\` flags, alternately (the one"
  echo "that goes first alternates per round). Each time is a per-rank mean per call; per size the table"
  echo "shows the median over rounds of the slowest rank's (max) and of the mean over ranks (avg), and"
  echo "psybench / C. A cell is within ±$pct% when both ratios are. \`noise\`: the larger of the two programs'"
  echo "round-to-round spread of the max, (largest - smallest) / median; a cell outside the band whose"
  echo "ratios differ from 1 by no more than that is marked \"no (within noise)\": these rounds cannot tell"
  echo "it from the machine's noise. The C program:"
  echo "\`bench/c/mpi_coll_bench.c\` (see \`bench/c/README.md\`)."
  echo
  scripts/report/lib.py machine-table "$load_before" "$load_after"
  echo
  echo "Commands of round 1 (later rounds repeat them; \`OUT.json\` is \`raw/r<round>-<transport>-<collective>-<cadence>-psybench.json\`):"
  echo
  echo '```'
  echo "mpicc -O2 -Wall -Wextra -o $cbench bench/c/mpi_coll_bench.c"
  echo "cargo build --release -p psybench --features mpi"
  echo "export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1"
  printf '%s\n' "${commands[@]}"
  echo '```'
  echo
  echo "Rows: \`agreement.csv\` (each round's value in the \`*_rounds_us\` columns); every run's output: \`raw/\`."
  echo
  cat "$out/summary.md"
} >"$out/README.md"
rm -f "$out/summary.md"
tail -n 1 "$out/README.md"
echo "wrote $out"
if [ "$summary_rc" -ne 0 ] || [ "$failed" -ne 0 ]; then
  exit 1
fi
