#!/usr/bin/env bash
# Flat against hierarchical collectives on the SSH test cluster: 4 hosts x 2 ranks
# (scripts/cluster/cluster.sh), psybench run by psyrun from inside host psyh1, every algorithm of a
# collective interleaved per size in one job, every result checked. Writes CSV, JSON, PNG, the
# tables and a README (machine, commands, load) into results/. Run as root.
#
#   scripts/bench/hier-cluster.sh [OUT_DIR] [SIZES]
set -euo pipefail
cd "$(dirname "$0")/../.."
# Refuses a dirty tree unless --allow-dirty (taken out of the arguments); sets REVISION.
. scripts/report/publish.sh
set -- "${ARGS[@]}"
out=${1:-results/hier-cluster}
sizes=${2:-8:16M}
scripts/setup.sh >/dev/null
cargo build --release -q -p psyrun -p psybench
bin=$PWD/target/release
dir=/tmp/psyne-hier-cluster
exec 9>/tmp/psyne-cluster.lock
flock -w 300 9 || { echo "hier-cluster.sh: the test cluster is in use" >&2; exit 1; }
trap 'scripts/cluster/cluster.sh down "$dir" >/dev/null 2>&1 || true' EXIT
scripts/cluster/cluster.sh up 4 "$dir" >/dev/null
mkdir -p "$out"
hosts=psyh1:2,psyh2:2,psyh3:2,psyh4:2
load_before=$(cut -d' ' -f1-3 /proc/loadavg)
# name, collective, algorithms, psyrun's --map-by: core (hosts filled in order: ranks 0-1 on psyh1, ...) or
# node (ranks dealt round-robin across hosts: every ring neighbour on another host).
runs=("allreduce allreduce auto,ring,rabenseifner,rd,hier core"
  "broadcast broadcast auto,binomial,pipeline,hier core"
  "allgather allgather auto,ring,hier core"
  "allreduce-by-node allreduce auto,ring,rabenseifner,rd,hier node"
  "allgather-by-node allgather auto,ring,hier node")
commands=()
for run in "${runs[@]}"; do
  read -r name coll algos map <<<"$run"
  cmd=(ip netns exec psyh1 "$bin/psyrun" --ssh-config "$dir/ssh_config" -H "$hosts" -n 8 --map-by "$map"
    "$bin/psybench" "$coll" --algo "$algos" --sizes "$sizes"
    --csv "$out/$name.csv" --json "$out/$name.json" --plot "$out/$name.png")
  commands+=("${cmd[*]}")
  "${cmd[@]}" | tee "$out/$name.txt"
done
load_after=$(cut -d' ' -f1-3 /proc/loadavg)
cpu=$(awk -F': ' '/^model name/ {print $2; exit}' /proc/cpuinfo)
{
  echo "# Flat vs hierarchical collectives, 4 SSH hosts x 2 ranks"
  echo
  echo "Made by \`scripts/bench/hier-cluster.sh\` on $(date -u +%Y-%m-%dT%H:%M:%SZ), source revision $REVISION."
  echo "Machine: $cpu, $(nproc) cores; load average before / after: $load_before / $load_after."
  echo "The 4 hosts are network namespaces of this one machine (\`scripts/cluster/cluster.sh\`), joined by veth pairs on a bridge: TCP between them runs at memory speed, and all 8 ranks share the same 2 cores. Ranks on one host talk over shared memory, across hosts over TCP. On real hosts the network is far slower than shared memory, which is where sending each host's data across once (hier) pays; here the gap is small, so read these as a check that hier works across real hosts and how its cost compares, not as the gain to expect on a cluster."
  echo
  echo "Commands:"
  echo
  for c in "${commands[@]}"; do echo "    $c"; done
  echo
  python3 scripts/report/hier-summary.py "$out"
  for run in "${runs[@]}"; do
    read -r name _ <<<"$run"
    echo
    echo "## $name: every row"
    echo
    echo '```'
    cat "$out/$name.txt"
    echo '```'
    echo
    echo "![$name]($name.png)"
  done
} > "$out/README.md"
echo "wrote $out"
