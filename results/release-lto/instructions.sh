#!/bin/bash
# Instructions a call of a 2-rank collective runs, counted by callgrind (valgrind) on rank 0 and
# rank 1 of `psybench COLL --cadence stream --sizes SIZE --iters 20000`, divided by the 20,100
# calls (the count includes start-up, the same for every build, about 100 a call), with the
# waits for the peer (Watch::wait_for, the spinner) counted apart: they depend on timing, not on
# the code's length.
#   results/release-lto/instructions.sh BINDIR [COLL] [SIZE]
set -euo pipefail
bin=$(realpath "$1"); coll=${2:-allreduce}; size=${3:-8}
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
(cd "$dir" && timeout 300 "$bin/psyrun" -n 2 valgrind --tool=callgrind \
  --callgrind-out-file="$dir/cg.%p" "$bin/psybench" "$coll" --cadence stream --sizes "$size" \
  --iters 20000 --warmup 100 --no-check > /dev/null 2>&1)
for f in "$dir"/cg.*; do
  callgrind_annotate "$f" 2>/dev/null | python3 -c '
import re, sys
calls = 20100
by_fn = {}
for line in sys.stdin:
    m = re.match(r"\s*([\d,]+) \([^)]*\)\s+(\S+?):(.*?)( \[(/[^\]]*)\])?$", line)
    if m:
        by_fn[m.group(3)] = by_fn.get(m.group(3), 0) + int(m.group(1).replace(",", ""))
total = sum(by_fn.values())
waits = sum(v for k, v in by_fn.items() if "wait_for" in k or "Spinner" in k or "sched_yield" in k)
print("rank: %.0f instructions a call, %.0f of them waiting, %.0f outside the waits"
      % (total / calls, waits / calls, (total - waits) / calls))
for name, n in sorted(by_fn.items(), key=lambda x: -x[1])[:12]:
    print("  %7.1f  %s" % (n / calls, name[:110]))
'
done
