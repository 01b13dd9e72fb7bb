#!/bin/bash
# usage: state_ab.sh ROUNDS OUT ; alternates default and PSY_SHM_CMA=1, probing the machine state before each job
R=${1:-6}; OUT=${2:-/tmp/state_ab.txt}; B=/work/main/target/release
: > $OUT
for i in $(seq 1 $R); do
  for mode in default cma; do
    for coll in broadcast allgather allreduce; do
      bounce=$(/tmp/core-bounce 20000 | sed -E 's/.*trip: ([0-9.]+) ns.*/\1/')
      if [ $mode = cma ]; then env="PSY_SHM_CMA=1"; else env="-u PSY_SHM_CMA"; fi
      env $env $B/psyrun -n 2 $B/psybench $coll --cadence osu --sizes 64K,1M,4M 2>&1 | awk -v i=$i -v m=$mode -v b=$bounce -v c=$coll '/native/{print i, m, b, c, $1, $10}' >> $OUT
    done
  done
done
