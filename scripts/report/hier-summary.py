#!/usr/bin/env python3
"""Summarises scripts/bench/hier-cluster.sh's CSVs: per size, what the automatic choice ran, the best
flat algorithm and hier, and hier's time over the best flat one (max-over-ranks averages).

    scripts/report/hier-summary.py DIR
"""
import csv
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import lib  # noqa: E402  (the shared report library, beside this file)

FLAT = {
    "allreduce": ["ring", "rabenseifner", "recursive_doubling"],
    "broadcast": ["binomial", "pipeline"],
    "allgather": ["ring"],
}


def human(b):
    return lib.size_text(b, spaced=True)


def main(out):
    print("## Summary: flat vs hier per size\n")
    print("Times are each size's average per call, the slowest rank's; `auto` is the first row of")
    print("each size, so it shows what the automatic choice ran. Every row was checked: `wrong` is 0")
    print("throughout unless marked.\n")
    for name in sorted(os.listdir(out)):
        if not name.endswith(".csv"):
            continue
        rows = list(csv.DictReader(open(os.path.join(out, name))))
        if not rows:
            continue
        coll = rows[0]["collective"]
        flats = FLAT.get(coll, [])
        sizes, by = [], {}
        for r in rows:
            b = int(r["bytes"])
            if b not in by:
                by[b] = []
                sizes.append(b)
            by[b].append(r)
        print(f"### {name[:-4]}\n")
        print("| size | auto ran | auto µs | best flat | flat µs | hier µs | hier ÷ best flat |")
        print("|---:|---|---:|---|---:|---:|---:|")
        for b in sizes:
            rs = by[b]
            flat = [r for r in rs[1:] if r["algo"] in flats]
            hier = [r for r in rs[1:] if r["algo"] == "hier"]
            if not flat or not hier:
                continue
            best = min(flat, key=lambda r: float(r["time_us_avg"]))
            h, auto = hier[0], rs[0]
            wrong = sum(int(r["wrong"]) for r in rs)
            ratio = float(h["time_us_avg"]) / float(best["time_us_avg"])
            print(
                f"| {human(b)} | {auto['algo']} | {float(auto['time_us_avg']):.1f} | {best['algo']} "
                f"| {float(best['time_us_avg']):.1f} | {float(h['time_us_avg']):.1f} | {ratio:.2f} |"
                + ("" if wrong == 0 else f" **{wrong} wrong**")
            )
        print()


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "results/hier-cluster")
