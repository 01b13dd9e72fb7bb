#!/usr/bin/env python3
"""Per-size medians of the A and B rounds scripts/ab-psybench.sh wrote: OUT/NAME-{A,B}-r*.json.

    scripts/ab-summary.py OUT NAME
"""
import json
import statistics
import sys
from pathlib import Path


def times(folder: Path, name: str, side: str) -> dict:
    """bytes -> every round's time (the time the report says it measured: max or mean over ranks)."""
    out = {}
    for report in sorted(folder.glob(f"{name}-{side}-r*.json")):
        for r in json.loads(report.read_text())["records"]:
            t = r["time_us_max"] if r.get("time_over_ranks", "max") == "max" else r["time_us_avg"]
            out.setdefault(r["bytes"], []).append(t)
    return out


def main() -> int:
    folder, name = Path(sys.argv[1]), sys.argv[2]
    a, b = times(folder, name, "A"), times(folder, name, "B")
    print(f"{name}: medians over {len(next(iter(a.values()), []))} rounds (µs; min–max in brackets)")
    print("| bytes | A | B | B/A |")
    print("|---:|---:|---:|---:|")
    for size in sorted(set(a) & set(b)):
        ma, mb = statistics.median(a[size]), statistics.median(b[size])
        print(f"| {size} | {ma:.2f} ({min(a[size]):.2f}–{max(a[size]):.2f}) "
              f"| {mb:.2f} ({min(b[size]):.2f}–{max(b[size]):.2f}) | {mb / ma:.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
