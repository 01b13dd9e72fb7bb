#!/usr/bin/env bash
# This host's floors for two of issue 15's goals, measured by plain C programs
# (scripts/probes/floors/*.c) with the same single-copy kernel transfer psyne and Open MPI use between
# processes (process_vm_readv): a 2-rank all-reduce of caller-owned buffers (pull the peer's half,
# sum it, pull the peer's reduced half; whole and in 256 KiB slices) and a 2-rank ping-pong.
# Prints one line per measurement; scripts/bench/versus-mpi.sh writes them to OUT/floors.txt.
#
#   scripts/probes/floors.sh
set -euo pipefail
cd "$(dirname "$0")/floors"
bin=$(mktemp -d)
trap 'rm -rf "$bin"' EXIT
for prog in allreduce2 pingpong; do
  gcc -O3 -march=native -o "$bin/$prog" "$prog.c"
done
for bytes in 262144 1048576 4194304 16777216 67108864; do
  iters=$((bytes >= 67108864 ? 20 : bytes >= 4194304 ? 200 : 2000))
  "$bin/allreduce2" "$bytes" "$iters"
  "$bin/allreduce2" "$bytes" "$iters" 262144
done
for bytes in 16384 65536 262144 1048576; do
  "$bin/pingpong" "$bytes" 20000
done
