#!/usr/bin/env bash
# psyne's TCP path against Open MPI's, all-reduce on 2 ranks over loopback, in ONE mpirun job
# (the two backends interleaved per size, so both see the same machine conditions), plus this
# host's raw memory-copy and loopback-TCP bandwidth measured in the same run. Writes CSV, JSON, PNG,
# the tables and a README describing the machine into results/ (or the directory given).
#
#   scripts/mpi-compare.sh [OUT_DIR] [SIZES]      e.g. scripts/mpi-compare.sh /tmp/cmp 8:64M
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-results/allreduce-tcp-psyne-vs-openmpi}
sizes=${2:-8:256M}

scripts/setup.sh >/dev/null
cargo build --release -q -p psybench --features mpi
bench=target/release/psybench
mkdir -p "$out"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

load_before=$(cut -d' ' -f1-3 /proc/loadavg)
"$bench" peak | tee "$out/peak.txt"
tcp_peak=$(awk '/^loopback TCP:/ {print $3}' "$out/peak.txt")

# Open MPI forced onto TCP over loopback (pml ob1, btl tcp+self). op ^avx: Open MPI 4.1's AVX
# reduction component saturates 8/16-bit integer sums (open-mpi/ompi#8045); f32 is unaffected.
cmd=(mpirun --oversubscribe --mca pml ob1 --mca btl tcp,self --mca btl_tcp_if_include lo --mca op ^avx
  -n 2 "$bench" allreduce --backend native,mpi --sizes "$sizes" --peak "$tcp_peak"
  --csv "$out/allreduce.csv" --json "$out/allreduce.json" --plot "$out/allreduce.png")
"${cmd[@]}" | tee "$out/table.txt"
"$bench" compare "$out/allreduce.json" | tee "$out/compare.txt"
load_after=$(cut -d' ' -f1-3 /proc/loadavg)

cpu=$(awk -F': ' '/^model name/ {print $2; exit}' /proc/cpuinfo)
mem=$(awk '/^MemTotal/ {printf "%.1f GiB", $2 / 1048576}' /proc/meminfo)
ompi=$(mpirun --version 2>/dev/null | head -n 1)
{
  echo "# All-reduce over loopback TCP: psyne vs Open MPI, 2 ranks"
  echo
  echo "Made by \`scripts/mpi-compare.sh\` on $(date -u +%Y-%m-%dT%H:%M:%SZ), source revision $(git describe --always --dirty 2>/dev/null || echo unknown)."
  echo
  echo "| machine | |"
  echo "|---|---|"
  echo "| CPU | $cpu, $(nproc) cores |"
  echo "| memory | $mem |"
  echo "| kernel | $(uname -r) |"
  echo "| MPI | $ompi |"
  echo "| load average before / after | $load_before / $load_after |"
  echo
  echo "Command (both backends in one job, interleaved per size; f32 sum; every result checked):"
  echo
  echo '```'
  echo "${cmd[*]}"
  echo '```'
  echo
  echo "Raw bandwidth of this host, same run (\`psybench peak\`):"
  echo
  echo '```'
  cat "$out/peak.txt"
  echo '```'
  echo
  echo "Ratios per size (\`psybench compare allreduce.json\`):"
  echo
  echo '```'
  cat "$out/compare.txt"
  echo '```'
  echo
  echo "Full table: \`table.txt\`; rows: \`allreduce.csv\`, \`allreduce.json\`; plot: \`allreduce.png\`."
} > "$out/README.md"
echo "wrote $out"
