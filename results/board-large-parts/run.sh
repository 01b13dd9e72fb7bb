#!/usr/bin/env bash
# The node board taking parts larger than its slots through the data areas (B) against the build
# before (A), alternated job by job (scripts/bench/ab-psybench.sh), for the collectives whose
# 2-rank calls of 32-128 KiB now run on the board (all-reduce, broadcast, all-gather), in OSU
# cadence as the versus report measures; then scripts/probes/slot-rotation.c, the same exchange
# in C, for the copy floor.
# Usage: results/board-large-parts/run.sh A_TARGET_DIR B_TARGET_DIR [OUT]
#   (each TARGET_DIR with release builds of psyrun and psybench)
set -euo pipefail
cd "$(dirname "$0")/../.."
a=$1 b=$2 out=${3:-results/board-large-parts}
mkdir -p "$out/raw"
{ date -u; uname -r; nproc; uptime; git rev-parse --short HEAD; } > "$out/machine.txt"
sizes=${SIZES:-16K,24K,32K,48K,64K,96K,128K,192K,256K}
for coll in allreduce broadcast allgather; do
  ROUNDS=${ROUNDS:-6} scripts/bench/ab-psybench.sh "$a" "$b" "$out/raw" "$coll-2" -n 2 "$coll" \
    --transport shm --cadence osu --rounds 3 --sizes "$sizes" > "$out/ab-$coll-2.txt"
done
bin=$(mktemp -d)
trap 'rm -rf "$bin"' EXIT
gcc -O3 -march=native -I scripts/probes/floors -o "$bin/slot-rotation" scripts/probes/slot-rotation.c
for round in 1 2 3; do
  for bytes in 32768 65536 131072 262144; do
    # all-reduce of BYTES a rank (BYTES/2 in the probe's terms is a rank's half: pass 2x)
    "$bin/slot-rotation" allreduce $((2 * bytes)) 3000 2097152
    "$bin/slot-rotation" allgather "$bytes" 3000 2097152
  done
done > "$out/c-floor.txt"
uptime >> "$out/machine.txt"
