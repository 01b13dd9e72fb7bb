#!/usr/bin/env bash
# Waits for the VM's slow state and measures psybench's 2-rank broadcast in it, four ways:
# every 3 s the cross-core round trip (scripts/probes/core-bounce.c, 2000 a batch); when it reads
# over 150 ns, broadcast jobs of 16, 64 and 128 KiB (OSU cadence) with PSY_SHM_STREAM_WRITES=on,
# =off, the default, and the default of the build in OLD_DIR, then the round trip again. One line
# a round: time, round trip before and after | on ... | off ... | auto ... | old ...
#
#   OLD_DIR=/work/wt-base/target/release SECS=3600 results/board-one-way/watch.sh > OUT
set -euo pipefail
cd "$(dirname "$0")/../.."
old=${OLD_DIR:?OLD_DIR: a folder with release builds of psyrun and psybench to compare with}
bounce=$(mktemp)
trap 'rm -f "$bounce"' EXIT
gcc -O2 -pthread -o "$bounce" scripts/probes/core-bounce.c
job() { env "$@" --cadence osu --sizes 16K,64K,128K 2>&1 | awk '$1==16384||$1==65536||$1==131072{printf "%s ", $9}'; }
end=$(($(date +%s) + ${SECS:-3600}))
while [ "$(date +%s)" -lt "$end" ]; do
  b=$("$bounce" 2000 | awk '{print $7}')
  if awk -v b="$b" 'BEGIN { exit !(b > 150) }'; then
    on=$(job PSY_SHM_STREAM_WRITES=on target/release/psyrun -n 2 target/release/psybench broadcast)
    off=$(job PSY_SHM_STREAM_WRITES=off target/release/psyrun -n 2 target/release/psybench broadcast)
    auto=$(job target/release/psyrun -n 2 target/release/psybench broadcast)
    was=$(job "$old/psyrun" -n 2 "$old/psybench" broadcast)
    echo "$(date +%T) $b $("$bounce" | awk '{print $7}') | on $on| off $off| auto $auto| old $was"
  else
    sleep 3
  fi
done
