#!/usr/bin/env python3
"""Per job and size: the median µs of `auto` (with the algorithm it ran) and of recursive
doubling, and their ratio, from run.sh's job*.json and bounce.txt; then the medians over jobs.
Records come in --algo order per size and round. Usage: summarize.py DIR"""
import json
import pathlib
import re
import statistics
import sys

d = pathlib.Path(sys.argv[1])
bounce = {}
for line in (d / "bounce.txt").read_text().splitlines():
    m = re.match(r"job (\d+) core 0 <-> 1 round trip: ([\d.]+) ns", line)
    if m:
        bounce[int(m[1])] = float(m[2])
jobs = sorted(d.glob("job*.json"), key=lambda p: int(p.stem[3:]))
ratios = {}
print("| job | round trip ns | bytes | auto µs (algo) | recursive doubling µs | RD ÷ auto |")
print("|---:|---:|---:|---:|---:|---:|")
for p in jobs:
    data = json.load(open(p))
    algos = data["meta"]["algos"]
    by_size = {}
    for rec in data["records"]:
        by_size.setdefault(rec["bytes"], []).append(rec)
    for size, recs in sorted(by_size.items()):
        slots = [recs[i::len(algos)] for i in range(len(algos))]
        med = [statistics.median(r["time_us_avg"] for r in s) for s in slots]
        ratios.setdefault(size, []).append(med[1] / med[0])
        job = int(p.stem[3:])
        print(f"| {job} | {bounce.get(job, float('nan')):.0f} | {size} | {med[0]:.2f} "
              f"({slots[0][0]['algo']}) | {med[1]:.2f} | {med[1] / med[0]:.2f} |")
print("\n| bytes | RD ÷ auto: median over jobs (min–max) | jobs where RD was faster |")
print("|---:|---|---:|")
for size, r in sorted(ratios.items()):
    print(f"| {size} | {statistics.median(r):.2f} ({min(r):.2f}–{max(r):.2f}) | "
          f"{sum(x < 1 for x in r)} of {len(r)} |")
