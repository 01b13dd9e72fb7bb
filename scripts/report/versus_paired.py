#!/usr/bin/env python3
"""The report of scripts/bench/versus-paired.sh: psyne and each MPI measured in the same job, size
by size, as pairs (psybench `--backend native,mpi --rounds N`). Each pair's ratio is the MPI's time
÷ psyne's (above 1 psyne is faster); the report gives, per MPI, collective and size, the median of
those ratios and the middle half of them, how often the MPI won a pair, each side's median time,
and the MPI's C benchmark (bench/c/mpi_coll_bench.c, its own job under the same launcher) beside
psybench's measurement of the same MPI.

    scripts/report/versus_paired.py OUT_DIR --revision REV --load-before L --load-after L \
        --command CMD

Reads OUT_DIR/raw/runs.csv and the files it names; writes OUT_DIR/README.md. Standard library only.
"""
import argparse
import csv
import json
import statistics
import sys
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import lib  # noqa: E402

NAMES = {"openmpi": "Open MPI", "mpich5": "MPICH 5", "impi": "Intel MPI"}
COLLECTIVES = ["allreduce", "broadcast", "allgather", "reducescatter"]
OVER = {"shm": "shared memory", "tcp": "loopback TCP"}


def settings_text(settings: str) -> list:
    """The paragraph naming each program's settings for the transport, if it has any."""
    if not settings:
        return []
    return [f"Each program as its users ask for it (`scripts/bench/every-mpi.sh`): {settings}.", ""]


TITLES = {"allreduce": "all-reduce", "broadcast": "broadcast", "allgather": "all-gather",
          "reducescatter": "reduce-scatter"}


def quartiles(values: list) -> tuple:
    """(25th percentile, median, 75th percentile) of a non-empty list."""
    if len(values) < 2:
        return values[0], values[0], values[0]
    q = statistics.quantiles(values, n=4, method="inclusive")
    return q[0], statistics.median(values), q[2]


def pairs_of(records: list) -> dict:
    """{(collective, bytes): [(psyne µs, MPI µs), ...]} from one job's psybench records: the k-th
    native record of a size with the k-th MPI record of it (a round measures each backend once)."""
    by_size = defaultdict(lambda: {"native": [], "mpi": []})
    for r in records:
        by_size[(r["collective"], r["bytes"])][r["backend"]].append(lib.time_of(r))
    return {k: list(zip(v["native"], v["mpi"])) for k, v in by_size.items()}


def c_bench_times(path: Path) -> dict:
    """{bytes: µs} from the C benchmark's CSV (osu cadence: the mean over ranks)."""
    with path.open() as f:
        return {int(row["bytes"]): float(row["time_us_avg"]) for row in csv.DictReader(f)}


class Cell:
    """One MPI, collective and size: its pairs and the C benchmark's times."""

    def __init__(self):
        self.pairs = []
        self.c_bench = []

    def ratios(self) -> list:
        return [m / p for p, m in self.pairs]

    def mpi_wins(self) -> float:
        """The share of pairs the MPI was faster in."""
        return sum(1 for p, m in self.pairs if m < p) / len(self.pairs)


def collect(raw: Path) -> tuple:
    """The cells ({(mpi, collective, bytes): Cell}), the jobs that failed, and the job count."""
    cells = defaultdict(Cell)
    failed = []
    jobs = set()
    with (raw / "runs.csv").open() as f:
        for run in csv.DictReader(f):
            jobs.add(run["job"])
            path = raw / run["file"]
            if run["rc"] != "0":
                failed.append(f"job {run['job']} {run['collective']} {run['mpi']} {run['kind']}: "
                              f"exit {run['rc']}")
                continue
            if run["kind"] == "paired":
                records = json.loads(path.with_suffix(".json").read_text())["records"]
                for (coll, size), pairs in pairs_of(records).items():
                    cells[(run["mpi"], coll, size)].pairs += pairs
            else:
                for size, us in c_bench_times(path).items():
                    cells[(run["mpi"], run["collective"], size)].c_bench.append(us)
    return cells, failed, len(jobs)


def best_table(cells: dict, mpis: list, sizes: list) -> list:
    """Per collective and size: the lowest median pair ratio over the MPIs, naming that MPI and
    the share of its pairs it won; bold below 1."""
    lines = ["| | " + " | ".join(lib.size_text(s, spaced=True) for s in sizes) + " |",
             "|---|" + "---:|" * len(sizes)]
    for coll in COLLECTIVES:
        row = []
        for s in sizes:
            here = [(statistics.median(cells[(m, coll, s)].ratios()), m) for m in mpis
                    if cells.get((m, coll, s)) and cells[(m, coll, s)].pairs]
            if not here:
                row.append("-")
                continue
            ratio, m = min(here)
            won = cells[(m, coll, s)].mpi_wins()
            text = f"{ratio:.2f}"
            row.append(f"**{text}** ({NAMES[m]}, {won:.0%})" if ratio < 1
                       else f"{text} ({NAMES[m]}, {won:.0%})")
        if any(c != "-" for c in row):
            lines.append(f"| {TITLES[coll]} | " + " | ".join(row) + " |")
    return lines


