#!/usr/bin/env bash
# Reducing receives reduced in one pass (B) against the build before (A), alternated job by job
# (scripts/bench/ab-psybench.sh), OSU cadence as the versus reports measure: the reducing
# collectives of 2 ranks over shared memory from 16 KiB to 64 MiB, over loopback TCP, and of 4
# ranks (2 cores: oversubscribed); then the 2-rank reduce-scatter of 1 MiB against its C copy floor
# (scripts/probes/floors/staged2.c in its fastest slice), alternated with B. The machine's
# cross-core round trip (scripts/probes/core-bounce.c) before and after each part goes to
# machine.txt: about 55 ns in its normal state, about 330 in its slow one.
# Usage: results/reduce-one-pass/run.sh A_TARGET_DIR B_TARGET_DIR [OUT]
#   (each TARGET_DIR with release builds of psyrun and psybench)
set -euo pipefail
cd "$(dirname "$0")/../.."
a=$1 b=$2 out=${3:-results/reduce-one-pass}
mkdir -p "$out/raw"
bin=$(mktemp -d)
trap 'rm -rf "$bin"' EXIT
gcc -O2 -o "$bin/core-bounce" scripts/probes/core-bounce.c
gcc -O3 -march=native -I scripts/probes/floors -o "$bin/staged2" scripts/probes/floors/staged2.c
{ date -u; uname -r; nproc; uptime; git rev-parse --short HEAD; } > "$out/machine.txt"
ab() {
  local name=$1 rounds=$2
  shift 2
  echo "$name: $("$bin/core-bounce")" >> "$out/machine.txt"
  ROUNDS=$rounds scripts/bench/ab-psybench.sh "$a" "$b" "$out/raw" "$name" "$@" --cadence osu \
    --rounds 3 > "$out/ab-$name.txt"
}
for coll in reducescatter allreduce reduce; do
  ab "$coll-2" 10 -n 2 "$coll" --transport shm --sizes 16K,64K,256K,1M,4M,16M,64M
done
for coll in reducescatter allreduce; do
  ab "$coll-2-tcp" 8 -n 2 "$coll" --transport tcp --sizes 1K,16K,64K,256K,1M,16M
  ab "$coll-4" 8 -n 4 "$coll" --transport shm --sizes 16K,64K,256K,1M,4M,16M
done
echo "floor: $("$bin/core-bounce")" >> "$out/machine.txt"
for round in 1 2 3 4 5 6; do
  "$bin/staged2" reducescatter 1048576 300 262144 0
  "$b/psyrun" -n 2 "$b/psybench" reducescatter --transport shm --cadence osu --rounds 1 \
    --sizes 1M </dev/null | grep -v '^#'
done > "$out/floor.txt"
echo "end: $("$bin/core-bounce")" >> "$out/machine.txt"
uptime >> "$out/machine.txt"
