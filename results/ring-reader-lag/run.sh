#!/usr/bin/env bash
# The 2-rank collectives through rings of 1 MiB (as before 2026-11-29, PSY_SHM_RING_BYTES=1048576)
# and of this build's default (2 MiB, exchanges writing at most 1 MiB ahead), alternated job by
# job: scripts/bench/ab-psybench.sh, ROUNDS (default 6) rounds, psybench --cadence osu.
#
#   results/ring-reader-lag/run.sh OUT [ROUNDS]
set -euo pipefail
cd "$(dirname "$0")/../.."
out=$1
rounds=${2:-6}
cargo build --release -q -p psyrun -p psybench
bins=$(mktemp -d)
trap 'rm -rf "$bins"' EXIT
mkdir -p "$bins/ring1" "$bins/default"
cp target/release/psyrun target/release/psybench "$bins/default/"
cp target/release/psybench "$bins/ring1/"
cp target/release/psyrun "$bins/ring1/psyrun.bin"
printf '#!/bin/sh\nPSY_SHM_RING_BYTES=1048576 exec %s/ring1/psyrun.bin "$@"\n' "$bins" >"$bins/ring1/psyrun"
chmod +x "$bins/ring1/psyrun"
for coll in broadcast allreduce allgather reducescatter reduce; do
  ROUNDS=$rounds scripts/bench/ab-psybench.sh "$bins/ring1" "$bins/default" "$out" "$coll" \
    -n 2 "$coll" --cadence osu --sizes 64K,1M,4M,16M,64M
done
