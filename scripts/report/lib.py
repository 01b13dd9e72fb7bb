#!/usr/bin/env python3
"""What every report writer of scripts/ shares: the build a report measured (refusing a tree with
uncommitted changes unless allowed), the machine and its load, psybench's times, medians and
their ranges, sizes as reports print them. Imported by the writers in this folder; the benchmark
runners in scripts/bench/ call its command line:

    scripts/report/lib.py revision [--allow-dirty]      the build, or exit 2 if the tree is dirty
    scripts/report/lib.py machine-table BEFORE AFTER    the Markdown table that heads a report
    scripts/report/lib.py load                          the load average now (1, 5, 15 minutes)

Standard library only.
"""
import argparse
import datetime
import os
import platform
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
ALLOW_DIRTY = "--allow-dirty"


class DirtyTree(Exception):
    """The tree has uncommitted changes and the report was not allowed to say so."""


def describe(cwd: Path = ROOT) -> str:
    """`git describe --always --dirty` of the tree, or "unknown" outside a git checkout."""
    try:
        out = subprocess.run(["git", "describe", "--always", "--dirty"], cwd=cwd,
                             capture_output=True, text=True, check=True)
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return out.stdout.strip() or "unknown"


def checked_revision(rev: str, allow_dirty: bool) -> str:
    """A revision as a report may print it: a dirty one only when allowed, and then saying so."""
    if not rev.endswith("-dirty"):
        return rev
    if not allow_dirty:
        raise DirtyTree(
            f"the build is {rev}: commit first, so the report names the code it measured "
            f"(or pass {ALLOW_DIRTY}, which the report then states)")
    return f"{rev} (published with {ALLOW_DIRTY})"


def revision(allow_dirty: bool = False) -> str:
    """The tree's revision for a report; raises DirtyTree for uncommitted changes unless allowed."""
    return checked_revision(describe(), allow_dirty)


def utc_now() -> str:
    """The time a report is made, as reports print it: 2026-11-26T10:00:00Z."""
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def made_by(command: str, rev: str, when: str = "") -> str:
    """A report's first line: what made it, when, from which build."""
    return f"Made by `{command}` on {when or utc_now()}, source revision {rev}."


def load_average() -> str:
    """The 1, 5 and 15 minute load averages, as /proc/loadavg gives them."""
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def cpu_model() -> str:
    """The CPU's model name, from /proc/cpuinfo."""
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor() or "unknown"


def memory_gib() -> str:
    """Total memory, as reports print it: 23.5 GiB."""
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemTotal"):
            return f"{int(line.split()[1]) / 1048576:.1f} GiB"
    return "unknown"


def mpi_version() -> str:
    """The first line of `mpirun --version`, or empty when there is no mpirun."""
    try:
        out = subprocess.run(["mpirun", "--version"], capture_output=True, text=True)
    except OSError:
        return ""
    return (out.stdout.splitlines() or [""])[0]


def machine_table(before: str, after: str) -> list:
    """The Markdown table that heads a benchmark report: CPU and cores, memory, kernel, MPI, load."""
    return [
        "| machine | |",
        "|---|---|",
        f"| CPU | {cpu_model()}, {len(os.sched_getaffinity(0))} cores |",
        f"| memory | {memory_gib()} |",
        f"| kernel | {platform.release()} |",
        f"| MPI | {mpi_version() or 'none found'} |",
        f"| load average before / after | {before or '?'} / {after or '?'} |",
    ]


def time_of(record: dict) -> float:
    """The time a psybench record says it measured: the slowest rank's, or the mean over ranks
    (osu cadence)."""
    if record.get("time_over_ranks", "max") == "avg":
        return record["time_us_avg"]
    return record["time_us_max"]


def median_range(values: list) -> tuple:
    """(median, min, max) of a list of numbers."""
    return statistics.median(values), min(values), max(values)


def median_cell(values: list, fmt=lambda x: f"{x:.2f}", empty: str = "-") -> str:
    """`median (min–max)`, the cell reports print for a measurement repeated over rounds."""
    if not values:
        return empty
    mid, low, high = median_range(values)
    return f"{fmt(mid)} ({fmt(low)}–{fmt(high)})"


def size_text(b: int, spaced: bool = False) -> str:
    """A byte count as reports print it: 64K / 1M / 8 (or, spaced, 64 KiB / 1 MiB / 8 B) when it
    is a whole number of the unit."""
    for shift, short, long in ((30, "G", "GiB"), (20, "M", "MiB"), (10, "K", "KiB")):
        if b >= 1 << shift and b % (1 << shift) == 0:
            return f"{b >> shift} {long}" if spaced else f"{b >> shift}{short}"
    return f"{b} B" if spaced else str(b)


def main(argv: list) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="what", required=True)
    rev = sub.add_parser("revision", help="the build, refused if dirty unless --allow-dirty")
    rev.add_argument(ALLOW_DIRTY, action="store_true")
    table = sub.add_parser("machine-table", help="the machine table of a report")
    table.add_argument("before", nargs="?", default="")
    table.add_argument("after", nargs="?", default="")
    sub.add_parser("load", help="the load average now")
    opts = parser.parse_args(argv)
    if opts.what == "revision":
        try:
            print(revision(opts.allow_dirty))
        except DirtyTree as e:
            print(f"refusing to publish a report: {e}", file=sys.stderr)
            return 2
    elif opts.what == "machine-table":
        print("\n".join(machine_table(opts.before, opts.after)))
    else:
        print(load_average())
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
