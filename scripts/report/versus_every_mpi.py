#!/usr/bin/env python3
"""The report of scripts/bench/versus-every-mpi.sh: psyne against Open MPI, MPICH 5 and Intel MPI,
2 ranks over shared memory (or loopback TCP), OSU cadence, medians over alternated rounds.

    scripts/report/versus_every_mpi.py OUT_DIR --revision REV [--rounds N] [--command CMD]
        [--load-before L] [--load-after L] [--transport shm|tcp]

Reads OUT_DIR/raw/runs.csv and the files it names; writes OUT_DIR/README.md and
OUT_DIR/summary.csv (one line per collective, size and program: median, min and max over rounds).
Standard library only.
"""
import argparse
import csv
import json
import re
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import lib  # noqa: E402  (the shared report library, beside this file)

MPIS = {"openmpi": "Open MPI", "mpich5": "MPICH 5", "impi": "Intel MPI"}
PROGRAMS = ["psyne", *MPIS]
COLLECTIVES = ["allreduce", "broadcast", "allgather", "reducescatter"]
NAMES = {"allreduce": "all-reduce", "broadcast": "broadcast", "allgather": "all-gather",
         "reducescatter": "reduce-scatter"}
F32 = 4
# What the ranks talk over, for the title, and how each program was told to (scripts/bench/versus-every-mpi.sh).
OVER = {"shm": "shared memory", "tcp": "loopback TCP"}
TRANSPORT_NOTE = {
    "shm": [],
    "tcp": [
        "Over TCP on `lo`, each program as its users ask for it: psybench `--transport tcp`; Open",
        "MPI `--mca pml ob1 --mca btl tcp,self --mca btl_tcp_if_include lo`; MPICH 5",
        "`MPIR_CVAR_NOLOCAL=1 MPIR_CVAR_CH4_NETMOD=ofi FI_PROVIDER=tcp FI_TCP_IFACE=lo` (its UCX",
        "netmod uses shared memory between ranks of one host even with `NOLOCAL`); Intel MPI",
        "`I_MPI_FABRICS=ofi I_MPI_COLL_INTRANODE=pt2pt FI_PROVIDER=tcp FI_TCP_IFACE=lo` (without",
        "`COLL_INTRANODE=pt2pt` its collectives run in shared memory whatever the fabric: 0.3 µs at",
        "8 B). No copy floors (they are shared-memory floors).",
        "",
    ],
}
# Collectives whose IMB message length is a per-rank part of the sweep's size.
PER_RANK = ("allgather", "reducescatter")


def parse_size(text: str) -> int:
    """`64K` / `1M` / `8` (1024-based) as bytes."""
    m = re.fullmatch(r"(\d+)([KMG]?)", text.strip())
    if not m:
        raise ValueError(f"not a size: {text!r}")
    return int(m.group(1)) << {"": 0, "K": 10, "M": 20, "G": 30}[m.group(2)]


