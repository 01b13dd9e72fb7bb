#!/usr/bin/env python3
"""Median time per size and algorithm of run.sh's psybench JSONs, as a Markdown table.

Records come in the order of --algo per size and round; the first slot is `auto` (the built-in
choice), shown with the algorithm it ran. Usage: summarize.py FILE.json..."""
import json
import statistics
import sys


def table(path):
    data = json.load(open(path))
    algos = data["meta"]["algos"]
    by_size = {}
    for rec in data["records"]:
        by_size.setdefault(rec["bytes"], []).append(rec)
    meta = data["meta"]
    print(f"\n{path}: {meta['world_size']} ranks, {meta['transport']}, median µs of "
          f"{len(by_size[min(by_size)]) // len(algos)} rounds (÷ Rabenseifner's)\n")
    print("| bytes | " + " | ".join(algos) + " |")
    print("|---:|" + "---:|" * len(algos))
    for size, recs in sorted(by_size.items()):
        slots = [recs[i::len(algos)] for i in range(len(algos))]
        med = [statistics.median(r["time_us_avg"] for r in s) for s in slots]
        rab = med[algos.index("rabenseifner")]
        cells = [f"{m:.1f} ({m / rab:.2f})" for m in med]
        cells[0] += f" {slots[0][0]['algo']}"
        print(f"| {size} | " + " | ".join(cells) + " |")


for p in sys.argv[1:]:
    table(p)
