#!/usr/bin/env python3
"""Summarises a scripts/bench/versus-mpi.sh run: medians over the rounds, Open MPI's time over psyne's
per cell, the goal of issue 15 per cell, a CSV of every median, and one plot spec per collective.

    scripts/report/versus-mpi.py OUT [--load TEXT] [--rounds N] [--layouts "shm2 tcp2 shm8"]
                                     [--cadences "stream osu"] [--allow-dirty]

Reads OUT/raw/LAYOUT-CADENCE-rROUND-WHO.json (WHO: default, tuned, mpi), OUT/peak.txt,
OUT/commands.txt, OUT/tune-LAYOUT.txt, and if present OUT/floors.txt (scripts/probes/floors.sh) and
OUT/about.md (a note on the run, written by hand, placed under the heading); writes OUT/README.md, OUT/summary.csv and
OUT/plots/COLLECTIVE.json (the stream-cadence rows of every layout, each job's series named
`psyne LAYOUT`, `psyne tuned LAYOUT` or `mpi LAYOUT`), which versus-mpi.sh draws with
`psybench plot`.

The goal per cell (Open MPI's time / psyne's, so above 1 psyne is faster): all-reduce on 2 ranks
over shared memory at least 2 up to 16 MiB and 4 at 64 MiB; over TCP at least 1.2; everything else
at least 1 (no size where Open MPI is faster). A cell meets it when the tuned psyne does.

The build the report names is the one psybench recorded; a dirty one is refused (exit 2) unless
--allow-dirty, which the report then states.
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

WHO = ("default", "tuned", "mpi")
LAYOUT_TEXT = {
    "shm2": "2 ranks, shared memory (both bound one per core by their launcher)",
    "tcp2": "2 ranks, loopback TCP (Open MPI: `--mca btl tcp,self`)",
    "shm8": "8 ranks on the 2 cores, shared memory (oversubscribed)",
}
ORDER = ["allreduce", "broadcast", "reduce", "allgather", "reducescatter", "alltoall", "gather",
         "scatter", "barrier", "sendrecv"]


time_of = lib.time_of
size_text = lib.size_text


def load_runs(raw: Path, layout: str, cadence: str, rounds: int):
    """(collective, bytes) -> who -> [time per round]; -> who -> set of algorithms; and -> who ->
    [(fastest rank's time, slowest rank's time) per round]."""
    times, algos, spans = {}, {}, {}
    for who in WHO:
        for rnd in range(1, rounds + 1):
            path = raw / f"{layout}-{cadence}-r{rnd}-{who}.json"
            if not path.exists():
                continue
            for r in json.loads(path.read_text())["records"]:
                key = (r["collective"], r["bytes"])
                times.setdefault(key, {}).setdefault(who, []).append(time_of(r))
                algos.setdefault(key, {}).setdefault(who, set()).add(r["algo"])
                spans.setdefault(key, {}).setdefault(who, []).append(
                    (r["time_us_min"], r["time_us_max"]))
    return times, algos, spans


def loads(raw: Path, layout: str, cadence: str) -> str:
    """The 1-minute load average at the start of each job of a layout and cadence, min–max."""
    seen = [json.loads(p.read_text())["meta"].get("load_average")
            for p in raw.glob(f"{layout}-{cadence}-r*-*.json")]
    seen = [x for x in seen if x is not None]
    return f"{min(seen):.2f}–{max(seen):.2f}" if seen else "unknown"


def goal(layout: str, coll: str, size: int) -> float:
    if layout == "tcp2":
        return 1.2
    if layout == "shm2" and coll == "allreduce":
        return 4.0 if size >= 64 << 20 else 2.0
    return 1.0


def summarise(out: Path, layouts, cadences, rounds):
    rows = []
    for layout in layouts:
        for cadence in cadences:
            times, algos, spans = load_runs(out / "raw", layout, cadence, rounds)
            for (coll, size), by in times.items():
                if not all(w in by for w in WHO):
                    continue
                med = {w: statistics.median(by[w]) for w in WHO}
                same = algos[(coll, size)]["default"] == algos[(coll, size)]["tuned"]
                tuned_rounds = by["tuned"]
                if same:
                    # The same algorithm ran in both psyne jobs: one measurement, twice the rounds.
                    tuned_rounds = by["default"] + by["tuned"]
                    med["default"] = med["tuned"] = statistics.median(tuned_rounds)
                rows.append({
                    "layout": layout, "cadence": cadence, "collective": coll, "bytes": size,
                    "default_us": med["default"], "tuned_us": med["tuned"], "mpi_us": med["mpi"],
                    "mpi_over_default": med["mpi"] / med["default"] if med["default"] else None,
                    "mpi_over_tuned": med["mpi"] / med["tuned"] if med["tuned"] else None,
                    "default_algo": "/".join(sorted(algos[(coll, size)]["default"])),
                    "tuned_algo": "/".join(sorted(algos[(coll, size)]["tuned"])),
                    "same_algo": same,
                    "goal": goal(layout, coll, size),
                    "rounds": min(len(by[w]) for w in WHO),
                    # The ratio of the slowest Open MPI round over the fastest psyne round: the
                    # best case the rounds' spread allows.
                    "best_round_ratio": max(by["mpi"]) / min(tuned_rounds) if min(tuned_rounds) else None,
                    # Medians of the fastest and the slowest rank's time (they differ where the
                    # time is a mean over ranks: osu cadence).
                    **{f"{w}_{end}_rank_us": statistics.median(x[i] for x in spans[(coll, size)][w])
                       for w in ("tuned", "mpi") for i, end in enumerate(("fastest", "slowest"))},
                })
    rows.sort(key=lambda r: (layouts.index(r["layout"]), cadences.index(r["cadence"]),
                             ORDER.index(r["collective"]) if r["collective"] in ORDER else 99,
                             r["bytes"]))
    for r in rows:
        r["met"] = r["mpi_over_tuned"] is not None and r["mpi_over_tuned"] >= r["goal"]
        r["reason"] = "" if r["met"] else reason_of(r)
    return rows


def cell(r: dict) -> str:
    t, d = r["mpi_over_tuned"], r["mpi_over_default"]
    text = f"{t:.2f}"
    if not r["same_algo"]:
        text += f" ({d:.2f})"
    return text if r["met"] else f"**{text}**"


def matrix(rows, layout, cadence) -> list:
    sel = [r for r in rows if r["layout"] == layout and r["cadence"] == cadence]
    sizes = sorted({r["bytes"] for r in sel if r["bytes"] > 0})
    colls = [c for c in ORDER if any(r["collective"] == c for r in sel)]
    lines = ["| | " + " | ".join(size_text(s) for s in sizes) + " |",
             "|---|" + "---:|" * len(sizes)]
    for c in colls:
        by = {r["bytes"]: r for r in sel if r["collective"] == c}
        if c == "barrier" and 0 in by:
            lines.append(f"| barrier (no data) | {cell(by[0])} |" + " |" * (len(sizes) - 1))
            continue
        lines.append(f"| {c} | " + " | ".join(cell(by[s]) if s in by else "" for s in sizes) + " |")
    return lines


ROOTED = ("broadcast", "reduce", "gather", "scatter")
SHM = ("shm2", "shm8")


def cell_of(rows, layout, cadence, coll, size):
    return next((r for r in rows if (r["layout"], r["cadence"], r["collective"], r["bytes"])
                 == (layout, cadence, coll, size)), None)


def sendrecv_small(rows) -> str:
    r = cell_of(rows, "shm2", "stream", "sendrecv", 8)
    pair = (f" On 2 ranks over shared memory a send and a receive of 8 B take {r['tuned_us']:.2f} µs "
            f"together against Open MPI's {r['mpi_us']:.2f} µs." if r else "")
    return ("A send or receive runs through the general step engine: the group's lock, a 40-byte "
            "header written and checked, and the ring's publication." + pair + " Over TCP both pay "
            "a loopback crossing per message and psyne is about 1.1-1.2x faster, at or just short "
            "of the 1.2x goal.")


# This run's floors (scripts/probes/floors.sh, OUT/floors.txt; set by main): (program, bytes) -> µs,
# for "allreduce2" the faster of its whole and sliced transfers.
FLOORS = {}


def read_floors(path: Path) -> dict:
    floors = {}
    if not path.exists():
        return floors
    for line in path.read_text().splitlines():
        m = re.match(r"(allreduce2|pingpong) (\d+) B[^:]*: ([0-9.]+) us", line)
        if m:
            key, us = (m[1], int(m[2])), float(m[3])
            floors[key] = min(us, floors.get(key, us))
    return floors


def sendrecv_pulled(rows) -> str:
    pairs = []
    for size in (64 << 10, 1 << 20):
        r = cell_of(rows, "shm2", "stream", "sendrecv", size)
        floor = FLOORS.get(("pingpong", size))
        if r and floor:
            pairs.append(f"{size_text(size)}: floor {floor:.1f}, Open MPI {r['mpi_us']:.1f}, "
                         f"psyne {r['tuned_us']:.1f} µs")
    measured = ("A plain C ping-pong of the same kernel copy (`scripts/probes/floors.sh`, this run) is the "
                "floor both libraries approach, per round trip: " + "; ".join(pairs) + ". " if pairs
                else "")
    return ("From 16 KiB a `send` over shared memory is pulled in one copy by its receiver once the "
            "receiver waits for it, the whole message or, if the receiver began to wait after the "
            "send started, the rest of it (`results/shm-p2p-rendezvous/`); any other send is "
            "buffered through the ring, two copies, since a `send` completes once the transport "
            "holds the message. Open MPI's sends above 4 KiB always wait for the receiver and copy "
            "once. " + measured + "What psyne adds to the floor is its per-message cost (as for "
            "small messages, below) and the first slices that cross the ring before the receiver "
            "says it waits.")


def allreduce_2x(rows) -> str:
    parts = []
    for size in (256 << 10, 1 << 20, 4 << 20, 16 << 20, 64 << 20):
        r = cell_of(rows, "shm2", "stream", "allreduce", size)
        floor = FLOORS.get(("allreduce2", size))
        if r and floor:
            need = r["mpi_us"] / r["goal"]
            parts.append(f"{size_text(size)}: floor {floor:.0f}, {r['goal']:g}x needs {need:.0f}, "
                         f"psyne {r['tuned_us']:.0f}")
    if parts:
        measured = ("A C program that does just that with the same kernel copy, one process per core "
                    "(`scripts/probes/floors.sh`, this run, the better of whole transfers and 256 KiB "
                    "slices), against what the goal needs, in µs: " + "; ".join(parts) + ". Where "
                    "the floor is above what the goal needs, the goal is out of reach on "
                    "caller-owned buffers; psyne's zero-copy path, `alloc_shared` buffers, skips "
                    "the copies (not in this report).")
    else:
        measured = "(No floors were measured in this run: `scripts/probes/floors.sh`.)"
    return ("On ordinary buffers each rank must at least pull the peer's copy of its half of the "
            "input, add it into its own, and pull the peer's reduced half: every byte crosses "
            "between the cores once, and half of them are summed. psyne does this (a reduce-scatter "
            "then an all-gather, the sum in a window that stays in the cache). " + measured)


def tcp_loopback(rows) -> str:
    r = cell_of(rows, "tcp2", "stream", "broadcast", 1 << 20)
    example = (f" (broadcast of 1 MiB: {r['tuned_us']:.1f} µs for psyne and {r['mpi_us']:.1f} µs for "
               f"Open MPI, {(1 << 20) / r['tuned_us'] / 1000:.1f} GB/s one way, two copies by two "
               "cores at once)" if r else "")
    return ("Over loopback TCP both libraries copy every byte into the kernel and out again, and "
            "from 1 MiB both run at about loopback's copy limit on this host" + example + ". A 1.2x "
            "lead there would need fewer copies than a TCP socket allows; on one host psyne's "
            "answer is shared memory. The reducing collectives, where psyne's reduction is faster, "
            "and most others from 16 MiB meet the goal. All-reduce of 1-4 MiB is the exception "
            "that a setting changes: its ring sends 512 KiB halves, which cross the 128 KiB send "
            "buffer of a same-host link in four fills, each waiting for the peer to drain; with a "
            "512 KiB buffer it took 185-188 µs at 1 MiB against 204-212 µs "
            "(`results/tcp-sndbuf/allreduce-buffers.md`), while the other collectives were "
            "fastest with 128 KiB. Switching the buffer per call was tried and made the calls after "
            "an all-reduce up to 3.5x slower (same file); a program that only all-reduces can set "
            "`PSY_TCP_SNDBUF=512K`.")


CROWDED = (
    "8 ranks on 2 cores: a step waits until its peer is scheduled (4 processes per core), so one "
    "cell moves between rounds and between runs. In a run of this layout alone, 5 rounds at "
    "64 KiB-16 MiB (`results/crowded-8ranks/`, the build before this one), 24 of its 56 cells "
    "were above Open MPI in some rounds and below in others, and a cell's ratio spanned up to 2x "
    "(all-gather of 64 KiB, stream: 0.60-1.20). Below 1 in all 5 rounds were: all-to-all (0.51-0.92 "
    "by pairwise exchange, which waits for each peer in turn; linear since, "
    "`results/alltoall-linear/`: 0.50-0.91 of pairwise's time), broadcast (osu at every size, "
    "0.32-0.88, and stream at 64 KiB, 0.53-0.66), all-reduce of 1 MiB (0.77-0.95), all-gather "
    "from 1 MiB in osu cadence (0.77-0.95), send/recv of 64 KiB-1 MiB (0.59-0.86) and scatter of "
    "16 MiB in osu cadence (0.66-0.83); these are not broken down further. One attempt, a "
    "broadcast root that collects its peers' confirmations after sending all its data instead of "
    "step by step, changed nothing measurable (rounds within 0.7-1.4x of each other).")

def slowest_ratio(r: dict) -> float:
    """Open MPI's slowest rank's time ÷ psyne's (tuned)."""
    return r["mpi_slowest_rank_us"] / r["tuned_slowest_rank_us"]


