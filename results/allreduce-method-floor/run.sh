#!/usr/bin/env bash
# psyne's 2-rank all-reduce of 64 KiB and 1 MiB beside the C programs of its method and of the
# bare exchange (scripts/probes/board-halves.c: whole, halves, swap), alternated, ROUNDS rounds
# (default 5); each line starts with the cross-core round trip before it (normal state: ~55 ns,
# slow: ~330). Prints to stdout; run from the repository root after `cargo build --release`.
set -euo pipefail
rounds=${ROUNDS:-5}
bin=$(mktemp -d)
trap 'rm -rf "$bin"' EXIT
gcc -O2 -pthread -o "$bin/core-bounce" scripts/probes/core-bounce.c
gcc -O3 -march=x86-64-v3 -I scripts/probes/floors -o "$bin/board-halves" scripts/probes/board-halves.c
rt=target/release
bounce() { "$bin/core-bounce" | awk '{print $7}'; }
for r in $(seq 1 "$rounds"); do
  echo "round $r psyne $(bounce) ns: $("$rt/psyrun" -n 2 "$rt/psybench" allreduce --cadence osu \
    --sizes 64K,1M 2>&1 | awk '$1 ~ /^[0-9]+$/ && NF > 10 {printf "%s %s us  ", $1, $10}')"
  for mode in whole halves swap; do
    line=""
    for bytes in 65536 1048576; do
      iters=$((bytes > 65536 ? 1000 : 5000))
      # psyne's places: 2 KiB or more after each part; a malloc'd buffer 16 bytes past 64.
      t=$(PLACE_GAP=2048 BUF_OFFSET=16 "$bin/board-halves" "$mode" "$bytes" "$iters" | awk '{print $(NF-1)}')
      line="$line$bytes $t us  "
    done
    echo "round $r C-$mode $(bounce) ns: $line"
  done
done
