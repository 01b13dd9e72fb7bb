#!/usr/bin/env bash
# Rotating board parts with room after each (B) against the build before (A), alternated job by
# job (scripts/bench/ab-psybench.sh), 2 ranks, for the collectives whose parts rotate at 8 KiB-
# 1 MiB; then the tables split by the VM's state (scripts/report/ab.py states).
# Usage: results/board-place-gap/run.sh A_TARGET_DIR B_TARGET_DIR [OUT]
#   (each TARGET_DIR with release builds of psyrun and psybench)
set -euo pipefail
cd "$(dirname "$0")/../.."
a=$1 b=$2 out=${3:-results/board-place-gap}
mkdir -p "$out/raw"
ab() {
  local rounds=$1 coll=$2
  shift 2
  ROUNDS=$rounds scripts/bench/ab-psybench.sh "$a" "$b" "$out/raw" "$coll" -n 2 "$coll" \
    --cadence osu "$@" > /dev/null
  python3 scripts/report/ab.py states "$out/raw" "$coll" > "$out/states-$coll.txt"
}
ab 10 allreduce --sizes 8K,12K,16K,32K,64K,128K,1M --iters 20000
ab 10 reducescatter --sizes 8K,12K,16K,64K --iters 50000
for coll in broadcast allgather reduce; do
  ab 6 "$coll" --sizes 8K,16K,32K,64K,256K --iters 20000
done
