#!/usr/bin/env bash
# Alternates scripts/probes/tcp-exchange-floor.c (the kernel's least for a 2-rank exchange over
# loopback TCP) with psyne's 2-rank all-reduce over TCP (psybench under psyrun, OSU cadence), at
# the same sizes and calls a size, ROUNDS times (default 6), the first of the two swapping each
# round; the machine's cross-core round trip is measured before and after each job. Prints one
# line a job: `round program bounce_before bounce_after size:µs ...`.
#
#   scripts/probes/tcp-exchange-floor.sh TARGET_DIR [SIZES] [ITERS]   (e.g. target/release 8,1024,16384,65536 20000)
# SIZES in bytes, comma-separated (the C program takes bytes; psybench takes them too).
set -euo pipefail
cd "$(dirname "$0")/../.."
dir=$1 sizes=${2:-8,1024,16384,65536} iters=${3:-20000} rounds=${ROUNDS:-6}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
gcc -O2 -I scripts/probes/floors -o "$tmp/floor" scripts/probes/tcp-exchange-floor.c
gcc -O2 -pthread -o "$tmp/bounce" scripts/probes/core-bounce.c
floor() {
  for b in ${sizes//,/ }; do
    printf '%s:%s ' "$b" "$("$tmp/floor" "$b" "$iters" | awk '{print $7}')"
  done
}
psyne() {
  "$dir/psyrun" -n 2 "$dir/psybench" allreduce --transport tcp --cadence osu --sizes "$sizes" \
    --iters "$iters" 2>&1 | awk '/^ +[0-9]/ {printf "%s:%s ", $1, $9}'
}
for r in $(seq 1 "$rounds"); do
  order="floor psyne"
  [ $((r % 2)) -eq 0 ] && order="psyne floor"
  for who in $order; do
    before=$("$tmp/bounce" | awk '{print $7}')
    out=$($who)
    echo "$r $who $before $("$tmp/bounce" | awk '{print $7}') $out"
  done
done
