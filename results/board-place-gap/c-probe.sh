#!/usr/bin/env bash
# The C program of the node board's 2-rank all-reduce (scripts/probes/board-halves.c, mode
# whole, 20,000 calls a job) with its places one after the other (as the board's were), with
# 2 KiB and a page left unused after each, and visited out of order; alternated per size,
# ROUNDS rounds, the cross-core round trip (scripts/probes/core-bounce.c) before each round.
# Prints one line per round and size: µs a call, mean over both ranks.
# Usage: results/board-place-gap/c-probe.sh [ROUNDS] > c-probe.txt
set -euo pipefail
cd "$(dirname "$0")/../.."
rounds=${1:-5}
bin=$(mktemp -d)
trap 'rm -rf "$bin"' EXIT
gcc -O3 -march=x86-64-v3 -I scripts/probes/floors -o "$bin/board-halves" scripts/probes/board-halves.c
gcc -O2 -pthread -o "$bin/core-bounce" scripts/probes/core-bounce.c
sizes=${SIZES:-6144 8192 12288 13312 16384 16512 32768 65536}
echo "# $(date -u), $(uname -r), $(nproc) cores, $(git rev-parse --short HEAD); µs a call"
echo "# round  round-trip  bytes  adjacent  gap-2K  gap-4K  scattered"
for r in $(seq "$rounds"); do
  trip=$("$bin/core-bounce" | grep -o '[0-9.]* ns' | head -1)
  for s in $sizes; do
    run() { env "$@" "$bin/board-halves" whole "$s" 20000 | awk '{print $(NF-1)}'; }
    printf '%s  %s  %s  %s  %s  %s  %s\n' "$r" "$trip" "$s" "$(run A=1)" "$(run PLACE_GAP=2048)" \
      "$(run PLACE_GAP=4096)" "$(run PLACE_ORDER=scattered)"
  done
done
echo "# $(uptime)"
