"""Reads the jobs of scripts/bench/crossing.sh.

    crossing.py line FILE HEAD    one CSV line per size of job output FILE, prefixed by HEAD
                                  (round,collective,program,revision,load1,bounce_ns)
    crossing.py summary CSV       medians per collective, size, program and machine state

A job ran in the machine's slow state when its cross-core round trip was over twice the median
of all the run's jobs (results/job-swings/).
"""
import csv
import statistics
import sys
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from versus_every_mpi import read_c_bench, read_psybench  # noqa: E402

PSYNE = ("auto", "cached", "streamed")
PROGRAMS = ("auto", "cached", "streamed", "impi", "openmpi")
SLOW = 2.0


def line(path: Path, head: str) -> None:
    program = head.split(",")[2]
    times = read_psybench(path) if program in PSYNE else read_c_bench(path)
    for size, us in sorted(times.items()):
        print(f"{head},{size},{us:.3f}")


def cell(times: list) -> str:
    if not times:
        return "-"
    return f"{statistics.median(times):.1f} ({len(times)})"


def summary(path: Path) -> None:
    rows = list(csv.DictReader(open(path)))
    bounces = [float(r["bounce_ns"]) for r in rows]
    cut = SLOW * statistics.median(bounces)
    times = defaultdict(list)
    for r in rows:
        state = "slow" if float(r["bounce_ns"]) > cut else "normal"
        times[(r["collective"], int(r["bytes"]), r["program"], state)].append(float(r["time_us"]))
    print(f"slow state: round trip over {cut:.0f} ns (twice the median of {len(rows)} lines)")
    print("µs, median (jobs), by the machine's state before the job")
    print()
    print("| collective | bytes | state | " + " | ".join(PROGRAMS) + " |")
    print("|---|---:|---|" + "---:|" * len(PROGRAMS))
    for coll, size in sorted({(k[0], k[1]) for k in times}):
        for state in ("normal", "slow"):
            cells = [cell(times[(coll, size, p, state)]) for p in PROGRAMS]
            print(f"| {coll} | {size} | {state} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "line":
        line(Path(sys.argv[2]), sys.argv[3])
    elif len(sys.argv) == 3 and sys.argv[1] == "summary":
        summary(Path(sys.argv[2]))
    else:
        sys.exit(__doc__)