def osu_mean(rows) -> str:
    r = cell_of(rows, "shm2", "osu", "gather", 1 << 20)
    example = ""
    if r:
        example = (f" Gather of 1 MiB on 2 ranks: Open MPI's ranks took {r['mpi_fastest_rank_us']:.1f} "
                   f"and {r['mpi_slowest_rank_us']:.1f} µs, psyne's {r['tuned_fastest_rank_us']:.1f} "
                   f"and {r['tuned_slowest_rank_us']:.1f} µs.")
    return ("osu cadence averages over the ranks. On the slowest rank these cells meet the goal or "
            "come within 5% of it (`summary.csv` has each job's fastest and slowest rank): the miss "
            "is in the ranks that finish first. In a gather or a send, Open MPI's sending rank "
            "returns once its data is on "
            "its way, while a psyne rank whose data is pulled waits until the receiver has copied "
            "it, so both take the whole time." + example)


# Why a cell misses its goal, as far as it has been found out: (name, test on a row, explanation,
# or a function of all rows that gives it). The first test a missed cell passes gives its reason.
REASONS = [
    ("rooted-small",
     lambda r: r["collective"] in ROOTED and r["bytes"] <= 16 << 10,
     "A rooted call returns only when every peer has entered the same call: that is what lets "
     "every rank learn of a mismatch (issue 14). Open MPI's root returns once its eager send is "
     "posted, so back to back it runs ahead. With 8 ranks on 2 cores the root waits until all 8 "
     "processes have been scheduled once. Over TCP the wait costs a loopback crossing (5-6 µs)."),
    ("osu-mean",
     lambda r: (r["cadence"] == "osu" and r["tuned_slowest_rank_us"]
                and slowest_ratio(r) >= 0.95 * r["goal"]),
     osu_mean),
    ("sendrecv-small",
     lambda r: r["collective"] == "sendrecv" and (r["bytes"] < 16 << 10 or (
         r["layout"] == "tcp2" and r["bytes"] <= 16 << 10)),
     sendrecv_small),
    ("sendrecv-pulled",
     lambda r: r["collective"] == "sendrecv" and r["layout"] == "shm2" and r["bytes"] <= 1 << 20,
     sendrecv_pulled),
    ("allreduce-small",
     lambda r: r["collective"] == "allreduce" and r["layout"] == "shm2" and r["bytes"] <= 4096,
     "The node-board all-reduce (up to 4 KiB per rank) is one exchange of cache lines between the "
     "two cores, after which each rank folds both slots; twice Open MPI's speed at 8 B would need "
     "well under 0.2 µs a call on this host. The tuning file's recursive doubling at 4 KiB was "
     "slower than the board here (in brackets: the board)."),
    ("allreduce-2x",
     lambda r: r["collective"] == "allreduce" and r["layout"] == "shm2",
     allreduce_2x),
    ("tcp-loopback",
     lambda r: r["layout"] == "tcp2" and r["bytes"] >= 256 << 10,
     tcp_loopback),
    ("crowded",
     lambda r: r["layout"] == "shm8" and (r["bytes"] >= 16 << 10 or r["collective"] in (
         "barrier", "sendrecv")),
     CROWDED),
    ("shm-large",
     lambda r: r["layout"] == "shm2" and r["bytes"] >= 16 << 10,
     "Both libraries move large messages between processes at memory speed: psyne by single-copy "
     "pull (the same kernel copy as Open MPI's CMA) where that was measured faster, else through "
     "its ring, whose two copies the two sides make at once. These cells are ties within the "
     "rounds' spread or close to it. Scatter and gather of 4 MiB go through the ring (2 MiB per "
     "rank: pulled from 4 MiB, a broadcast or gather was 1.1x slower, `results/shm-pulls/`), "
     "where Open MPI copies once. Gather and scatter of 64 KiB in osu cadence (0.8 in this run) "
     "send 32 KiB per rank, through the ring (one-way traffic is pulled from 64 KiB), where Open "
     "MPI's root copies once; pulled from 16 KiB (`PSY_SHM_CMA_MIN=16384`) their osu means "
     "went from 3.6-3.8 and 4.1-4.9 µs to 2.8-4.2 and 2.8-4.5 µs in 3 alternated rounds: not "
     "conclusive, so the window stays."),
]


