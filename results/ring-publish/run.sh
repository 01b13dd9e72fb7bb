#!/bin/bash
# PUBLISH_EVERY variants alternated (exp build), stream cadence default iterations; bounce before each job
R=${1:-7}; OUT=${2:-/tmp/pub_ab.txt}; E=/work/exp-target/release
: > $OUT
for i in $(seq 1 $R); do
  for coll in broadcast allgather allreduce reducescatter sendrecv; do
    vs="32768 131072 262144"; [ $((i % 2)) = 0 ] && vs="262144 131072 32768"
    for p in $vs; do
      b=$(/tmp/core-bounce 20000 | sed -E 's/.*trip: ([0-9.]+) ns.*/\1/')
      PSY_EXP_PUBLISH=$p $E/psyrun -n 2 $E/psybench $coll --cadence osu --sizes 16K,64K,256K,1M,4M,16M 2>&1 | awk -v i=$i -v p=$p -v b=$b -v c=$coll '/native/ && $1 ~ /^[0-9]+$/ {print i, c, p, b, $1, $10}' >> $OUT
    done
  done
done
