#!/usr/bin/env bash
# Launch time of an MPI job: `psyrun -n 8 ./ring hello` (MPI_Init + MPI_Finalize, ring.c built
# with each MPI) against each MPI's own launcher starting the same binary, measured by hyperfine
# in alternating rounds (psyrun first in odd rounds, the own launcher first in even ones), so a
# drift in the machine's load falls on both. Writes CSV and markdown into OUT_DIR.
#
#   scripts/bench/launch-mpi.sh OUT_DIR [ROUNDS]     (ROUNDS default 5; each round 2 warm-ups + 10 runs)
#
# FLAVOURS="openmpi mpich4 mpich5 impi" (the default) chooses the MPIs; RANKS (default 8) the
# job size; PSYRUN a psyrun binary to time instead of target/release/psyrun built here. Before timing, each flavour's ring runs in full under psyrun and must print
# `ring ok rank R of N` for every rank: a psyrun that does not serve that MPI would time N worlds
# of one, so the script stops instead.
#
# OUT_DIR gets raw/FLAVOUR-ROUND.{csv,json} (hyperfine's exports), runs.csv (every round of every
# command), summary.csv (per flavour and launcher: the median, min and max over rounds of the
# mean wall time) and README.md (machine, load, versions, command, table).
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
ranks=${RANKS:-8}
read -r -a flavours <<<"${FLAVOURS:-openmpi mpich4 mpich5 impi}"

scripts/setup.sh >/dev/null
if [ -n "${PSYRUN:-}" ]; then
  psyrun=$PSYRUN
else
  cargo build --release -q -p psyrun
  psyrun=$PWD/target/release/psyrun
fi
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

mkdir -p "$out/raw"
bindir=$PWD/target/release/mpi-programs
mkdir -p "$bindir"
src=launcher/tests/mpi_programs/ring.c

# compile FLAVOUR OUT: ring.c built with FLAVOUR (as launcher/tests/common/mpi.rs does).
compile() {
  case $1 in
    openmpi) mpicc.openmpi -O2 -o "$2" "$src" ;;
    mpich4) mpicc.mpich -O2 -o "$2" "$src" ;;
    mpich5) /opt/psyne-mpich/bin/mpicc -O2 -o "$2" "$src" ;;
    impi) gcc -O2 -I/opt/psyne-impi/include -L/opt/psyne-impi/lib -Wl,-rpath,/opt/psyne-impi/lib \
      -o "$2" "$src" -lmpi ;;
    *) echo "launch-mpi.sh: unknown flavour '$1' (openmpi, mpich4, mpich5, impi)" >&2; exit 2 ;;
  esac
}

# own FLAVOUR: the flavour's own launcher, up to the program.
own() {
  case $1 in
    openmpi) echo "mpirun.openmpi --allow-run-as-root --oversubscribe -n $ranks" ;;
    mpich4) echo "mpiexec.mpich -n $ranks" ;;
    mpich5) echo "/opt/psyne-mpich/bin/mpiexec -n $ranks" ;;
    impi) echo "/opt/psyne-impi/bin/mpiexec -n $ranks" ;;
  esac
}

# version FLAVOUR: the MPI library's version line.
version() {
  case $1 in
    openmpi) mpirun.openmpi --version 2>/dev/null | head -n 1 ;;
    mpich4) mpichversion | head -n 1 ;;
    mpich5) /opt/psyne-mpich/bin/mpichversion | head -n 1 ;;
    impi) LD_LIBRARY_PATH=/opt/psyne-impi/lib /opt/psyne-impi/bin/mpiexec --version | head -n 1 ;;
  esac
}

