#!/usr/bin/env python3
"""Medians over rounds of psybench reports made with `--reduce-order fast,canonical`: per world
size and message size, the slowest rank's time per call in fast and in canonical order, their
ratio, and what canonical order ran (`canonical`: the exchange and rank-order fold;
`canonical:ALGO`: that algorithm, which folds in rank order anyway). A markdown table on stdout;
ratios above the goal (1.25 from 1 MiB, 1.5 below) are marked."""

import json
import statistics
import sys
from collections import defaultdict


def size(b):
    for unit, shift in (("MiB", 20), ("KiB", 10)):
        if b >= 1 << shift and b % (1 << shift) == 0:
            return f"{b >> shift} {unit}"
    return f"{b} B"


def main(paths):
    times = defaultdict(list)  # (ranks, bytes, order) -> [time_us_max per round]
    labels = defaultdict(set)
    for path in paths:
        with open(path) as f:
            report = json.load(f)
        for r in report["records"]:
            order = "canonical" if r["algo"].startswith("canonical") else "fast"
            key = (r["ranks"], r["bytes"])
            times[key + (order,)].append(r["time_us_max"])
            labels[key + (order,)].add(r["algo"])
    print("| ranks | size | fast µs (algo) | canonical µs (path) | canonical ÷ fast | goal |")
    print("|---:|---:|---:|---:|---:|:--|")
    for ranks, nbytes in sorted({k[:2] for k in times}):
        f = times.get((ranks, nbytes, "fast"))
        c = times.get((ranks, nbytes, "canonical"))
        if not f or not c:
            continue
        mf, mc = statistics.median(f), statistics.median(c)
        ratio = mc / mf
        goal = 1.25 if nbytes >= 1 << 20 else 1.5
        mark = "ok" if ratio <= goal else f"**over {goal}**"
        fa = ",".join(sorted(labels[(ranks, nbytes, "fast")]))
        ca = ",".join(sorted(labels[(ranks, nbytes, "canonical")]))
        print(f"| {ranks} | {size(nbytes)} | {mf:.2f} ({fa}) | {mc:.2f} ({ca}) | {ratio:.2f} | {mark} |")
    print()
    print(f"rounds per size: {', '.join(sorted({str(len(v)) for v in times.values()}))}")


if __name__ == "__main__":
    main(sys.argv[1:])
