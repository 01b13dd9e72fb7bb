#!/usr/bin/env bash
# What canonical reduction order costs: psybench all-reduce of f32 sums, 8 B to 64 MiB (factor 2),
# on 2 and 4 local ranks (shared memory), fast and canonical order alternated per size and round
# (`--reduce-order fast,canonical --rounds N`), then the medians over rounds side by side
# (scripts/report/reduce_order.py -> OUT/summary.md). Needs a release psybench:
#   cargo build --release -p psybench
#   scripts/bench/reduce-order.sh [OUT]     (OUT default results/reduce-order)
# Environment: ROUNDS (default 5), PSYBENCH (default target/release/psybench), RANKS ("2 4").
set -euo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
here=$(mkdir -p "${1:-$repo/results/reduce-order}" && cd "${1:-$repo/results/reduce-order}" && pwd)
bench=${PSYBENCH:-$repo/target/release/psybench}
rounds=${ROUNDS:-5}
export PSY_TUNING=off # the built-in thresholds, not this machine's tuning file
for n in ${RANKS:-2 4}; do
  "$bench" -n "$n" allreduce --sizes 8:64M --reduce-order fast,canonical --rounds "$rounds" \
    --json "$here/allreduce-$n.json" --csv "$here/allreduce-$n.csv" >"$here/allreduce-$n.log"
done
python3 "$repo/scripts/report/reduce_order.py" "$here"/allreduce-*.json >"$here/summary.md"
cat "$here/summary.md"
