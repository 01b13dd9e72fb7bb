#!/bin/bash
# The new build (target/release: the board's larger slots) against the base build (8ef5823,
# /work/base/target/release), one job each per collective and round, the order swapped every
# round, the core-bounce round trip recorded before each round.  R=30 alternate.sh  (writes /tmp/fv)
cd /work/main
B=target/release
out=${OUT:-/tmp/fv}
R=${R:-20}
for r in $(seq $R); do
  rt=$(/tmp/core-bounce | awk '{print $7}')
  for c in ${COLLS:-allreduce broadcast allgather reduce gather reducescatter}; do
    sizes=${SIZES:-4K,8K,16K,32K}
    for v in flat old; do
      if [ $(( r % 2 )) = 0 ]; then v=$([ $v = flat ] && echo old || echo flat); fi
      if [ $v = flat ]; then B=target/release; else B=/work/base/target/release; fi
      $B/psyrun -n ${N:-2} $B/psybench $c --cadence osu --sizes $sizes --json $out/$c-$v-r$r.json > /dev/null 2>&1 || echo "fail $c $v $r"
    done
  done
  echo "$r $rt" >> $out/bounce.txt
done
