#!/usr/bin/env bash
# Copy receives that nothing forwards read all that has arrived (B) against reads of at most
# 256 KiB (A), alternated job by job (scripts/bench/ab-psybench.sh), OSU cadence as the versus
# reports measure: every collective of 2 ranks over shared memory from 256 KiB to 64 MiB, three
# over loopback TCP, three of 4 ranks (2 cores: oversubscribed); then scripts/probes/ring-allgather.c,
# the 2-rank all-gather of 16 MiB in C with reads of at most 256 KiB and of 4 MiB.
# Usage: results/copy-reads/run.sh A_TARGET_DIR B_TARGET_DIR [OUT]
#   (each TARGET_DIR with release builds of psyrun and psybench)
set -euo pipefail
cd "$(dirname "$0")/../.."
a=$1 b=$2 out=${3:-results/copy-reads}
mkdir -p "$out/raw"
{ date -u; uname -r; nproc; uptime; git rev-parse --short HEAD; } > "$out/machine.txt"
ab() {
  local name=$1 rounds=$2
  shift 2
  ROUNDS=$rounds scripts/bench/ab-psybench.sh "$a" "$b" "$out/raw" "$name" "$@" --cadence osu \
    --rounds 3 > "$out/ab-$name.txt"
}
for coll in allgather broadcast alltoall sendrecv allreduce reducescatter gather scatter; do
  ab "$coll-2" 10 -n 2 "$coll" --transport shm --sizes 256K,1M,4M,16M,64M
done
for coll in allgather broadcast alltoall; do
  ab "$coll-2-tcp" 8 -n 2 "$coll" --transport tcp --sizes 256K,1M,4M,16M
done
for coll in allgather alltoall gather; do
  ab "$coll-4" 10 -n 4 "$coll" --transport shm --sizes 256K,1M,4M,16M
done
bin=$(mktemp -d)
trap 'rm -rf "$bin"' EXIT
gcc -O3 -march=native -I scripts/probes/floors -o "$bin/ring-allgather" scripts/probes/ring-allgather.c
for round in 1 2 3 4 5; do
  for read_max in 262144 4194304; do
    "$bin/ring-allgather" 16777216 32 1048576 32768 "$read_max"
  done
done > "$out/c-probe.txt"
uptime >> "$out/machine.txt"
