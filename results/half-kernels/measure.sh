#!/usr/bin/env bash
# Alternates `psybench peak` (256 MiB) of two builds, ROUNDS times, recording the load before
# each run; then prints the medians per build and type, and each type's rate over f32's.
#   results/half-kernels/measure.sh BEFORE_PSYBENCH AFTER_PSYBENCH [ROUNDS] [MAXLOAD]
# Raw output goes to raw.txt beside this script, the table to medians.md.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
before=$1 after=$2 rounds=${3:-5} maxload=${4:-1.5}
raw=$here/raw.txt
: >"$raw"
load1() { cut -d' ' -f1 /proc/loadavg; }
for r in $(seq 1 "$rounds"); do
  for which in before after; do
    bin=$before; [ "$which" = after ] && bin=$after
    # Wait (up to 2 minutes) for the 1-minute load to drop below MAXLOAD; run anyway after that
    # and say so in the record.
    for _ in $(seq 1 12); do
      awk -v l="$(load1)" -v m="$maxload" 'BEGIN { exit !(l < m) }' && break
      sleep 10
    done
    line=$("$bin" peak | grep 'sum kernels')
    echo "round $r $which load $(load1) | $line" | tee -a "$raw"
  done
done
python3 - "$raw" <<'PY' | tee "$here/medians.md"
import re, statistics, sys
rows = {}
loads = []
for line in open(sys.argv[1]):
    m = re.match(r"round (\d+) (\w+) load ([\d.]+) \| sum kernels:\s+(.*) GB/s", line)
    if not m:
        continue
    loads.append(float(m.group(3)))
    for part in m.group(4).split(","):
        t, v = part.split()
        rows.setdefault(m.group(2), {}).setdefault(t, []).append(float(v))
types = list(rows["after"])
med = {w: {t: statistics.median(v) for t, v in rows[w].items()} for w in rows}
print(f"{len(rows['after']['f32'])} rounds each, 1-minute load at the runs: "
      f"{min(loads):.2f}-{max(loads):.2f} (median {statistics.median(loads):.2f})\n")
print("| type | before GB/s | after GB/s | after/before | before / f32 | after / f32 |")
print("|---|---|---|---|---|---|")
for t in types:
    b, a = med["before"][t], med["after"][t]
    print(f"| {t} | {b:.1f} | {a:.1f} | {a / b:.2f}x | {b / med['before']['f32']:.0%} "
          f"| {a / med['after']['f32']:.0%} |")
print("\nper run (GB/s): " + "; ".join(
    f"{w} {t} " + "/".join(f"{x:.1f}" for x in rows[w][t]) for w in rows for t in ("f32", "f16", "bf16")))
PY
