#!/usr/bin/env bash
# Two builds of psyne, A and B (say before and after a change), measured alternately with the same
# psybench sweep under psyrun, ROUNDS times (default 6; the build that goes first swaps each
# round); every round's JSON lands in OUT, and a table of per-size medians, min–max and B/A is
# printed (scripts/report/ab.py rounds). For checking that a change did not make psyne slower, beside
# scripts/bench/versus-mpi.sh --focus's noisier whole-sweep comparison. The machine's cross-core
# round trip (scripts/probes/core-bounce.c) is measured before and after each job into
# OUT/NAME-bounce.txt, and the table leaves out the jobs that met the VM's slow state (over
# 150 ns before or after: the state can change within a job).
#
#   scripts/bench/ab-psybench.sh A_TARGET_DIR B_TARGET_DIR OUT NAME -n RANKS COLLECTIVE [PSYBENCH FLAGS...]
#   e.g. scripts/bench/ab-psybench.sh /work/wt-base/target/release target/release out bc -n 2 broadcast --sizes 1M
#
# Each TARGET_DIR must hold release builds of psyrun and psybench.
set -euo pipefail
cd "$(dirname "$0")/../.."
[ $# -ge 6 ] || { echo "usage: $0 A_DIR B_DIR OUT NAME -n RANKS COLLECTIVE [FLAGS...]" >&2; exit 2; }
a=$1 b=$2 out=$3 name=$4
shift 4
[ "$1" = -n ] || { echo "usage: $0 A_DIR B_DIR OUT NAME -n RANKS COLLECTIVE [FLAGS...]" >&2; exit 2; }
ranks=$2
shift 2
rounds=${ROUNDS:-6}
mkdir -p "$out"
bounce=$out/core-bounce
gcc -O2 -o "$bounce" scripts/probes/core-bounce.c
for i in $(seq 1 "$rounds"); do
  order=(A B)
  [ $((i % 2)) -eq 0 ] && order=(B A)
  for side in "${order[@]}"; do
    dir=$a
    [ "$side" = B ] && dir=$b
    before=$("$bounce" | awk '{print $7}')
    "$dir/psyrun" -n "$ranks" "$dir/psybench" "$@" --json "$out/$name-$side-r$i.json" >/dev/null
    echo "$side $i $before $("$bounce" | awk '{print $7}')" >>"$out/$name-bounce.txt"
  done
done
scripts/report/ab.py rounds "$out" "$name"