def reason_of(r: dict) -> str:
    return next((name for name, test, _ in REASONS if test(r)), "unexplained")


def misses(rows) -> list:
    """Every missed cell, grouped by its reason, with its ratio and the goal."""
    bad = [r for r in rows if not r["met"]]
    lines = [f"{len(bad)} of {len(rows)} cells miss the goal. Each is listed below under the reason "
             "it misses, as `size ratio/goal` (Open MPI's time ÷ psyne's, tuned, medians; "
             "`summary.csv` has the times).", ""]
    texts = {name: text(rows) if callable(text) else text for name, _, text in REASONS}
    left = [r for r in bad if reason_of(r) == "unexplained"]
    close = sum(r["mpi_over_tuned"] >= 0.9 * r["goal"] for r in left)
    texts["unexplained"] = (f"Not analysed; {close} of these {len(left)} are within 10% of their "
                            "goal.")
    spread = [r for r in bad if (r["best_round_ratio"] or 0) >= r["goal"]]
    lines += [f"{len(spread)} of the {len(bad)} reach their goal in the rounds' spread (the slowest "
              "Open MPI round over the fastest psyne round): they are marked `~` below, and may be "
              "misses of this run rather than of psyne.", ""]
    for name in [n for n, _, _ in REASONS] + ["unexplained"]:
        mine = [r for r in bad if reason_of(r) == name]
        if not mine:
            continue
        lines += [f"**{name}** ({len(mine)} cells). {texts[name]}", ""]
        groups = {}
        for r in mine:
            groups.setdefault((r["layout"], r["cadence"], r["collective"]), []).append(r)
        for (layout, cadence, coll), rs in groups.items():
            cells = ", ".join(f"{size_text(r['bytes'])} {r['mpi_over_tuned']:.2f}/{r['goal']:g}"
                              + ("~" if (r["best_round_ratio"] or 0) >= r["goal"] else "")
                              for r in rs)
            lines.append(f"- {layout} {cadence} {coll}: {cells}")
        lines.append("")
    return lines


