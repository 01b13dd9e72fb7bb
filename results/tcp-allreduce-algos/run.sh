#!/usr/bin/env bash
# All-reduce over loopback TCP on 2 and 4 ranks, and over shared memory on 2 for contrast, each
# flat algorithm and the built-in choice (auto) alternated per size and round in one job: what
# the choice by transport in psyne::tuning::Tuning::by_size rests on.
# Usage: results/tcp-allreduce-algos/run.sh [OUT]   (built first: cargo build --release)
set -euo pipefail
cd "$(dirname "$0")/../.."
out=${1:-results/tcp-allreduce-algos}
mkdir -p "$out"
bin=target/release
sweep() {
  local name=$1 ranks=$2 transport=$3 sizes=$4 algos=${5:-auto,rabenseifner,recursive_doubling,ring}
  "$bin/psyrun" -n "$ranks" --timeout 1800 "$bin/psybench" allreduce --transport "$transport" \
    --cadence osu --algo "$algos" --rounds "${ROUNDS:-5}" --sizes "$sizes" --factor 4 \
    --json "$out/$name.json" --plot "$out/$name.png" > "$out/$name.txt"
}
{ date -u; uname -r; nproc; uptime; git rev-parse --short HEAD; } > "$out/machine.txt"
sweep tcp-2 2 tcp 8:32M
sweep shm-2 2 shm 8:32M
sweep tcp-4 4 tcp 8:4M
# Where recursive doubling stops paying over shared memory on 2 ranks (above the board's 16 KiB).
ROUNDS=7 sweep shm-2-middle 2 shm 20K,32K,48K,64K,96K,128K,256K,512K,1M \
  auto,rabenseifner,recursive_doubling
uptime >> "$out/machine.txt"
