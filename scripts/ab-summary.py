#!/usr/bin/env python3
"""Per-size medians of the A and B rounds scripts/ab-psybench.sh wrote: OUT/NAME-{A,B}-r*.json,
one row per collective and size (`psybench all` sweeps several collectives in one report).

    scripts/ab-summary.py OUT NAME
"""
import json
import statistics
import sys
from pathlib import Path


def times(folder: Path, name: str, side: str) -> dict:
    """(collective, bytes) -> every round's time (the time the report says it measured: max or mean
    over ranks)."""
    out = {}
    for report in sorted(folder.glob(f"{name}-{side}-r*.json")):
        for r in json.loads(report.read_text())["records"]:
            t = r["time_us_max"] if r.get("time_over_ranks", "max") == "max" else r["time_us_avg"]
            out.setdefault((r["collective"], r["bytes"]), []).append(t)
    return out


def main() -> int:
    folder, name = Path(sys.argv[1]), sys.argv[2]
    a, b = times(folder, name, "A"), times(folder, name, "B")
    print(f"{name}: medians over {len(next(iter(a.values()), []))} rounds (µs; min–max in brackets)")
    print("| collective | bytes | A | B | B/A |")
    print("|---|---:|---:|---:|---:|")
    for key in sorted(set(a) & set(b)):
        ma, mb = statistics.median(a[key]), statistics.median(b[key])
        print(f"| {key[0]} | {key[1]} | {ma:.2f} ({min(a[key]):.2f}–{max(a[key]):.2f}) "
              f"| {mb:.2f} ({min(b[key]):.2f}–{max(b[key]):.2f}) | {mb / ma:.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
