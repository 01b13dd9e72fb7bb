#!/usr/bin/env bash
# Jobs of psyne's 2-rank TCP all-reduce one after another, the machine's cross-core round trip
# (scripts/probes/core-bounce.c, median ns) measured before each: which jobs are the slow kind,
# and does the machine's slow state explain them?
#
#   results/tcp-header-read/slow-jobs.sh TARGET_DIR OUT [JOBS]   (prints one line per job)
set -euo pipefail
cd "$(dirname "$0")/../.."
[ $# -ge 2 ] || { echo "usage: $0 TARGET_DIR OUT [JOBS]" >&2; exit 2; }
dir=$1 out=$2 jobs=${3:-12}
mkdir -p "$out"
gcc -O2 -o "$out/core-bounce" scripts/probes/core-bounce.c
for i in $(seq 1 "$jobs"); do
  ns=$("$out/core-bounce" | awk '{print $7}')
  "$dir/psyrun" -n 2 "$dir/psybench" allreduce --transport tcp --cadence osu --rounds 4 \
    --sizes 16K,64K,1M,16M --json "$out/j$i.json" </dev/null >/dev/null
  python3 -c "
import json, sys
d = json.load(open(sys.argv[1]))
print(sys.argv[2], 'cb=' + sys.argv[3], ' '.join('%.0f' % r['time_us_avg'] for r in d['records']))
" "$out/j$i.json" "$i" "$ns"
done
