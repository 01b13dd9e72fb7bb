#!/bin/bash
# This build (target/release) against BASE (a release build of the commit before, default
# /work/base/target/release): one psybench job each per round, OSU cadence, 8 B and 16 KiB, the
# order swapped every round. A job counts as slow-state when its own 8-byte time is over 1.6x the
# median of all 8-byte times (the machine state changes within seconds, so a probe beside the job
# says less than the job itself). Prints the medians of the 16 KiB times per build and state.
#   R=80 COLL=allreduce results/board-crossing/ab16.sh OUT.txt
out=$1; R=${R:-40}; COLL=${COLL:-allreduce}; BASE=${BASE:-/work/base/target/release}
: > $out
cd "$(dirname "$0")/../.."
for r in $(seq $R); do
  for v in new old; do
    if [ $((r % 2)) = 0 ]; then v=$([ $v = new ] && echo old || echo new); fi
    B=$([ $v = new ] && echo target/release || echo "$BASE")
    echo "$r $v $($B/psyrun -n 2 $B/psybench $COLL --cadence osu --sizes 8,16K 2>&1 | grep -E '^ +[0-9]+ ' | awk '{printf "%s ", $9}')" >> $out
  done
done
python3 - $out <<'PY'
import statistics,sys
rows=[l.split() for l in open(sys.argv[1]) if len(l.split())==4]
small=statistics.median(float(r[2]) for r in rows)
for v in ['new','old']:
    xs=[(float(r[2]),float(r[3])) for r in rows if r[1]==v]
    n=[b for a,b in xs if a<=1.6*small]; s=[b for a,b in xs if a>1.6*small]
    f=lambda l: '%.2f (%d)'%(statistics.median(l),len(l)) if l else '-'
    print(v,'16K normal',f(n),' slow',f(s),' all',f([b for a,b in xs]))
PY
