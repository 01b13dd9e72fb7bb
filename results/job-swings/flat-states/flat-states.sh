#!/bin/bash
# Which all-reduce slows in the machine's slow state, and by how much: over SECS seconds, round
# after round, psyne (psybench under psyrun), a plain C flat all-reduce with nothing of psyne's
# code (scripts/probes/flat-allreduce.c: each rank copies its buffer into its own slot, publishes
# a flag, reads and sums the peer's slot) and Intel MPI (bench/c/mpi_coll_bench.c under Intel
# MPI's mpiexec), 2 ranks, OSU cadence, 8 B, 16 KiB and 64 KiB, the cross-core round trip
# (scripts/probes/core-bounce.c) before and after each round. Appends to OUT (jobs.txt).
#
#   SECS=480 OUT=jobs.txt results/job-swings/flat-states/flat-states.sh    (from the checkout)
#   python3 results/job-swings/flat-states/summary.py jobs.txt
set -euo pipefail
impi=/opt/psyne-impi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cargo build --release -q -p psybench -p psyrun
gcc -O3 -march=native -I scripts/probes/floors -o "$tmp/flat-allreduce" scripts/probes/flat-allreduce.c
gcc -O2 -pthread -o "$tmp/core-bounce" scripts/probes/core-bounce.c
gcc -O2 -I"$impi/include" -L"$impi/lib" -Wl,-rpath,"$impi/lib" -o "$tmp/cb-impi" bench/c/mpi_coll_bench.c -lmpi
out=${OUT:-jobs.txt}
end=$(( $(date +%s) + ${SECS:-480} ))
i=0
while [ "$(date +%s)" -lt $end ]; do
  i=$((i+1))
  b0=$("$tmp/core-bounce" | awk '{print $7}')
  p=$(target/release/psyrun -n 2 target/release/psybench allreduce --cadence osu --sizes 8,16K,64K | awk '/^ +[0-9]+ /{printf "%s ", $9}')
  c=$(for s in 8 16384 65536; do "$tmp/flat-allreduce" $s 2000 | awk '{printf "%s ", $5}'; done)
  m=$(env LD_LIBRARY_PATH="$impi/lib" "$impi/bin/mpiexec" -n 2 "$tmp/cb-impi" allreduce --cadence osu --sizes 8,16K,64K | awk -F, 'NR>1{printf "%s ", $9}')
  b1=$("$tmp/core-bounce" | awk '{print $7}')
  echo "$i bounce $b0 $b1 | psyne $p| cflat $c| impi $m" >> "$out"
done
