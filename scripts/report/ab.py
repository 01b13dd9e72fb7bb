#!/usr/bin/env python3
"""One build of psyne against another: per-size medians before and after, from either of the
two ways scripts/ measures them.

    scripts/report/ab.py rounds OUT NAME          the A and B rounds scripts/bench/ab-psybench.sh
                                                  wrote (OUT/NAME-{A,B}-r*.json), alternated in
                                                  one loop: the sharp test
    scripts/report/ab.py states OUT NAME          the same rounds, one table for the jobs in the
                                                  VM's slow state and one for those in its normal
                                                  state (jobs that changed state left out)
    scripts/report/ab.py sweeps BEFORE AFTER      two output folders of scripts/bench/versus-mpi.sh
                                                  --focus (or the old mpi-compare.sh), one run
                                                  before a change and one after, same session

`rounds` prints one row per collective and size: A's and B's medians (min–max) and B/A, over the
rounds whose job did not meet the VM's slow state (OUT/NAME-bounce.txt, when there); `states` the
same twice, over the rounds wholly in each state. `sweeps`
prints, for every run, backend and size, psyne's median before and after and Open MPI's
after/before: Open MPI did not change between the two, so its ratio says how much the machine
alone moved, and psyne's is judged against that spread and its own; cells slower beyond noise are
listed. Both print Markdown and exit 0 (they report, they do not judge).
"""
import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import lib  # noqa: E402  (the shared report library, beside this file)


# A job whose cross-core round trip read over this many ns (before or after it) met the VM's slow state.
SLOW_STATE_NS = 150


def job_states(folder: Path, name: str) -> dict:
    """(side, round) -> `slow` (the round trip over SLOW_STATE_NS before and after the job),
    `normal` (neither) or `mixed`, from OUT/NAME-bounce.txt (lines `SIDE ROUND BEFORE [AFTER]`;
    absent for runs made before ab-psybench.sh measured it: no job known)."""
    path = folder / f"{name}-bounce.txt"
    if not path.exists():
        return {}
    states = {}
    for line in path.read_text().splitlines():
        side, job, *ns = line.split()
        slow = [float(x) > SLOW_STATE_NS for x in ns]
        states[(side, int(job))] = "slow" if all(slow) else "mixed" if any(slow) else "normal"
    return states


def slow_jobs(folder: Path, name: str) -> set:
    """The (side, round) of every job that met the VM's slow state, before or after it."""
    return {job for job, state in job_states(folder, name).items() if state != "normal"}


def round_times(folder: Path, name: str, side: str, leave_out: set = frozenset()) -> dict:
    """(collective, bytes) -> every round's time (the time the report says it measured: max or
    mean over ranks), leaving out the rounds in `leave_out` ((side, round) pairs)."""
    out = {}
    for report in sorted(folder.glob(f"{name}-{side}-r*.json")):
        if (side, int(report.stem.rsplit("-r", 1)[1])) in leave_out:
            continue
        for r in json.loads(report.read_text())["records"]:
            out.setdefault((r["collective"], r["bytes"]), []).append(lib.time_of(r))
    return out


def print_table(a: dict, b: dict) -> None:
    """One row per collective and size of A's and B's round times: medians (min–max), B/A."""
    print("| collective | bytes | A | B | B/A |")
    print("|---|---:|---:|---:|---:|")
    for key in sorted(set(a) & set(b)):
        ma, mb = statistics.median(a[key]), statistics.median(b[key])
        print(f"| {key[0]} | {key[1]} | {lib.median_cell(a[key])} | {lib.median_cell(b[key])} "
              f"| {mb / ma:.2f} |")


def rounds_line(a: dict, b: dict) -> str:
    return (f"medians over {len(next(iter(a.values()), []))} A rounds and "
            f"{len(next(iter(b.values()), []))} B rounds (µs; min–max in brackets)")


def rounds(folder: Path, name: str) -> None:
    """The table of A against B over alternated rounds."""
    slow = slow_jobs(folder, name)
    a, b = round_times(folder, name, "A", slow), round_times(folder, name, "B", slow)
    if slow:
        left_out = ", ".join(f"{side}{job}" for side, job in sorted(slow))
        print(f"left out, core-bounce over {SLOW_STATE_NS} ns before or after them: {left_out}")
    print(f"{name}: {rounds_line(a, b)}")
    print_table(a, b)


def states(folder: Path, name: str) -> None:
    """The tables of A against B over the rounds in the slow state and in the normal one."""
    by_job = job_states(folder, name)
    for state in ("slow", "normal"):
        other = {job for job, s in by_job.items() if s != state}
        a, b = round_times(folder, name, "A", other), round_times(folder, name, "B", other)
        print(f"{name}, {state} state: {rounds_line(a, b)}")
        print_table(a, b)
        print()


def sweep_medians(folder: Path) -> dict:
    """(run, backend, bytes) -> (median time, min, max) over the rounds, from every JSON report."""
    out = {}
    for report in sorted(folder.glob("*.json")):
        rows = {}
        for r in json.loads(report.read_text())["records"]:
            rows.setdefault((r["backend"], r["bytes"]), []).append(lib.time_of(r))
        for (backend, size), times in rows.items():
            out[(report.stem, backend, size)] = lib.median_range(times)
    return out


def sweep_rows(before: dict, after: dict) -> tuple:
    """The table's rows, every cell's after/before per backend, and the cells slower beyond noise."""
    keys = sorted(set(before) & set(after), key=lambda k: (k[0], k[2], k[1]))
    rows, ratios, flagged = [], {"native": [], "mpi": []}, []
    for run in sorted({k[0] for k in keys}):
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
                flagged.append(f"{run} {lib.size_text(size)}: {nb[0]:.2f} -> {na[0]:.2f} µs")
            rows.append(f"| {run} | {lib.size_text(size)} | {nb[0]:.2f} | {na[0]:.2f} | {rn:.2f} "
                        f"| {rm:.2f} |")
    return rows, ratios, flagged


def sweeps(before_dir: Path, after_dir: Path) -> None:
    """The table of two whole sweeps, before and after, with Open MPI as the noise reference."""
    rows, ratios, flagged = sweep_rows(sweep_medians(before_dir), sweep_medians(after_dir))
    print("| run | size | psyne before µs | psyne after µs | psyne after/before | Open MPI after/before |")
    print("|---|---:|---:|---:|---:|---:|")
    print("\n".join(rows))
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


def main(argv: list) -> int:
    if len(argv) != 3 or argv[0] not in ("rounds", "states", "sweeps"):
        print(__doc__.strip(), file=sys.stderr)
        return 2
    if argv[0] == "rounds":
        rounds(Path(argv[1]), argv[2])
    elif argv[0] == "states":
        states(Path(argv[1]), argv[2])
    else:
        sweeps(Path(argv[1]), Path(argv[2]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