def worst(rows) -> list:
    bad = [r for r in rows if not r["met"]]
    bad.sort(key=lambda r: r["mpi_over_tuned"] / r["goal"])
    lines = ["The 25 cells furthest from their goal (times in µs, medians):", "",
             "| layout | cadence | collective | size | psyne (tuned) | Open MPI | ratio | goal | psyne's algorithm |",
             "|---|---|---|---:|---:|---:|---:|---:|---|"]
    for r in bad[:25]:
        lines.append(f"| {r['layout']} | {r['cadence']} | {r['collective']} | {size_text(r['bytes'])} "
                     f"| {r['tuned_us']:.2f} | {r['mpi_us']:.2f} | {r['mpi_over_tuned']:.2f} "
                     f"| {r['goal']} | {r['tuned_algo']} |")
    return lines


def tuned_vs_default(rows) -> list:
    changed = [r for r in rows if r["tuned_algo"] != r["default_algo"]]
    lines = [f"The tuning file changed the algorithm in {len(changed)} of {len(rows)} cells; "
             "default ÷ tuned time there (above 1: the tuned choice is faster):", "",
             "| layout | cadence | collective | size | default | tuned | default ÷ tuned |",
             "|---|---|---|---:|---|---|---:|"]
    for r in changed:
        lines.append(f"| {r['layout']} | {r['cadence']} | {r['collective']} | {size_text(r['bytes'])} "
                     f"| {r['default_algo']} {r['default_us']:.2f} µs | {r['tuned_algo']} {r['tuned_us']:.2f} µs "
                     f"| {r['default_us'] / r['tuned_us']:.2f} |")
    return lines


