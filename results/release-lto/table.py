"""Medians of ab.sh's jobs per collective, size and build; a job is slow-state when its own 8-byte
time is over 1.6x the median 8-byte time of its collective (both builds). usage: table.py OUT SIZES"""
import statistics
import sys

rows = [line.split() for line in open(sys.argv[1]) if len(line.split()) > 3]
sizes = sys.argv[2].split(",")
for coll in sorted({r[2] for r in rows}):
    mine = [r for r in rows if r[2] == coll and len(r) == 3 + len(sizes)]
    small = statistics.median(float(r[3]) for r in mine)
    print(f"{coll} ({len(mine)} jobs; slow-state: own 8 B time over 1.6x the median {small:.2f} us)")
    print("  size   state    new us (jobs)   old us (jobs)   new/old")
    for i, size in enumerate(sizes):
        for state, keep in (("normal", lambda a: a <= 1.6 * small), ("slow", lambda a: a > 1.6 * small),
                            ("all", lambda a: True)):
            got = {}
            for v in ("new", "old"):
                xs = [float(r[3 + i]) for r in mine if r[1] == v and keep(float(r[3]))]
                got[v] = (statistics.median(xs), len(xs)) if xs else None
            if got["new"] and got["old"]:
                ratio = got["new"][0] / got["old"][0]
                print(f"  {size:>5}  {state:6}  {got['new'][0]:8.2f} ({got['new'][1]:2})  "
                      f"{got['old'][0]:8.2f} ({got['old'][1]:2})   {ratio:.2f}")
