#!/usr/bin/env python3
"""Summarises scripts/bench/mpi-crosscheck.sh's runs: per cell (transport, collective, cadence, size),
the median over rounds of the plain C benchmark's time and of psybench's MPI backend's time, for
the slowest rank (max over ranks) and for the mean over ranks, their ratio psybench / C, and
whether it is within the tolerance (default ±15%).

    scripts/report/crosscheck-summary.py DIR [--tolerance 0.15]

Reads DIR/raw/runs.csv (one row per run: round, transport, collective, cadence, program, rc,
path; path relative to DIR; program `c` points at mpi_coll_bench's CSV, `psybench` at psybench's
JSON report). Writes DIR/agreement.csv and prints the markdown table and a verdict line (the last
line, starting `verdict:`) to stdout. Exit status: 0 every cell within tolerance, both programs
agree on sizes and iterations and no element was wrong; 1 otherwise; 2 unusable input.
"""
import csv
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import lib  # noqa: E402  (the shared report library, beside this file)

# Fields both programs write that must agree for a comparison to be like with like.
SAME = ("bytes", "count", "iters", "warmup", "in_place")


def median(values):
    """The median (mean of the two middle values for an even count); None when empty."""
    return lib.median_range(values)[0] if values else None


def within(ratio, tolerance):
    """True when ratio lies in [1 - tolerance, 1 + tolerance] (the ±tolerance band)."""
    return ratio is not None and (1 - tolerance) - 1e-12 <= ratio <= (1 + tolerance) + 1e-12


def spread(values):
    """(largest - smallest) / median of one program's rounds: how much the machine moved it."""
    m = median(values)
    return (max(values) - min(values)) / m if len(values) > 1 and m else 0.0


def human(b):
    return lib.size_text(b, spaced=True)


def as_bool(v):
    return str(v).strip().lower() in ("true", "1", "yes")


def read_c(path):
    """mpi_coll_bench's CSV: {bytes: row}."""
    rows = {}
    with open(path, newline="") as f:
        for r in csv.DictReader(f):
            rows[int(r["bytes"])] = {
                "bytes": int(r["bytes"]),
                "count": int(r["count"]),
                "iters": int(r["iters"]),
                "warmup": int(r["warmup"]),
                "in_place": as_bool(r["in_place"]),
                "avg": float(r["time_us_avg"]),
                "max": float(r["time_us_max"]),
                "wrong": int(r["wrong"]),
            }
    return rows


def read_psybench(path):
    """psybench's JSON report (bench/src/model.rs Report): {bytes: row} of its MPI records."""
    with open(path) as f:
        report = json.load(f)
    rows = {}
    for r in report.get("records", []):
        if r.get("backend") != "mpi":
            continue
        rows[int(r["bytes"])] = {
            "bytes": int(r["bytes"]),
            "count": int(r["count"]),
            "iters": int(r["iters"]),
            "warmup": int(r["warmup"]),
            "in_place": bool(r["in_place"]),
            "avg": float(r["time_us_avg"]),
            "max": float(r["time_us_max"]),
            "wrong": int(r["wrong"] or 0),
            "cadence": r.get("cadence"),
        }
    return rows


def fmt(x, spec=".1f"):
    return "–" if x is None else format(x, spec)


