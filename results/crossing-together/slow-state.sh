#!/usr/bin/env bash
# The 2-rank all-reduce of 1, 16 and 64 MiB in the machine's slow state, five ways one after the
# other: `old` (the build before, PSY_SHM_STREAM_WRITES unset), `new` (this build, unset),
# `stream` (=on), `cached` (=off) and `mixed` (rank 0 =on, rank 1 =off). Until SECONDS have
# passed, whenever scripts/probes/core-bounce.c reads a cross-core round trip over 200 ns (the
# slow state; ~55 ns in the normal one), one pass of the five runs, each line with the round trip
# before and after it and psybench's avg (µs) of each of its 2 rounds per size. Nothing else may
# run meanwhile: a busy machine reads slow too.
#   results/crossing-together/slow-state.sh OLD_TARGET_DIR NEW_TARGET_DIR SECONDS >> OUT
set -euo pipefail
cd "$(dirname "$0")/../.."
old=$1 new=$2 end=$(($(date +%s) + $3))
bin=$(mktemp -d)
trap 'rm -rf "$bin"' EXIT
gcc -O2 -o "$bin/core-bounce" scripts/probes/core-bounce.c
bounce() { "$bin/core-bounce" | awk '{ print $7 }'; }
run() {
  local label=$1 dir=$2 rank0=$3 rank1=$4 before after res
  before=$(bounce)
  # Each rank's PSY_SHM_STREAM_WRITES from its PSY_RANK (empty: unset).
  res=$("$dir/psyrun" -n 2 bash -c \
    'w=$([ "$PSY_RANK" = 0 ] && echo "$0" || echo "$1"); [ -n "$w" ] && export PSY_SHM_STREAM_WRITES=$w || unset PSY_SHM_STREAM_WRITES; exec "$2" allreduce --transport shm --cadence osu --rounds 2 --sizes 1M,16M,64M' \
    "$rank0" "$rank1" "$dir/psybench" </dev/null | awk '!/^#/ && NF > 10 { printf "%s=%s ", $1, $10 }')
  after=$(bounce)
  echo "$(date -u +%T) $label bounce $before $after $res"
}
while [ "$(date +%s)" -lt "$end" ]; do
  if awk -v b="$(bounce)" 'BEGIN { exit !(b > 200) }'; then
    run old "$old" "" ""
    run new "$new" "" ""
    run stream "$new" on on
    run cached "$new" off off
    run mixed "$new" on off
  else
    sleep 5
  fi
done
