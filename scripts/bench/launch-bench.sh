#!/usr/bin/env bash
# Launch overhead on this host: wall time of `psyrun -n N true` against `mpirun -n N true`, both
# measured by hyperfine in the same run (with warm-up), written to results/.
#
#   scripts/bench/launch-bench.sh [OUT_DIR]
set -euo pipefail
cd "$(dirname "$0")/../.."
# Refuses a dirty tree unless --allow-dirty (taken out of the arguments); sets REVISION.
. scripts/report/publish.sh
set -- "${ARGS[@]}"
out=${1:-results/launch-local}
scripts/setup.sh >/dev/null
command -v hyperfine >/dev/null || { DEBIAN_FRONTEND=noninteractive apt-get install -y -qq hyperfine >/dev/null; }
cargo build --release -q -p psyrun
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
mkdir -p "$out"
load_before=$(cut -d' ' -f1-3 /proc/loadavg)
for n in 2 8; do
  hyperfine -N --warmup 3 --runs 30 --export-json "$out/true-$n.json" --export-markdown "$out/true-$n.md" \
    "target/release/psyrun -n $n true" "mpirun --oversubscribe -n $n true" | tee "$out/true-$n.txt"
done
load_after=$(cut -d' ' -f1-3 /proc/loadavg)
cpu=$(awk -F': ' '/^model name/ {print $2; exit}' /proc/cpuinfo)
{
  echo "# Launch overhead: psyrun vs mpirun on one host"
  echo
  echo "Made by \`scripts/bench/launch-bench.sh\` on $(date -u +%Y-%m-%dT%H:%M:%SZ), source revision $REVISION."
  echo "Machine: $cpu, $(nproc) cores, $(mpirun --version 2>/dev/null | head -n 1); load average before / after: $load_before / $load_after."
  echo "Wall time from start to exit of the whole job of \`true\` ranks (hyperfine, 3 warm-ups then 30 runs of each command, one command after the other)."
  for n in 2 8; do
    echo
    echo "## $n ranks"
    echo
    cat "$out/true-$n.md"
  done
} > "$out/README.md"
echo "wrote $out"
