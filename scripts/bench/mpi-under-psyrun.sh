#!/usr/bin/env bash
# psybench's MPI backend (Open MPI) launched by psyrun against the same psybench launched by
# Open MPI's own mpirun: the same collectives, sizes and cadences, alternated in one session (the
# launcher that goes first alternates per round), medians over rounds. A cell agrees when
# psyrun's time / mpirun's is within ±15% (the cross-check's rule, scripts/bench/mpi-crosscheck.sh):
# the launcher serves the MPI (PMIx) and places the ranks; it must not change what MPI measures.
#
#   scripts/bench/mpi-under-psyrun.sh OUT_DIR [ROUNDS]     (ROUNDS default 5)
#
# SUMMARY_ONLY=1 writes the report again from OUT_DIR/raw without running anything.
#
# Both launchers bind each of the 2 ranks to its own core (mpirun's default at 2 ranks; psyrun's
# when the host has the cores). Writes OUT_DIR/raw/ (every run's JSON), OUT_DIR/runs.csv and
# OUT_DIR/README.md (machine, load, commands, table, verdict). Exits 1 if a cell disagrees.
set -euo pipefail
cd "$(dirname "$0")/../.."
# Refuses a dirty tree unless --allow-dirty (taken out of the arguments); sets REVISION.
. scripts/report/publish.sh
set -- "${ARGS[@]}"

if [ $# -lt 1 ]; then
  sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//' >&2
  exit 2
fi
out=$1
rounds=${2:-5}
sizes=8,64K,1M,16M
collectives=(allreduce broadcast allgather reducescatter)
cadences=(stream osu)

psyrun=$PWD/target/release/psyrun
psybench=$PWD/target/release/psybench
mkdir -p "$out/raw"
load_before=$(cut -d' ' -f1-3 /proc/loadavg)
launch() { # LAUNCHER: the command that starts 2 ranks, up to the program
  case $1 in
    mpirun) echo "mpirun.openmpi --allow-run-as-root -n 2" ;;
    psyrun) echo "$psyrun -n 2 --timeout 600" ;;
  esac
}

if [ -z "${SUMMARY_ONLY:-}" ]; then
cargo build --release -q -p psyrun -p psybench --features psybench/mpi

for round in $(seq 1 "$rounds"); do
  order=(mpirun psyrun)
  if [ $((round % 2)) -eq 0 ]; then order=(psyrun mpirun); fi
  for coll in "${collectives[@]}"; do
    for cadence in "${cadences[@]}"; do
      for who in "${order[@]}"; do
        json=$out/raw/$who-$coll-$cadence-$round.json
        # shellcheck disable=SC2046
        $(launch "$who") "$psybench" "$coll" --backend mpi --sizes "$sizes" \
          --cadence "$cadence" --json "$json" >/dev/null
      done
    done
  done
  echo "mpi-under-psyrun: round $round of $rounds done" >&2
done
echo "$load_before" >"$out/load-before"
cut -d' ' -f1-3 /proc/loadavg >"$out/load-after"
fi
load_before=$(cat "$out/load-before" 2>/dev/null || echo unknown)
load_after=$(cat "$out/load-after" 2>/dev/null || echo unknown)
python3 - "$out" "$rounds" "$load_before" "$load_after" "$(launch mpirun)" "$(launch psyrun)" <<'PY'
import glob, json, os, statistics, subprocess, sys
out, rounds, before, after, mpirun, psyrun = sys.argv[1:7]
times = {}
rows = []
for path in sorted(glob.glob(os.path.join(out, "raw", "*.json"))):
    who, coll, cadence, rnd = os.path.basename(path)[:-5].split("-")
    for r in json.load(open(path))["records"]:
        if r["wrong"] not in (0, None):
            sys.exit(f"{path}: {r['bytes']} B gave wrong results")
        times.setdefault((coll, cadence, r["bytes"], who), []).append(r["time_us_avg"])
        rows.append(f"{who},{coll},{cadence},{rnd},{r['bytes']},{r['time_us_avg']:.3f}")
with open(os.path.join(out, "runs.csv"), "w") as f:
    f.write("launcher,collective,cadence,round,bytes,time_us_avg\n" + "\n".join(rows) + "\n")
cells = sorted({k[:3] for k in times})
lines, bad, logs = [], 0, []
for coll, cadence, size in cells:
    m = statistics.median(times[(coll, cadence, size, "mpirun")])
    p = statistics.median(times[(coll, cadence, size, "psyrun")])
    ratio = p / m
    logs.append(__import__("math").log(ratio))
    ok = abs(ratio - 1) <= 0.15
    bad += not ok
    lo = lambda who: min(times[(coll, cadence, size, who)])
    hi = lambda who: max(times[(coll, cadence, size, who)])
    lines.append(f"| {coll} | {cadence} | {size} | {m:.2f} ({lo('mpirun'):.2f}–{hi('mpirun'):.2f}) "
                 f"| {p:.2f} ({lo('psyrun'):.2f}–{hi('psyrun'):.2f}) | {ratio:.3f} | {'yes' if ok else '**no**'} |")
cpu = subprocess.run(["sh", "-c", "lscpu | sed -n 's/^Model name: *//p'"], capture_output=True, text=True).stdout.strip()
ompi = subprocess.run(["sh", "-c", "mpirun.openmpi --version | head -n 1"], capture_output=True, text=True).stdout.strip()
with open(os.path.join(out, "README.md"), "w") as f:
    f.write(f"""# psybench's MPI backend under psyrun and under mpirun

psybench (`--backend mpi`, Open MPI) started by psyrun, which serves the ranks PMIx, against the
same psybench started by Open MPI's own mpirun: {rounds} rounds, alternated (the launcher that
goes first changes each round), median of each launcher's mean time per call (µs; in brackets
the range over rounds). A cell agrees when psyrun / mpirun is within ±15%.

- Command: `scripts/bench/mpi-under-psyrun.sh {out} {rounds}`
- Source revision: {os.environ['REVISION']}
- Launchers: `{mpirun} psybench COLL --backend mpi --sizes 8,64K,1M,16M --cadence C`, and
  `{psyrun.replace(os.getcwd() + '/', '')} psybench ...` (same options)
- Machine: {cpu}, {os.cpu_count()} CPUs; {ompi}; load average before {before}, after {after}

| collective | cadence | bytes | mpirun µs | psyrun µs | psyrun / mpirun | within ±15% |
|---|---|---:|---:|---:|---:|---|
""" + "\n".join(lines) + f"""

Verdict: {len(cells) - bad} of {len(cells)} cells agree{'' if bad == 0 else f'; {bad} do not (see the table)'}.
Geometric mean of psyrun / mpirun over every cell: {__import__("math").exp(sum(logs) / len(logs)):.3f}
(below 1: psyrun's runs were faster on the whole).
""")
print(f"mpi-under-psyrun: {len(cells) - bad} of {len(cells)} cells within ±15%")
sys.exit(1 if bad else 0)
PY
