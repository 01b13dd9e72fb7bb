#!/usr/bin/env python3
"""Medians of run.sh's jobs per build, size and collective, leaving out every job whose cross-core
round trip before it read over 150 ns (the VM's slow state); the ratios are to the first build.

    python3 results/tcp-header-read/summarize.py OUT A B...
"""
import collections
import glob
import json
import statistics
import sys

out, builds = sys.argv[1], sys.argv[2:]
slow = set()
for line in open(out + "/bounce.txt"):
    name, job, ns = line.split()
    if float(ns) > 150:
        slow.add((name, job))
print("jobs in the slow state (core-bounce > 150 ns), left out:", sorted(slow))
times = collections.defaultdict(list)
for path in glob.glob(out + "/*.json"):
    name, job = path.rsplit("/", 1)[1][:-5].rsplit("-", 1)
    if (name, job) in slow:
        continue
    for r in json.load(open(path))["records"]:
        times[(r["collective"], r["bytes"], name)].append(r["time_us_avg"])
ratios = " | ".join(b + "/" + builds[0] for b in builds[1:])
print("| collective | bytes | " + " | ".join(builds) + " | " + ratios + " |")
print("|---|---:|" + "---:|" * (2 * len(builds) - 1))
for key in sorted({(c, n) for c, n, _ in times}):
    m = [statistics.median(times[key + (b,)]) for b in builds]
    cells = ["%.2f" % x for x in m] + ["%.2f" % (x / m[0]) for x in m[1:]]
    print("| %s | %d | " % key + " | ".join(cells) + " |")
