#!/usr/bin/env bash
# Node board calls timed from 8 KiB (B) against from 16 KiB (A): 2-rank all-reduce, broadcast,
# all-gather and reduce-scatter of 6-16 KiB, alternated job by job (scripts/bench/ab-psybench.sh),
# then the tables split by the VM's state (scripts/report/ab.py states). The slow state comes and
# goes on its own: run it again (OUT another folder) until both states have rounds.
# Usage: results/board-crossing-small/run.sh A_TARGET_DIR B_TARGET_DIR [OUT]
#   (each TARGET_DIR with release builds of psyrun and psybench)
set -euo pipefail
cd "$(dirname "$0")/../.."
a=$1 b=$2 out=${3:-results/board-crossing-small}
mkdir -p "$out/raw"
for coll in allreduce broadcast allgather reducescatter; do
  ROUNDS=${ROUNDS:-10} scripts/bench/ab-psybench.sh "$a" "$b" "$out/raw" "$coll" -n 2 "$coll" \
    --cadence osu --sizes 6K,8K,12K,16K --iters 20000 > /dev/null
  python3 scripts/report/ab.py states "$out/raw" "$coll" > "$out/states-$coll.txt"
done
