#!/usr/bin/env python3
"""Merges psybench JSON reports (the rounds of several jobs) into one report and one CSV.

    scripts/report/merge-reports.py OUT.json OUT.csv IN.json...

The records of every input are kept, in the order given (repeated sizes are what `psybench
compare` and `psybench plot` take medians over). The metadata is the first input's, with the
backends of all inputs (native first), every input's command line (joined by " ; "), and the
highest load average any input recorded. Fits are dropped: they belong to one job's rows, and
`psybench compare` and `plot` do not need them. The CSV columns are psybench's own (the record
fields in order).
"""
import csv
import json
import sys


def main(argv):
    if len(argv) < 4:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    out_json, out_csv, inputs = argv[1], argv[2], argv[3:]
    reports = []
    for path in inputs:
        with open(path) as f:
            reports.append(json.load(f))
    meta = dict(reports[0]["meta"])
    backends = []
    for r in reports:
        for b in r["meta"].get("backends", []):
            if b not in backends:
                backends.append(b)
    backends.sort(key=lambda b: b != "native")
    meta["backends"] = backends
    commands = []
    for r in reports:
        if r["meta"]["command"] not in commands:
            commands.append(r["meta"]["command"])
    meta["command"] = " ; ".join(commands)
    loads = [r["meta"].get("load_average") for r in reports]
    loads = [x for x in loads if x is not None]
    meta["load_average"] = max(loads) if loads else None
    records = [rec for r in reports for rec in r["records"]]
    with open(out_json, "w") as f:
        json.dump({"meta": meta, "records": records, "fits": []}, f, indent=2)
        f.write("\n")
    columns = list(records[0].keys()) if records else []
    with open(out_csv, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(columns)
        for rec in records:
            w.writerow(["" if rec[c] is None else str(rec[c]).lower() if isinstance(rec[c], bool) else rec[c] for c in columns])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
