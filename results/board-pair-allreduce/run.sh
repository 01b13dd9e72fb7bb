#!/usr/bin/env bash
# 2-rank all-reduce over shared memory from 4 to 24 KiB: the node board (what `auto` runs up to
# its slot's 16 KiB) against recursive doubling over the rings, alternated per size and round
# inside each job, JOBS jobs in a row, each with the cross-core round trip
# (scripts/probes/core-bounce.c) measured just before it as a gauge of the machine's state.
# What psyne::tuning::flat_max_bytes's all-reduce limit on 2 ranks rests on.
# Usage: results/board-pair-allreduce/run.sh [OUT]   (built first: cargo build --release)
set -euo pipefail
cd "$(dirname "$0")/../.."
out=${1:-results/board-pair-allreduce}
mkdir -p "$out"
bin=target/release
bounce=$(mktemp -d)/core-bounce
trap 'rm -rf "$(dirname "$bounce")"' EXIT
gcc -O2 -pthread -o "$bounce" scripts/probes/core-bounce.c
{ date -u; uname -r; nproc; uptime; git rev-parse --short HEAD; } > "$out/machine.txt"
: > "$out/bounce.txt"
for job in $(seq 1 "${JOBS:-8}"); do
  echo "job $job $("$bounce" 20000)" >> "$out/bounce.txt"
  "$bin/psyrun" -n 2 --timeout 600 "$bin/psybench" allreduce --transport shm --cadence osu \
    --algo auto,recursive_doubling --rounds "${ROUNDS:-7}" --sizes 4K,8K,12K,16K,24K \
    --json "$out/job$job.json" > "$out/job$job.txt"
done
uptime >> "$out/machine.txt"