echo "flavour,launcher,round,mean_s,stddev_s,median_s,min_s,max_s" >"$out/runs.csv"
declare -A load_before load_after
for f in "${flavours[@]}"; do
  bin=$bindir/ring-$f
  compile "$f" "$bin"
  if [ "$f" = impi ]; then
    export LD_LIBRARY_PATH=/opt/psyne-impi/lib
  else
    unset LD_LIBRARY_PATH
  fi
  # A full ring under psyrun first: one world of $ranks, or no timing.
  check=$("$psyrun" --timeout 120 -n "$ranks" "$bin" 2>&1) || {
    echo "launch-mpi.sh: psyrun -n $ranks ring ($f) failed:" >&2
    echo "$check" >&2
    exit 1
  }
  got=$(grep -c "^ring ok rank [0-9]* of $ranks " <<<"$check" || true)
  if [ "$got" -ne "$ranks" ]; then
    echo "launch-mpi.sh: under psyrun, $f's ring printed $got of $ranks 'ring ok rank R of $ranks' lines: psyrun does not serve $f's MPI; not timing it" >&2
    echo "$check" >&2
    exit 1
  fi
  psy_cmd="$psyrun --timeout 120 -n $ranks $bin hello"
  own_cmd="$(own "$f") $bin hello"
  load_before[$f]=$(cut -d' ' -f1-3 /proc/loadavg)
  for r in $(seq 1 "$rounds"); do
    if [ $((r % 2)) -eq 1 ]; then
      order=(--command-name psyrun "$psy_cmd" --command-name own "$own_cmd")
    else
      order=(--command-name own "$own_cmd" --command-name psyrun "$psy_cmd")
    fi
    hyperfine -N --style basic --warmup 2 --runs 10 \
      --export-csv "$out/raw/$f-$r.csv" --export-json "$out/raw/$f-$r.json" "${order[@]}" \
      >"$out/raw/$f-$r.txt"
    # hyperfine's CSV: command,mean,stddev,median,user,system,min,max
    awk -F, -v f="$f" -v r="$r" 'NR > 1 { printf "%s,%s,%s,%s,%s,%s,%s,%s\n", f, $1, r, $2, $3, $4, $7, $8 }' \
      "$out/raw/$f-$r.csv" >>"$out/runs.csv"
  done
  load_after[$f]=$(cut -d' ' -f1-3 /proc/loadavg)
done
unset LD_LIBRARY_PATH

# Per flavour and launcher, over the rounds' means: median, min, max; and psyrun / own.
python3 - "$out/runs.csv" "$out/summary.csv" <<'EOF'
import csv, statistics, sys
rows = list(csv.DictReader(open(sys.argv[1])))
means = {}
for r in rows:
    means.setdefault((r["flavour"], r["launcher"]), []).append(float(r["mean_s"]))
with open(sys.argv[2], "w", newline="") as f:
    w = csv.writer(f)
    w.writerow(["flavour", "launcher", "rounds", "median_of_means_s", "min_mean_s", "max_mean_s", "psyrun_over_own"])
    for (flavour, launcher), m in means.items():
        own = means.get((flavour, "own"))
        ratio = statistics.median(m) / statistics.median(own) if own else float("nan")
        w.writerow([flavour, launcher, len(m), f"{statistics.median(m):.4f}", f"{min(m):.4f}",
                    f"{max(m):.4f}", f"{ratio:.2f}"])
EOF

cpu=$(awk -F': ' '/^model name/ {print $2; exit}' /proc/cpuinfo)
{
  echo "# Launch time of an MPI job: psyrun vs each MPI's own launcher, one host"
  echo
  echo "Made by \`scripts/bench/launch-mpi.sh $out $rounds\` on $(date -u +%Y-%m-%dT%H:%M:%SZ), source revision $REVISION."
  echo "Machine: $cpu, $(nproc) cores, $(awk '/MemTotal/ {printf "%.0f GiB", $2 / 1048576}' /proc/meminfo), $(uname -sr)."
  echo "Wall time from start to exit of \`LAUNCHER -n $ranks ring hello\` (MPI_Init and MPI_Finalize only), $rounds rounds per MPI, each hyperfine with 2 warm-ups then 10 runs of each command; the two commands alternate which goes first. psyrun: \`psyrun --timeout 120 -n $ranks\` (the interface detected from the program)."
  echo
  echo "| MPI | version | load before / after | own launcher |"
  echo "|---|---|---|---|"
  for f in "${flavours[@]}"; do
    echo "| $f | $(version "$f" | tr -s " \t" " ") | ${load_before[$f]} / ${load_after[$f]} | \`$(own "$f")\` |"
  done
  echo
  echo "Median over the rounds of each round's mean (min and max of those means):"
  echo
  echo "| MPI | launcher | median of means (s) | min (s) | max (s) | psyrun / own |"
  echo "|---|---|---|---|---|---|"
  tail -n +2 "$out/summary.csv" | awk -F, '{ printf "| %s | %s | %s | %s | %s | %s |\n", $1, $2, $4, $5, $6, $7 }'
} >"$out/README.md"
cat "$out/README.md"
echo "wrote $out"
