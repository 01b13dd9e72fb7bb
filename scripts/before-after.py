#!/usr/bin/env python3
"""Compares two output folders of scripts/mpi-compare.sh (one run before a change, one after, same
session): for every run, backend and size, the median time over the rounds before and after, and
after/before. Open MPI did not change between the two, so its after/before says how much the
machine alone moved; psyne's after/before is judged against that spread, and against psyne's own
spread across rounds.

    scripts/before-after.py BEFORE_DIR AFTER_DIR > report.md

Prints a Markdown table per run and a summary; exits 0 (it reports, it does not judge).
"""
import json
import statistics
import sys
from pathlib import Path


def medians(folder: Path) -> dict:
    """(run, backend, bytes) -> (median time, min, max) over the rounds, from every JSON report."""
    out = {}
    for report in sorted(folder.glob("*.json")):
        rows = {}
        for r in json.loads(report.read_text())["records"]:
            t = r["time_us_max"] if r.get("time_over_ranks", "max") == "max" else r["time_us_avg"]
            rows.setdefault((r["backend"], r["bytes"]), []).append(t)
        for (backend, size), times in rows.items():
            out[(report.stem, backend, size)] = (statistics.median(times), min(times), max(times))
    return out


def human(n: int) -> str:
    for unit, shift in (("M", 20), ("K", 10)):
        if n >= 1 << shift and n % (1 << shift) == 0:
            return f"{n >> shift}{unit}"
    return str(n)


def main() -> int:
    before, after = medians(Path(sys.argv[1])), medians(Path(sys.argv[2]))
    keys = sorted(set(before) & set(after), key=lambda k: (k[0], k[2], k[1]))
    runs = sorted({k[0] for k in keys})
    print("| run | size | psyne before µs | psyne after µs | psyne after/before | Open MPI after/before |")
    print("|---|---:|---:|---:|---:|---:|")
    ratios = {"native": [], "mpi": []}
    flagged = []
    for run in runs:
        for size in sorted({k[2] for k in keys if k[0] == run}):
            nb, na = before.get((run, "native", size)), after.get((run, "native", size))
            mb, ma = before.get((run, "mpi", size)), after.get((run, "mpi", size))
            if not (nb and na and mb and ma):
                continue
            rn, rm = na[0] / nb[0], ma[0] / mb[0]
            ratios["native"].append(rn)
            ratios["mpi"].append(rm)
            # Slower beyond noise: after's best round is slower than before's worst round, and
            # by more than Open MPI moved at that size.
            if na[1] > nb[2] and rn > max(rm, 1.0) * 1.10:
                flagged.append(f"{run} {human(size)}: {nb[0]:.2f} -> {na[0]:.2f} µs")
            print(f"| {run} | {human(size)} | {nb[0]:.2f} | {na[0]:.2f} | {rn:.2f} | {rm:.2f} |")
    print()
    for name, label in (("native", "psyne"), ("mpi", "Open MPI")):
        r = sorted(ratios[name])
        if r:
            print(f"- {label}: median after/before {statistics.median(r):.3f} over {len(r)} cells "
                  f"(10th–90th percentile {r[len(r) // 10]:.2f}–{r[(9 * len(r)) // 10]:.2f})")
    print(f"- psyne cells slower beyond noise (after's best round slower than before's worst, "
          f"and >10% beyond Open MPI's move): {len(flagged)}")
    for f in flagged:
        print(f"  - {f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