def plot_specs(out: Path, layouts, rounds):
    """One report per collective: the stream rows of every layout, a series per job kind."""
    plots = out / "plots"
    plots.mkdir(exist_ok=True)
    by_coll, meta = {}, None
    for layout in layouts:
        for who in WHO:
            for rnd in range(1, rounds + 1):
                path = out / "raw" / f"{layout}-stream-r{rnd}-{who}.json"
                if not path.exists():
                    continue
                report = json.loads(path.read_text())
                meta = meta or report["meta"]
                name = {"default": "psyne", "tuned": "psyne tuned", "mpi": "mpi"}[who]
                for r in report["records"]:
                    r = dict(r, backend=f"{name} {layout}", algo="auto", transport="-")
                    by_coll.setdefault(r["collective"], []).append(r)
    for coll, records in by_coll.items():
        if not any(r["bytes"] > 0 for r in records):
            continue  # barrier: no size axis; its latency is in the tables
        m = dict(meta, command="scripts/bench/versus-mpi.sh (stream cadence, every layout)",
                 backends=sorted({r["backend"] for r in records}))
        (plots / f"{coll}.json").write_text(json.dumps({"meta": m, "records": records, "fits": []}))


def main(argv) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("out", type=Path)
    p.add_argument("--load", default="?")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--layouts", default="shm2 tcp2 shm8")
    p.add_argument("--cadences", default="stream osu")
    p.add_argument(lib.ALLOW_DIRTY, action="store_true",
                   help="publish from a build with uncommitted changes, saying so")
    a = p.parse_args(argv[1:])
    layouts, cadences = a.layouts.split(), a.cadences.split()
    global FLOORS
    FLOORS = read_floors(a.out / "floors.txt")
    rows = summarise(a.out, layouts, cadences, a.rounds)
    if not rows:
        print(f"no complete cells under {a.out}/raw", file=sys.stderr)
        return 1
    with open(a.out / "summary.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0].keys()))
        w.writeheader()
        w.writerows(rows)
    plot_specs(a.out, layouts, a.rounds)
    any_meta = json.loads(next((a.out / "raw").glob("*.json")).read_text())["meta"]
    try:
        revision = lib.checked_revision(any_meta.get("git_revision") or "unknown", a.allow_dirty)
    except lib.DirtyTree as e:
        print(f"refusing to publish a report: {e}", file=sys.stderr)
        return 2
    text = [
        "# psyne against Open MPI: every collective, every size (issue 15)", "",
        f"Made by `scripts/bench/versus-mpi.sh` on {any_meta['date']}, source revision "
        f"{revision}; {any_meta['cpu_model']}, {any_meta['cores']} cores; "
        f"load average before / after: {a.load}. {a.rounds} rounds of three jobs whose order rotates "
        "each round: psyne with its built-in choices (`PSY_TUNING=off`), psyne with the tuning file "
        "`psybench tune` wrote at the start of the run (`tuning`, its tables `tune-*.txt`), and Open MPI "
        "under mpirun as a plain MPI program. Every result checked against the oracle. Cells are Open MPI's "
        "time ÷ psyne's (tuned; in brackets the built-in choice, where the tuning file chose another algorithm), medians "
        "over the rounds (where the tuning file chose the built-in algorithm, the two psyne jobs measured "
        "the same thing and their rounds are pooled): **above 1 psyne is faster**; bold cells miss the goal (all-reduce on 2 ranks "
        "over shared memory ≥ 2, ≥ 4 at 64 MiB; TCP ≥ 1.2; else ≥ 1). Sizes as nccl-tests counts them; "
        "`stream` is back to back, slowest rank; `osu` a barrier after each call, mean over ranks.", "",
    ]
    if (a.out / "about.md").exists():
        text += [(a.out / "about.md").read_text().rstrip(), ""]
    text += [
        "This host's raw rates, same run (`psybench peak`):", "", "```",
        (a.out / "peak.txt").read_text().rstrip(), "```", "",
    ]
    if (a.out / "floors.txt").exists():
        text += ["Floors of the 2-rank all-reduce and ping-pong with single-copy transfers, same "
                 "run (`scripts/probes/floors.sh`: plain C, one process per core, `process_vm_readv`):", "",
                 "```", (a.out / "floors.txt").read_text().rstrip(), "```", ""]
    for layout in layouts:
        for cadence in cadences:
            text += [f"## {LAYOUT_TEXT.get(layout, layout)}, {cadence}", "",
                     f"Load average at the start of its jobs: {loads(a.out / 'raw', layout, cadence)} "
                     "(the 1-minute average: it lags, and the jobs' own ranks and the 8-rank tuning count in it).", ""]
            text += matrix(rows, layout, cadence) + [""]
    text += ["## Where the goal is missed, and why", ""] + misses(rows) + worst(rows) + [""]
    text += ["## The tuning file against the built-in choices", ""] + tuned_vs_default(rows) + [""]
    text += ["## Files", "",
             "`summary.csv`: every cell's medians (µs), algorithms and ratios; `raw/`: every job's JSON "
             "and table; `plots/COLLECTIVE.png`: latency and busbw, stream cadence, every layout "
             "(series: `psyne`, `psyne tuned`, `mpi` and the layout); `commands.txt`: every command run.", ""]
    (a.out / "README.md").write_text("\n".join(text))
    print(f"{len(rows)} cells, {sum(not r['met'] for r in rows)} missing the goal")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