def summarise(out, tolerance):
    runs_path = os.path.join(out, "raw", "runs.csv")
    try:
        with open(runs_path, newline="") as f:
            runs = list(csv.DictReader(f))
    except OSError as e:
        print(f"crosscheck-summary: cannot read {runs_path}: {e}", file=sys.stderr)
        return None
    problems = []
    # (transport, collective, cadence) -> program -> list of {bytes: row}, one per round
    data = {}
    for run in runs:
        key = (run["transport"], run["collective"], run["cadence"])
        prog = run["program"]
        path = os.path.join(out, run["path"])
        if run["rc"] != "0":
            problems.append(f"{prog} {' '.join(key)} round {run['round']} exited {run['rc']} ({run['path']})")
        try:
            rows = read_c(path) if prog == "c" else read_psybench(path)
        except (OSError, ValueError, KeyError) as e:
            problems.append(f"{prog} {' '.join(key)} round {run['round']}: unreadable {run['path']}: {e}")
            rows = {}
        for b, r in rows.items():
            if r["wrong"]:
                problems.append(f"{prog} {' '.join(key)} {human(b)} round {run['round']}: {r['wrong']} wrong elements")
            if prog == "psybench" and r.get("cadence") not in (None, run["cadence"]):
                problems.append(f"psybench {' '.join(key)}: record says cadence {r['cadence']}")
        data.setdefault(key, {}).setdefault(prog, []).append(rows)

    cells = []
    for key in data:  # in the order of runs.csv: the script's order of transports, collectives, cadences
        progs = data[key]
        sizes = sorted({b for rounds in progs.values() for rows in rounds for b in rows})
        for b in sizes:
            cell = {"transport": key[0], "collective": key[1], "cadence": key[2], "bytes": b}
            c_rows = [rows[b] for rows in progs.get("c", []) if b in rows]
            p_rows = [rows[b] for rows in progs.get("psybench", []) if b in rows]
            for stat in ("max", "avg"):
                cv = median([r[stat] for r in c_rows])
                pv = median([r[stat] for r in p_rows])
                ratio = pv / cv if cv and pv is not None else None
                cell[stat] = {
                    "c": cv,
                    "p": pv,
                    "ratio": ratio,
                    "ok": within(ratio, tolerance),
                    "c_rounds": [r[stat] for r in c_rows],
                    "p_rounds": [r[stat] for r in p_rows],
                }
            if not c_rows or not p_rows:
                problems.append(f"{' '.join(key)} {human(b)}: no {'C' if not c_rows else 'psybench'} result")
            for f in SAME:
                vals = {r[f] for r in c_rows} | {r[f] for r in p_rows}
                if len(vals) > 1:
                    problems.append(f"{' '.join(key)} {human(b)}: the programs disagree on {f}: "
                                    f"C {sorted({r[f] for r in c_rows})}, psybench {sorted({r[f] for r in p_rows})}")
            cell["iters"] = c_rows[0]["iters"] if c_rows else (p_rows[0]["iters"] if p_rows else None)
            cell["ok"] = cell["max"]["ok"] and cell["avg"]["ok"]
            # The noise of the cell: the larger round-to-round spread of the two programs' max.
            cell["noise"] = max(spread(cell["max"]["c_rounds"]), spread(cell["max"]["p_rounds"]))
            # Outside the band, but no further from 1 than the rounds scatter: undecided.
            cell["in_noise"] = not cell["ok"] and all(
                cell[st]["ratio"] is not None and abs(cell[st]["ratio"] - 1) <= cell["noise"] for st in ("max", "avg"))
            cells.append(cell)
    return cells, problems


def write_csv(out, cells):
    path = os.path.join(out, "agreement.csv")
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["collective", "transport", "cadence", "bytes", "stat", "c_time_us", "psybench_time_us",
                    "ratio", "within", "c_rounds_us", "psybench_rounds_us"])
        for c in cells:
            for stat in ("max", "avg"):
                s = c[stat]
                w.writerow([c["collective"], c["transport"], c["cadence"], c["bytes"], stat,
                            fmt(s["c"], ".3f"), fmt(s["p"], ".3f"), fmt(s["ratio"], ".4f"),
                            "yes" if s["ok"] else "no",
                            ";".join(f"{v:.3f}" for v in s["c_rounds"]),
                            ";".join(f"{v:.3f}" for v in s["p_rounds"])])


def judge(cell):
    if cell["ok"]:
        return "yes"
    return "no (within noise)" if cell["in_noise"] else "**no**"


def markdown(cells, problems, tolerance):
    pct = round(tolerance * 100)
    lines = [
        "| transport | collective | cadence | size | iters | C max µs | psybench max µs | ratio | "
        "C avg µs | psybench avg µs | ratio | within ±%d%% | noise |" % pct,
        "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|",
    ]
    for c in cells:
        m, a = c["max"], c["avg"]
        lines.append(
            f"| {c['transport']} | {c['collective']} | {c['cadence']} | {human(c['bytes'])} | {c['iters']} | "
            f"{fmt(m['c'])} | {fmt(m['p'])} | {fmt(m['ratio'], '.2f')} | "
            f"{fmt(a['c'])} | {fmt(a['p'])} | {fmt(a['ratio'], '.2f')} | {judge(c)} | "
            f"{c['noise'] * 100:.0f}% |"
        )
    if problems:
        lines += ["", "Problems:", ""] + [f"- {p}" for p in problems]
    ok = sum(1 for c in cells if c["ok"])
    in_noise = sum(1 for c in cells if c["in_noise"])
    n_max = sum(1 for c in cells if c["max"]["ok"])
    n_avg = sum(1 for c in cells if c["avg"]["ok"])
    lines += [
        "",
        f"verdict: {ok} of {len(cells)} cells within ±{pct}% (max over ranks: {n_max}, mean over ranks: "
        f"{n_avg}){'; ' + str(len(problems)) + ' problem(s) listed above' if problems else ''}"
        f"{f'; cells outside but within their noise: {in_noise}' if in_noise else ''}",
    ]
    return "\n".join(lines)


def main(argv):
    args = argv[1:]
    tolerance = 0.15
    if "--tolerance" in args:
        i = args.index("--tolerance")
        try:
            tolerance = float(args[i + 1])
        except (IndexError, ValueError):
            print("crosscheck-summary: --tolerance needs a fraction, e.g. 0.15", file=sys.stderr)
            return 2
        del args[i:i + 2]
    if len(args) != 1:
        print(__doc__, file=sys.stderr)
        return 2
    out = args[0]
    result = summarise(out, tolerance)
    if result is None:
        return 2
    cells, problems = result
    write_csv(out, cells)
    print(markdown(cells, problems, tolerance))
    return 0 if cells and all(c["ok"] for c in cells) and not problems else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
