#!/usr/bin/env bash
# Launch time across hosts: `psyrun -H h1:2,...,hN:2 -n 2N true` against Open MPI's
# `mpirun --host ... -n 2N true` over the same SSH test cluster (scripts/cluster/cluster.sh), for
# N = 1, 2, 4, 8, 16, 32 hosts, both measured by hyperfine in the same run, plus psyrun's own
# report of when every host was ready and every rank running. Everything runs inside host psyh1;
# the cluster is torn down at the end (also on failure). Run as root.
#
#   scripts/bench/launch-hosts.sh [OUT_DIR] [HOST_COUNTS]
set -euo pipefail
cd "$(dirname "$0")/../.."
# Refuses a dirty tree unless --allow-dirty (taken out of the arguments); sets REVISION.
. scripts/report/publish.sh
set -- "${ARGS[@]}"
out=${1:-results/launch-multihost}
counts=${2:-1 2 4 8 16 32}
scripts/setup.sh >/dev/null
command -v hyperfine >/dev/null || { DEBIAN_FRONTEND=noninteractive apt-get install -y -qq hyperfine >/dev/null; }
cargo build --release -q -p psyrun
psyrun=$PWD/target/release/psyrun
dir=/tmp/psyne-launch-hosts
# One SSH test cluster at a time on this machine (its bridge and subnet are fixed).
exec 9>/tmp/psyne-cluster.lock
flock -w 300 9 || { echo "launch-hosts.sh: the test cluster is in use" >&2; exit 1; }
trap 'scripts/cluster/cluster.sh down "$dir" >/dev/null 2>&1 || true' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_plm_rsh_args="-F $dir/ssh_config"
mkdir -p "$out"
load_before=$(cut -d' ' -f1-3 /proc/loadavg)
: > "$out/notes.md"
echo "hosts,ranks,run,hosts_ready_ms,ranks_running_ms" > "$out/phases.csv"
for n in $counts; do
  scripts/cluster/cluster.sh up "$n" "$dir" >/dev/null
  hosts=$(seq -s, 1 "$n" | sed 's/\([0-9]*\)/psyh\1:2/g')
  ranks=$((2 * n))
  runs=$(( n >= 16 ? 5 : 10 ))
  commands=("ip netns exec psyh1 $psyrun --ssh-config $dir/ssh_config -H $hosts -n $ranks true")
  # mpirun has hung here (its ssh children left behind): probe it with a deadline first.
  if timeout -k 5 60 ip netns exec psyh1 mpirun --host "$hosts" -n "$ranks" true >/dev/null 2>&1; then
    commands+=("ip netns exec psyh1 mpirun --host $hosts -n $ranks true")
  else
    echo "- $n hosts: a probe \`mpirun --host ... -n $ranks true\` did not finish within 60 s; mpirun was left out of this row." >> "$out/notes.md"
  fi
  hyperfine -N --warmup 1 --runs "$runs" --export-json "$out/hosts-$n.json" --export-markdown "$out/hosts-$n.md" \
    "${commands[@]}" | tee "$out/hosts-$n.txt"
  for r in 1 2 3; do
    line=$(PSYRUN_REPORT_LAUNCH=1 ip netns exec psyh1 "$psyrun" --ssh-config "$dir/ssh_config" -H "$hosts" -n "$ranks" true 2>&1 | grep 'launch:')
    ready=$(echo "$line" | sed -n 's/.*ready after \([0-9.]*\) ms.*/\1/p')
    running=$(echo "$line" | sed -n 's/.*running after \([0-9.]*\) ms.*/\1/p')
    echo "$n,$ranks,$r,$ready,$running" >> "$out/phases.csv"
  done
  scripts/cluster/cluster.sh down "$dir" >/dev/null
done
load_after=$(cut -d' ' -f1-3 /proc/loadavg)
cpu=$(awk -F': ' '/^model name/ {print $2; exit}' /proc/cpuinfo)
{
  echo "# Launch time across SSH hosts: psyrun vs mpirun"
  echo
  echo "Made by \`scripts/bench/launch-hosts.sh\` on $(date -u +%Y-%m-%dT%H:%M:%SZ), source revision $REVISION."
  echo "Machine: $cpu, $(nproc) cores, $(mpirun --version 2>/dev/null | head -n 1), $(ssh -V 2>&1); load average before / after: $load_before / $load_after."
  echo "Every host is a network namespace of this machine with its own sshd (\`scripts/cluster/cluster.sh\`): all the hosts' sshd work runs on the same 2 cores as the launcher, so times grow with the host count here in a way they would not on real hosts."
  echo "CPU time of each launcher itself is in the JSON files (user + system); \`ESTIMATE.md\` uses it to estimate 1,024 hosts."
  echo "Wall time from start to exit of a job of \`true\` ranks, 2 per host, started from inside host psyh1 (hyperfine, 1 warm-up, then 10 runs of each command, 5 from 16 hosts on)."
  for n in $counts; do
    echo
    echo "## $n host(s), $((2 * n)) ranks"
    echo
    cat "$out/hosts-$n.md"
  done
  if [ -s "$out/notes.md" ]; then
    echo
    echo "## Notes"
    echo
    cat "$out/notes.md"
  fi
  echo
  echo "## psyrun's phases (\`PSYRUN_REPORT_LAUNCH=1\`), ms from psyrun's start"
  echo
  echo '```'
  cat "$out/phases.csv"
  echo '```'
} > "$out/README.md"
echo "wrote $out"
