#!/usr/bin/env bash
# Prints the Markdown table that heads a benchmark report: CPU and cores, memory, kernel, the MPI
# library, and the load average before and after the run.
#
#   scripts/machine-table.sh "LOAD_BEFORE" "LOAD_AFTER"
set -euo pipefail
cpu=$(awk -F': ' '/^model name/ {print $2; exit}' /proc/cpuinfo)
mem=$(awk '/^MemTotal/ {printf "%.1f GiB", $2 / 1048576}' /proc/meminfo)
mpi=$(mpirun --version 2>/dev/null | head -n 1 || true)
echo "| machine | |"
echo "|---|---|"
echo "| CPU | $cpu, $(nproc) cores |"
echo "| memory | $mem |"
echo "| kernel | $(uname -r) |"
echo "| MPI | ${mpi:-none found} |"
echo "| load average before / after | ${1:-?} / ${2:-?} |"
