#!/usr/bin/env bash
# Builds of psyne alternated job by job over loopback TCP (`psybench all`, 2 ranks, OSU cadence,
# 2 rounds a job), the machine's cross-core round trip measured before each job so that
# summarize.py can leave out the jobs the VM's slow state met.
#
#   results/tcp-header-read/run.sh OUT ROUNDS SIZES NAME=TARGET_DIR...
#   e.g. run.sh /tmp/ad 6 1K,16K,64K,256K A=/work/wt-base/target/release D=target/release
#   python3 results/tcp-header-read/summarize.py /tmp/ad A D
#
# Each TARGET_DIR holds release builds of psyrun and psybench.
set -euo pipefail
cd "$(dirname "$0")/../.."
[ $# -ge 4 ] || { echo "usage: $0 OUT ROUNDS SIZES NAME=TARGET_DIR..." >&2; exit 2; }
out=$1 rounds=$2 sizes=$3
shift 3
mkdir -p "$out"
bounce=$out/core-bounce
gcc -O2 -o "$bounce" scripts/probes/core-bounce.c
for i in $(seq 1 "$rounds"); do
  builds=("$@")
  [ $((i % 2)) -eq 0 ] && mapfile -t builds < <(printf '%s\n' "$@" | tac)
  for b in "${builds[@]}"; do
    name=${b%%=*} dir=${b#*=}
    ns=$("$bounce" | awk '{print $7}')
    "$dir/psyrun" -n 2 "$dir/psybench" all --transport tcp --cadence osu --rounds 2 \
      --sizes "$sizes" --json "$out/$name-$i.json" </dev/null >/dev/null
    echo "$name $i $ns" >>"$out/bounce.txt"
  done
done
