#!/usr/bin/env bash
# The node board with parts rotating through each slot's data area (B) against the build before
# (A), alternated job by job (scripts/bench/ab-psybench.sh), for every collective the board
# takes, on 2 ranks (every rank a core) and 4 ranks on 2 cores (a crowded board).
# Usage: results/board-rotation/run.sh A_TARGET_DIR B_TARGET_DIR [OUT]
#   (each TARGET_DIR with release builds of psyrun and psybench)
set -euo pipefail
cd "$(dirname "$0")/../.."
a=$1 b=$2 out=${3:-results/board-rotation}
mkdir -p "$out/raw"
{ date -u; uname -r; nproc; uptime; git rev-parse --short HEAD; } > "$out/machine.txt"
sizes=${SIZES:-8,1K,4K,6K,8K,12K,16K}
for coll in allreduce broadcast allgather reducescatter alltoall reduce gather scatter; do
  ROUNDS=${ROUNDS:-6} scripts/bench/ab-psybench.sh "$a" "$b" "$out/raw" "$coll-2" -n 2 "$coll" \
    --transport shm --cadence osu --rounds 3 --sizes "$sizes" > "$out/ab-$coll-2.txt"
done
for coll in allreduce broadcast allgather; do
  ROUNDS=${ROUNDS:-6} scripts/bench/ab-psybench.sh "$a" "$b" "$out/raw" "$coll-4" -n 4 "$coll" \
    --transport shm --cadence osu --rounds 3 --sizes "$sizes" > "$out/ab-$coll-4.txt"
done
uptime >> "$out/machine.txt"
