#!/usr/bin/env python3
"""Medians per host count and variant of scripts/bench/launch-tree.sh's runs.csv, as a Markdown table
(wall time, psyrun's CPU time, when every host was ready; min-max in brackets; failed runs
counted apart).

    launch-tree-summary.py RUNS_CSV
"""
import csv
import os
import sys
from collections import defaultdict

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import lib  # noqa: E402  (the shared report library, beside this file)


def cell(values, fmt):
    return lib.median_cell(values, fmt)


def main():
    rows = list(csv.DictReader(open(sys.argv[1])))
    groups = defaultdict(list)
    for r in rows:
        groups[(int(r["hosts"]), r["variant"], int(r["width"]))].append(r)
    print("| hosts | launch | wall, s | psyrun CPU, ms | hosts ready, ms | runs (failed) |")
    print("|---:|---|---|---|---|---|")
    for (hosts, variant, width), rs in sorted(groups.items(), key=lambda kv: (kv[0][0], kv[0][1] != "flat", kv[0][2])):
        ok = [r for r in rs if r["exit"] == "0"]
        name = "flat" if variant == "flat" else f"tree, width {width}"
        wall = [float(r["wall_s"]) for r in ok]
        cpu = [float(r["cpu_s"]) * 1e3 for r in ok]
        ready = [float(r["ready_ms"]) for r in ok if r["ready_ms"]]
        print(f"| {hosts} | {name} | {cell(wall, lambda v: f'{v:.2f}')} | "
              f"{cell(cpu, lambda v: f'{v:.0f}')} | {cell(ready, lambda v: f'{v:.0f}')} | "
              f"{len(rs)} ({len(rs) - len(ok)}) |")


if __name__ == "__main__":
    main()