def rounded(size: int, coll: str, ranks: int) -> int:
    """The bytes psybench and the C benchmark measure for a size: whole f32 elements, and for
    all-gather and reduce-scatter a count that the ranks divide."""
    count = -(-size // F32)
    if coll in ("allgather", "reducescatter"):
        count = -(-count // ranks) * ranks
    return count * F32


def imb_lengths(sizes: str, coll: str, ranks: int) -> list:
    """IMB-MPI1's message lengths for the sweep's sizes: the buffer for all-reduce and broadcast;
    for all-gather each rank's contribution and for reduce-scatter each rank's block of the
    result (IMB's send buffer is then the ranks times the length), so the size ÷ the ranks."""
    out = []
    for s in sizes.split(","):
        b = rounded(parse_size(s), coll, ranks)
        out.append(b // ranks if coll in PER_RANK else b)
    return out


def bytes_of_imb(length: int, coll: str, ranks: int) -> int:
    """The sweep's size back from IMB's message length (see imb_lengths)."""
    return length * ranks if coll in PER_RANK else length


def read_psybench(path: Path) -> dict:
    """{bytes: µs} from a psybench JSON report (mean over ranks in the OSU cadence); raises if a
    result was wrong."""
    report = json.loads(path.read_text())
    times = {}
    for r in report["records"]:
        if r.get("wrong"):
            raise ValueError(f"{path}: {r['wrong']} wrong elements at {r['bytes']} B")
        times[r["bytes"]] = lib.time_of(r)
    return times


def read_c_bench(path: Path) -> dict:
    """{bytes: µs} from mpi_coll_bench's CSV (time_us_avg: mean over ranks)."""
    times = {}
    with path.open() as f:
        for row in csv.DictReader(f):
            if int(row["wrong"]):
                raise ValueError(f"{path}: {row['wrong']} wrong elements at {row['bytes']} B")
            times[int(row["bytes"])] = float(row["time_us_avg"])
    return times


def read_imb(path: Path, coll: str, ranks: int) -> dict:
    """{bytes: µs} from IMB-MPI1's table (t_avg[usec]), sizes mapped back to the sweep's."""
    times = {}
    for line in path.read_text().splitlines():
        fields = line.split()
        if len(fields) >= 5 and fields[0].isdigit() and re.fullmatch(r"[\d.]+", fields[-1]):
            times[bytes_of_imb(int(fields[0]), coll, ranks)] = float(fields[-1])
    return times


# The copy floors (scripts/probes/copy-floors.sh) are measured from this size up, with 2 ranks.
FLOOR_FROM = 1 << 20
# The goal: psyne within this fraction above its copy floor.
FLOOR_GOAL = 1.15


def floor_sizes(sizes: str, ranks: int) -> list:
    """The sweep's sizes that have a copy floor, as the benchmarks round them (none unless 2
    ranks: the floor program is a 2-rank one)."""
    if ranks != 2:
        return []
    out = {rounded(parse_size(s), "allgather", ranks) for s in sizes.split(",")}
    return sorted(b for b in out if b >= FLOOR_FROM)


def read_floor(path: Path) -> dict:
    """{bytes: µs} from scripts/probes/copy-floors.sh (`floor COLL BYTES SLICE MEAN SLOWER`: the
    mean over the two ranks, as the others' times)."""
    times = {}
    for line in path.read_text().splitlines():
        f = line.split()
        if len(f) == 6 and f[0] == "floor":
            times[int(f[2])] = float(f[4])
    return times


def read_runs(raw: Path) -> list:
    """The lines of runs.csv: one per job."""
    with (raw / "runs.csv").open() as f:
        return list(csv.DictReader(f))


def collect(raw: Path, runs: list, state: str = "") -> tuple:
    """({(program, coll, bytes): [µs per round]}, [failed runs], ranks) of the jobs `runs` names;
    with `state` "normal", only those that did not run in the machine's slow state
    ([`slow_jobs`]), with "slow" only those that did."""
    slow = {id_of(r) for r, _ in slow_jobs(runs)[1]} if state else set()
    keep = {"": lambda j: True, "normal": lambda j: j not in slow, "slow": lambda j: j in slow}[state]
    ranks = 2
    m = re.search(r"-n (\d+)", runs[0]["command"]) if runs else None
    if m:
        ranks = int(m.group(1))
    data, failed = {}, []
    for run in runs:
        who, coll, path = run["program"], run["collective"], raw / run["file"]
        if not keep(id_of(run)):
            continue
        if run["rc"] != "0":
            failed.append(f"round {run['round']} {coll} {who}: exit {run['rc']}")
            continue
        if who == "psyne":
            times = read_psybench(path)
        elif who == "imb":
            times = read_imb(path, coll, ranks)
        elif who == "floor":
            times = read_floor(path)
        else:
            times = read_c_bench(path)
        for b, t in times.items():
            data.setdefault((who, coll, b), []).append(t)
    return data, failed, ranks


# A job ran in the machine's slow state when its cross-core round trip was over this many times
# the run's median (results/job-swings/: 334 ns against 52-60).
SLOW_STATE = 2.0


def id_of(run: dict) -> tuple:
    return run["round"], run["collective"], run["program"]


def probes(run: dict) -> list:
    """The cross-core round trips measured around a job, in ns: before it, and after it in runs
    made since 2026-11-28 04:00."""
    return [float(run[k]) for k in ("bounce_ns", "bounce_after_ns") if run.get(k)]


def slow_jobs(runs: list) -> tuple:
    """(the run's median round trip before a job in ns or None, [(run, ns)] of the jobs where a
    round trip measured around them, before or after, was over SLOW_STATE times that median; ns
    is the slower of the two)."""
    ns = [float(r["bounce_ns"]) for r in runs if r.get("bounce_ns")]
    if not ns:
        return None, []
    mid = statistics.median(ns)
    return mid, [(r, max(probes(r))) for r in runs if probes(r) and max(probes(r)) > SLOW_STATE * mid]


def state_lines(runs: list) -> list:
    """What the cross-core round trip before each job says of the machine during the run: its
    range, and the jobs that ran in the slow state. Empty for runs made before it was measured."""
    mid, slow = slow_jobs(runs)
    if mid is None:
        return []
    ns = [float(r["bounce_ns"]) for r in runs if r.get("bounce_ns")]
    after = any(r.get("bounce_after_ns") for r in runs)
    when = "Before and after every job" if after else "Before every job"
    lines = [f"{when} the cross-core round trip (`scripts/probes/core-bounce.c`) was "
             f"measured: median {mid:.0f} ns{' before' if after else ''}, "
             f"{min(ns):.0f}–{max(ns):.0f} ns over {len(ns)} jobs; "
             f"{len(slow)} ran in the machine's slow state (over {SLOW_STATE:g}× the median"
             + (" before or after the job" if after else "") + ", results/job-swings/)"
             + (":" if slow else ".")]
    lines += [f"- round {r['round']} {r['collective']} {r['program']}: "
              + " → ".join(f"{v:.0f}" for v in probes(r)) + " ns"
              + (f", {r['steal_ms']} ms stolen" if r.get("steal_ms") else "") for r, _ in slow]
    stolen = [int(r["steal_ms"]) for r in runs if r.get("steal_ms")]
    if stolen:
        lines += ["", f"Steal time (the hypervisor running something else on this VM's vCPUs, "
                  f"`/proc/stat`) during a job: median {statistics.median(stolen):g} ms, at most "
                  f"{max(stolen)} ms over {len(stolen)} jobs."]
    return lines


def spread(values: list) -> float:
    """(max − min) ÷ median, as a fraction."""
    mid = statistics.median(values)
    return (max(values) - min(values)) / mid if mid else 0.0


# Who may be the best MPI of a cell, as the ratio table names them: each MPI under the C
# benchmark, and Intel MPI under its own IMB-MPI1 too (where IMB measures it faster, that is the
# time Intel MPI's users see).
CANDIDATES = {**MPIS, "imb": "Intel MPI (IMB)"}


def apart(a: list, b: list) -> bool:
    """Whether two programs' rounds do not overlap: every round of one faster than every round
    of the other (a difference beyond the rounds' spread)."""
    return len(a) > 1 and len(b) > 1 and (max(a) < min(b) or max(b) < min(a))


def apart_counts(data: dict, sizes: list) -> tuple:
    """(cells where some MPI is faster than psyne beyond the spread, cells where psyne is faster
    than every MPI beyond it)."""
    mpi_ahead = psyne_ahead = 0
    for coll in COLLECTIVES:
        for b in sizes:
            psyne = data.get(("psyne", coll, b))
            mpis = [v for w in CANDIDATES if (v := data.get((w, coll, b)))]
            if not psyne or not mpis:
                continue
            ahead = [apart(psyne, v) and statistics.median(v) < statistics.median(psyne)
                     for v in mpis]
            behind = [apart(psyne, v) and statistics.median(v) > statistics.median(psyne)
                      for v in mpis]
            mpi_ahead += any(ahead)
            psyne_ahead += all(behind)
    return mpi_ahead, psyne_ahead


def apart_lines(data: dict, sizes: list) -> list:
    """The sentence that counts the cells decided beyond the spread."""
    mpi_ahead, psyne_ahead = apart_counts(data, sizes)
    return [f"Cells where an MPI is faster than psyne beyond the spread: {mpi_ahead}; where psyne "
            f"is faster than every MPI beyond it: {psyne_ahead} (of {len(sizes) * len(COLLECTIVES)})."]


def ratio_table(data: dict, sizes: list, stat=statistics.median) -> list:
    """Best MPI ÷ psyne per collective and size (`stat` of each program's rounds: their median,
    or their fastest), the best MPI named; bold below 1."""
    lines = ["| | " + " | ".join(lib.size_text(b, spaced=True) for b in sizes) + " |",
             "|---|" + "---:|" * len(sizes)]
    for coll in COLLECTIVES:
        cells = []
        for b in sizes:
            psyne = data.get(("psyne", coll, b))
            mpis = {who: stat(v) for who in CANDIDATES if (v := data.get((who, coll, b)))}
            if not psyne or not mpis:
                cells.append("-")
                continue
            best = min(mpis, key=mpis.get)
            r = mpis[best] / stat(psyne)
            name = CANDIDATES[best] + ("*" if apart(psyne, data[(best, coll, b)]) else "")
            cells.append(f"**{r:.2f}** ({name})" if round(r, 2) < 1 else f"{r:.2f} ({name})")
        if any(c != "-" for c in cells):
            lines.append(f"| {NAMES[coll]} | " + " | ".join(cells) + " |")
    return lines


def floor_table(data: dict, sizes: list, stat=statistics.median) -> list:
    """psyne's time ÷ its copy floor's per collective and size (`stat` over rounds, the median
    or the fastest; bold above FLOOR_GOAL), and the best MPI's ÷ the floor beside it. Empty
    without floors."""
    sizes = [b for b in sizes if any(("floor", c, b) in data for c in COLLECTIVES)]
    if not sizes:
        return []
    lines = ["| | " + " | ".join(lib.size_text(b, spaced=True) for b in sizes) + " |",
             "|---|" + "---:|" * len(sizes)]
    for coll in COLLECTIVES:
        cells = []
        for b in sizes:
            floor, psyne = data.get(("floor", coll, b)), data.get(("psyne", coll, b))
            if not floor or not psyne:
                cells.append("-")
                continue
            f = stat(floor)
            r = stat(psyne) / f
            mpis = [stat(v) for w in CANDIDATES if (v := data.get((w, coll, b)))]
            mpi = f", best MPI {min(mpis) / f:.2f}" if mpis else ""
            cell = f"**{r:.2f}**" if r > FLOOR_GOAL else f"{r:.2f}"
            cells.append(f"{cell} ({fmt_us(f)} µs{mpi})")
        lines.append(f"| {NAMES[coll]} | " + " | ".join(cells) + " |")
    return lines


def floor_section(data: dict, sizes: list) -> list:
    table = floor_table(data, sizes)
    if not table:
        return []
    return ["## psyne's time ÷ its copy floor", "",
            "The floor: `scripts/probes/copy-floors.sh`, a plain C program run as one more program",
            "in the rotation, that moves only the bytes the call must move (through a ring of four",
            "slices in shared memory, both cores at once; same buffers and semantics as psybench's,",
            "every element checked), one run in the slice size a calibration pass over seven, 16 KiB",
            "to 1 MiB, found fastest (five, to 256 KiB, before 2026-11-29), its calls averaged as",
            "psybench's (runs before 2026-11-28 reported the fastest of five runs, each run's median",
            "call). In brackets the floor's",
            f"µs and the best MPI's time ÷ the floor. **Bold**: more than {FLOOR_GOAL:g}× the floor,",
            "the issue's goal from 1 MiB up.", "", *table, "",
            "The same with each program's fastest round (where the rounds fall into a fast and a",
            "slow mode of the machine, as from 16 MiB up they do on this VM, the median says which",
            "mode most rounds landed in; the fastest round says what each program does in the fast",
            "one):", "", *floor_table(data, sizes, min), ""]


def times_table(data: dict, coll: str, sizes: list) -> list:
    """Each program's median µs (min–max over rounds) for one collective."""
    cols = [p for p in [*PROGRAMS, "imb", "floor"] if any((p, coll, b) in data for b in sizes)]
    label = {**MPIS, "psyne": "psyne", "imb": "IMB-MPI1 (Intel MPI)", "floor": "copy floor"}
    lines = ["| size | " + " | ".join(label[c] for c in cols) + " |",
             "|---|" + "---:|" * len(cols)]
    for b in sizes:
        cells = [lib.median_cell(data.get((c, coll, b), []), fmt=fmt_us) for c in cols]
        lines.append(f"| {lib.size_text(b, spaced=True)} | " + " | ".join(cells) + " |")
    return lines


def fmt_us(x: float) -> str:
    return f"{x:.2f}" if x < 10 else f"{x:.1f}" if x < 1000 else f"{x:.0f}"


def middle_spread(values: list) -> float:
    """The middle half of the rounds (interquartile range) ÷ median, as a fraction: one job's
    outlier does not set it."""
    mid = statistics.median(values)
    q1, _, q3 = statistics.quantiles(values, n=4, method="inclusive")
    return (q3 - q1) / mid if mid else 0.0


def near_median(values: list) -> float:
    """The fraction of rounds within ±15 % of the median (issue 37's reading of steady)."""
    mid = statistics.median(values)
    return sum(abs(v - mid) <= 0.15 * mid for v in values) / len(values)


def spread_table(data: dict, sizes: list, measure=spread, worst=max) -> list:
    """Each program's worst `measure` of its rounds over the collectives, per size (the largest
    spread, or with `worst=min` the fewest rounds near the median), in per cent."""
    lines = ["| size | " + " | ".join(["psyne", *MPIS.values()]) + " |",
             "|---|" + "---:|" * (1 + len(MPIS))]
    for b in sizes:
        cells = []
        for who in PROGRAMS:
            s = [measure(v) for coll in COLLECTIVES if len(v := data.get((who, coll, b), [])) > 1]
            cells.append(f"{worst(s) * 100:.0f} %" if s else "-")
        lines.append(f"| {lib.size_text(b, spaced=True)} | " + " | ".join(cells) + " |")
    return lines


def by_state(raw: Path, runs: list) -> tuple:
    """(the normal-state jobs' data, the slow-state jobs') as [`collect`] gives them, or None when
    no job ran in the slow state."""
    if not slow_jobs(runs)[1]:
        return None
    return collect(raw, runs, state="normal")[0], collect(raw, runs, state="slow")[0]


def normal_state_section(states: tuple, sizes: list) -> list:
    """The ratio table again over the jobs that ran in the machine's normal state only, when some
    ran in the slow state ([`by_state`]); each cell then has fewer rounds."""
    if not states:
        return []
    normal, _ = states
    return ["### The same, jobs in the machine's normal state only", "",
            "Leaving out the jobs listed under the spread below (a cell's median is then over fewer",
            "rounds, and a cell with none left is `-`):", "",
            *ratio_table(normal, sizes), ""]


# How far a slow-state median is from a normal-state one, and how a table cell shows it.
RATIO = (lambda slow, normal: slow / normal, lambda x: f"{x:.2f}×")
DIFFERENCE = (lambda slow, normal: slow - normal, lambda x: f"{fmt_us(x)} µs")


def state_move_table(normal: dict, slow: dict, sizes: list, measure=RATIO) -> list:
    """How far each program's median over its slow-state jobs is from its median over its
    normal-state jobs (`measure`: [`RATIO`], or [`DIFFERENCE`] in µs), the largest over the
    collectives that have jobs in both states, per size."""
    move, show = measure
    lines = ["| size | " + " | ".join(["psyne", *MPIS.values()]) + " |",
             "|---|" + "---:|" * (1 + len(MPIS))]
    for b in sizes:
        cells = []
        for who in PROGRAMS:
            r = [move(statistics.median(slow[k]), statistics.median(normal[k]))
                 for coll in COLLECTIVES if (k := (who, coll, b)) in slow and k in normal]
            cells.append(show(max(r)) if r else "-")
        lines.append(f"| {lib.size_text(b, spaced=True)} | " + " | ".join(cells) + " |")
    return lines


def state_spread_section(states: tuple, sizes: list) -> list:
    """How far each program moves with the machine's state, and its spread without it: the slow
    state's jobs against the normal state's ([`by_state`]), and the spread over the normal-state
    jobs alone."""
    if not states:
        return []
    normal, slow = states
    return ["### With the machine's state and without it", "",
            "How much each program moves with the machine's state: its median over its jobs that ran",
            "in the slow state (listed below) ÷ its median over the others, the largest over the",
            "collectives with jobs in both states (`-`: no such collective at that size):", "",
            *state_move_table(normal, slow, sizes), "",
            "The same as time: the slow-state median − the normal-state median, the largest over the",
            "collectives. A cost per line taken from the other core adds µs as a call takes lines,",
            "the same to programs that take as many, and the larger ratio to the faster one:", "",
            *state_move_table(normal, slow, sizes, DIFFERENCE), "",
            "The largest spread, (max − min) ÷ median, over the normal-state jobs only: how far apart",
            "the same job lands when the machine's state is not what changed:", "",
            *spread_table(normal, sizes), "",
            "The share of the normal-state rounds within ±15 % of their median (the fewest over the",
            "collectives):", "",
            *spread_table(normal, sizes, near_median, worst=min), ""]


# The C benchmark and IMB-MPI1 disagree on a cell of Intel MPI when one's median is more than
# this many times the other's.
DISAGREE = 1.5


def crosscheck_lines(data: dict, sizes: list) -> list:
    """The cells where the C benchmark and IMB-MPI1 time Intel MPI more than DISAGREE apart."""
    far = []
    for coll in COLLECTIVES:
        for b in sizes:
            c, imb = data.get(("impi", coll, b)), data.get(("imb", coll, b))
            if c and imb:
                r = statistics.median(c) / statistics.median(imb)
                if not 1 / DISAGREE <= r <= DISAGREE:
                    far.append(f"{NAMES[coll]} {lib.size_text(b, spaced=True)} {r:.2f}")
    if not far:
        return [f"The two agree within {DISAGREE:g}× in every cell.", ""]
    return [f"They disagree by more than {DISAGREE:g}× (C ÷ IMB) in: " + "; ".join(far) + ".", ""]


def write_summary(out: Path, data: dict) -> None:
    with (out / "summary.csv").open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["collective", "bytes", "program", "rounds", "median_us", "min_us", "max_us"])
        for (who, coll, b), v in sorted(data.items(), key=lambda kv: (kv[0][1], kv[0][2], kv[0][0])):
            mid, low, high = lib.median_range(v)
            w.writerow([coll, b, who, len(v), f"{mid:.3f}", f"{low:.3f}", f"{high:.3f}"])


def main(argv: list) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--revision", required=True)
    ap.add_argument("--rounds", type=int, default=0)
    ap.add_argument("--command", default="scripts/bench/versus-every-mpi.sh")
    ap.add_argument("--load-before", default="")
    ap.add_argument("--load-after", default="")
    ap.add_argument("--transport", choices=["shm", "tcp"], default="shm")
    a = ap.parse_args(argv)
    runs = read_runs(a.out / "raw")
    data, failed, ranks = collect(a.out / "raw", runs)
    states = by_state(a.out / "raw", runs)
    sizes = sorted({b for (who, _, b) in data if who == "psyne"})
    write_summary(a.out, data)
    text = [
        f"# psyne against Open MPI, MPICH 5 and Intel MPI: {ranks} ranks over {OVER[a.transport]}",
        "",
        lib.made_by(a.command, a.revision),
        "",
        *lib.machine_table(a.load_before, a.load_after),
        "",
        "Each MPI runs `bench/c/mpi_coll_bench.c` built with its own compiler and started by its",
        "own launcher (Open MPI 4.1's `mpirun`, MPICH 5.0.2's and Intel MPI's Hydra `mpiexec`),",
        "ranks bound to cores; psyne runs psybench under psyrun. OSU cadence: each call timed",
        "alone, an untimed barrier after it, the time is the mean over ranks. f32 sum, in place for",
        "all-reduce. Every result was checked element by element. "
        f"{a.rounds or '?'} rounds; each round runs every program once per collective, in an",
        "order that changes round by round so that each program follows every other equally",
        "often (a Williams design; runs before 2026-11-27 15:00 rotated it). Medians over rounds.",
        "",
        *TRANSPORT_NOTE[a.transport],
        "## Best MPI's time ÷ psyne's",
        "",
        "Above 1 psyne is faster; **below 1** the named MPI is faster. Intel MPI's time is the",
        "faster of the C benchmark's and IMB-MPI1's (`Intel MPI (IMB)` where IMB's). `*`: the",
        "two programs' rounds do not overlap (every round of the faster one beat every round of",
        "the other), a difference beyond the rounds' spread.",
        "",
        *ratio_table(data, sizes),
        "",
        *apart_lines(data, sizes),
        "",
        *normal_state_section(states, sizes),
        "### The same, each program's fastest round",
        "",
        "A job is slowed by whatever else the machine does, never sped up: each program's",
        "fastest of its rounds is what it does when the machine leaves it alone.",
        "",
        *ratio_table(data, sizes, min),
        "",
        *floor_section(data, sizes),
        "## Spread across rounds",
        "",
        "The largest (max − min) ÷ median over the four collectives, per program and size: how far",
        "apart the same job lands when it is run again.",
        "",
        *spread_table(data, sizes),
        "",
        "The same with the middle half of the rounds only (interquartile range ÷ median, the",
        "largest over the collectives): the spread without its one or two most distant jobs.",
        "",
        *spread_table(data, sizes, middle_spread),
        "",
        "The share of rounds within ±15 % of their median (the fewest over the collectives):",
        "",
        *spread_table(data, sizes, near_median, worst=min),
        "",
        *state_spread_section(states, sizes),
        *state_lines(runs),
        "",
    ]
    for coll in COLLECTIVES:
        if any(k[1] == coll for k in data):
            text += [f"## {NAMES[coll]}: µs, median (min–max over rounds)", "",
                     *times_table(data, coll, sizes), ""]
    text += ["IMB-MPI1 is Intel's own benchmark under Intel MPI's launcher, as a cross-check of the C",
             "benchmark's Intel MPI column: `t_avg`, its own iteration policy (1000 repetitions for",
             "small messages, as few as 1 or 2 at 16–64 MiB, so those cells are single samples), the",
             "buffers reused as IMB does by default, all-reduce out of place (the C benchmark's is in",
             "place, `MPI_IN_PLACE`, as psyne's).", "", *crosscheck_lines(data, sizes)]
    if failed:
        text += ["## Runs that failed", "", *[f"- {f}" for f in failed], ""]
    (a.out / "README.md").write_text("\n".join(text))
    print(f"wrote {a.out / 'README.md'}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
