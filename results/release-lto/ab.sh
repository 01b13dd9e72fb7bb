#!/bin/bash
# Two release builds alternated, one psybench job each per round and collective, the order
# swapped every round, OSU cadence. Each job's line: round, build, collective, then the time per
# size (µs, the mean over ranks). `table.py OUT` splits the jobs by their own 8-byte time (the
# machine's slow state, results/job-swings/flat-states/) and prints medians per build and size.
#   R=20 NEW=target/release OLD=/work/base/target/release COLLS="allreduce broadcast" \
#     SIZES=8,1K,4K,16K,64K results/release-lto/ab.sh OUT.txt
out=$1; R=${R:-20}; NEW=${NEW:-target/release}; OLD=${OLD:-/work/base/target/release}
COLLS=${COLLS:-allreduce}; SIZES=${SIZES:-8,1K,4K,16K}
: > "$out"
cd "$(dirname "$0")/../.."
for r in $(seq "$R"); do
  for c in $COLLS; do
    for v in new old; do
      if [ $((r % 2)) = 0 ]; then v=$([ $v = new ] && echo old || echo new); fi
      B=$([ $v = new ] && echo "$NEW" || echo "$OLD")
      t=$("$B/psyrun" -n 2 "$B/psybench" "$c" --cadence osu --sizes "$SIZES" 2>&1 |
        grep -E '^ +[0-9]+ ' | awk '{printf "%s ", $9}')
      echo "$r $v $c $t" >> "$out"
    done
  done
done
