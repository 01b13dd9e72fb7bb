#!/usr/bin/env python3
"""Medians of scripts/bench/ab-psybench.sh's rounds by the machine's state: `slow` where the
cross-core round trip read over 150 ns both before and after the job, `normal` where it read
150 ns or less both times (jobs that changed state are left out); A against B.

    python3 results/board-one-way/by_state.py OUT NAME
"""
import json, statistics, sys, glob
out, name = sys.argv[1], sys.argv[2]
state = {}
for line in open(f"{out}/{name}-bounce.txt"):
    side, job, *ns = line.split()
    ns = [float(x) for x in ns]
    state[(side, int(job))] = "slow" if all(x > 150 for x in ns) else ("normal" if all(x <= 150 for x in ns) else "mixed")
t = {}
for f in glob.glob(f"{out}/{name}-*-r*.json"):
    side, r = f.rsplit("/", 1)[1][len(name) + 1:-5].split("-r")
    for rec in json.load(open(f))["records"]:
        t.setdefault((state[(side, int(r))], rec["collective"], rec["bytes"], side), []).append(rec["time_us_avg"])
for st in ("slow", "normal"):
    keys = sorted({k[1:3] for k in t if k[0] == st})
    for c, b in keys:
        a, bb = t.get((st, c, b, "A"), []), t.get((st, c, b, "B"), [])
        if a and bb:
            print(f"{st:6} {c:10} {b:8} A {statistics.median(a):7.2f} ({len(a)}) B {statistics.median(bb):7.2f} ({len(bb)}) B/A {statistics.median(bb)/statistics.median(a):.2f}")
