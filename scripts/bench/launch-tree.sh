#!/usr/bin/env bash
# Tree launch against the flat one (issue 19): `psyrun -H h1:2,...,hN:2 -n 2N true` over the SSH
# test cluster (scripts/cluster/cluster.sh) with `--tree-width` set so that psyrun reaches every host
# itself (flat) or only K of them (a tree), for N = 16 and 32 hosts by default. The variants are
# alternated, their order rotating each round; each run records the wall time, psyrun's own CPU
# time (user + system, from wait4) and psyrun's report of when every host was ready and every
# rank running (`PSYRUN_REPORT_LAUNCH`). Everything runs inside host psyh1; the cluster is torn
# down at the end, also on failure. Run as root.
#
#   scripts/bench/launch-tree.sh [OUT_DIR] [HOST_COUNTS] [WIDTHS]
#   e.g. scripts/bench/launch-tree.sh results/launch-tree "16 32" "4 8"     (ROUNDS, default 5)
set -euo pipefail
cd "$(dirname "$0")/../.."
# Refuses a dirty tree unless --allow-dirty (taken out of the arguments); sets REVISION.
. scripts/report/publish.sh
set -- "${ARGS[@]}"
out=${1:-results/launch-tree}
counts=${2:-16 32}
widths=${3:-4 8}
rounds=${ROUNDS:-5}
scripts/setup.sh >/dev/null
cargo build --release -q -p psyrun
psyrun=$PWD/target/release/psyrun
dir=/tmp/psyne-launch-tree
# One SSH test cluster at a time on this machine (its bridge and subnet are fixed).
exec 9>/tmp/psyne-cluster.lock
flock -w 300 9 || { echo "launch-tree.sh: the test cluster is in use" >&2; exit 1; }
trap 'scripts/cluster/cluster.sh down "$dir" >/dev/null 2>&1 || true' EXIT
mkdir -p "$out"
{
  echo "# $(date -u +%FT%TZ) source $REVISION"
  echo "# $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(nproc) cores"
  echo "# load before: $(cut -d' ' -f1-3 /proc/loadavg)"
} > "$out/run.txt"
echo "hosts,variant,width,round,wall_s,cpu_s,ready_ms,running_ms,exit" > "$out/runs.csv"
for n in $counts; do
  scripts/cluster/cluster.sh up "$n" "$dir" >/dev/null
  hosts=$(seq -s, 1 "$n" | sed 's/\([0-9]*\)/psyh\1:2/g')
  variants="flat:100000"
  for w in $widths; do variants="$variants tree:$w"; done
  # One unmeasured run of each, so every host's page cache holds psyrun.
  for v in $variants; do
    ip netns exec psyh1 "$psyrun" --ssh-config "$dir/ssh_config" --tree-width "${v#*:}" \
      -H "$hosts" -n $((2 * n)) true >/dev/null 2>&1 || true
  done
  ip netns exec psyh1 python3 scripts/bench/launch-tree.py "$psyrun" "$dir/ssh_config" "$hosts" \
    $((2 * n)) "$rounds" $variants >> "$out/runs.csv"
  scripts/cluster/cluster.sh down "$dir" >/dev/null
done
echo "# load after: $(cut -d' ' -f1-3 /proc/loadavg)" >> "$out/run.txt"
python3 scripts/report/launch-tree-summary.py "$out/runs.csv" | tee "$out/summary.md"