def mpi_table(cells: dict, mpi: str, sizes: list) -> list:
    """Every cell of one MPI: pairs, each side's median µs, the ratios' median and middle half,
    the MPI's share of wins, and its C benchmark ÷ psybench's measurement of it."""
    lines = ["| collective | size | pairs | psyne µs | MPI µs | MPI ÷ psyne (middle half) | MPI won "
             "| C benchmark ÷ psybench (MPI): median / fastest |",
             "|---|---:|---:|---:|---:|---|---:|---:|"]
    for coll in COLLECTIVES:
        for s in sizes:
            cell = cells.get((mpi, coll, s))
            if not cell or not cell.pairs:
                continue
            low, mid, high = quartiles(cell.ratios())
            psyne = statistics.median(p for p, _ in cell.pairs)
            theirs = statistics.median(m for _, m in cell.pairs)
            fastest = min(m for _, m in cell.pairs)
            check = (f"{statistics.median(cell.c_bench) / theirs:.2f} / "
                     f"{min(cell.c_bench) / fastest:.2f}" if cell.c_bench else "-")
            lines.append(f"| {TITLES[coll]} | {lib.size_text(s, spaced=True)} | {len(cell.pairs)} "
                         f"| {psyne:.3g} | {theirs:.3g} | {mid:.2f} ({low:.2f}–{high:.2f}) "
                         f"| {cell.mpi_wins():.0%} | {check} |")
    return lines


def report(out: Path, args) -> str:
    cells, failed, jobs = collect(out / "raw")
    mpis = [m for m in NAMES if any(k[0] == m for k in cells)]
    sizes = sorted({k[2] for k in cells})
    text = [
        f"# psyne and each MPI in the same jobs, size by size: 2 ranks over {OVER[args.transport]}",
        "",
        lib.made_by(args.command, args.revision), "",
        *lib.machine_table(args.load_before, args.load_after), "",
        "psybench, built against each MPI and started by that MPI's own launcher (Open MPI 4.1's "
        "`mpirun`, MPICH 5.0.2's and Intel MPI's Hydra `mpiexec`; Intel MPI's `libmpi` loaded into "
        "the MPICH build, whose ABI it shares), runs `--backend native,mpi --rounds N --cadence "
        "osu`: each size is measured with psyne's engine and with the MPI's own collective in "
        "turn, on the same bound cores and buffers of the same size, the first backend first in "
        "odd rounds and last in even ones. Each such pair is one ratio, MPI ÷ psyne, measured "
        "within a few milliseconds, so both sides see the same state of the machine, which on "
        "this VM changes within seconds. f32 sum, all-reduce in place; every result checked "
        f"element by element. {jobs} jobs per MPI and collective, the MPIs' order rotating. "
        "MPI is initialized as by `MPI_Init` (one thread), and psybench places every buffer of "
        "128 KiB and more as a program's first `malloc` of it is placed, 16 bytes into pages of "
        "its own (`bench/src/buffer.rs`), for both backends alike, as the C benchmark's are.", "",
        *settings_text(args.settings),
        "## The best MPI's median pair ratio", "",
        "MPI ÷ psyne, the median over every pair of the MPI that does best; above 1 psyne is "
        "faster, **below 1** the named MPI is. In brackets: that MPI and the share of the pairs "
        "in which it was the faster.", "",
        *best_table(cells, mpis, sizes), "",
    ]
    for m in mpis:
        text += [f"## {NAMES[m]}", "", *mpi_table(cells, m, sizes), ""]
    text += [
        "The last column holds the MPI's plain C benchmark, each a job of its own right after the "
        "paired one, against psybench's measurement of the same MPI in the paired jobs: the "
        "medians' ratio, and the fastest C job's time over the fastest pair's MPI time. Near 1, "
        "the pairs measure the MPI as a C program calling it does. The C jobs are single "
        "measurements in whatever state the machine was in, which is what the pairs avoid, so "
        "their median can be a slow state's; a job is slowed by the machine, never sped up, so "
        "the fastest against the fastest is the steadier check.", "",
    ]
    if failed:
        text += ["## Jobs that failed", "", *[f"- {f}" for f in failed], ""]
    return "\n".join(text)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("out", type=Path)
    p.add_argument("--revision", required=True)
    p.add_argument("--transport", choices=sorted(OVER), default="shm")
    p.add_argument("--settings", default="",
                   help="each program's settings for the transport, as the runner set them")
    p.add_argument("--load-before", default="")
    p.add_argument("--load-after", default="")
    p.add_argument("--command", required=True)
    args = p.parse_args()
    (args.out / "README.md").write_text(report(args.out, args))
    print(f"wrote {args.out / 'README.md'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
