#!/usr/bin/env python3
"""Medians of jobs.txt (flat-states.sh) per program, split by the state each job ran in, told by
that job's own 8-byte time: slow if over twice the program's median 8-byte time.

    python3 summary.py [jobs.txt]
"""
import statistics
import sys

path = sys.argv[1] if len(sys.argv) > 1 else "jobs.txt"
progs = {"psyne": [], "cflat": [], "impi": []}
for line in open(path):
    parts = line.split("|")
    for part in parts[1:]:
        name, *vals = part.split()
        progs[name].append([float(v) for v in vals])
print(f"{len(progs['psyne'])} rounds; µs a call, median (jobs)")
print(f"{'program':8} {'state':7} {'8 B':>14} {'16 KiB':>14} {'64 KiB':>14}  slow ÷ normal")
for name, rows in progs.items():
    cut = 2 * statistics.median(r[0] for r in rows)
    split = {"normal": [r for r in rows if r[0] <= cut], "slow": [r for r in rows if r[0] > cut]}
    med = {}
    for state, rs in split.items():
        med[state] = [statistics.median(r[i] for r in rs) if rs else float("nan") for i in range(3)]
        cells = " ".join(f"{m:>9.2f} ({len(rs):>2})" for m in med[state])
        ratio = " ".join(f"{s / n:.2f}" for s, n in zip(med["slow"], med["normal"])) if state == "slow" else ""
        print(f"{name:8} {state:7} {cells}  {ratio}")
