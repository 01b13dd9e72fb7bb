#!/usr/bin/env bash
# A Slurm test cluster on this machine, for testing psyrun inside salloc/sbatch: one host on
# loopback, or several nodes, one per network namespace of scripts/cluster/cluster.sh.
#
#   scripts/cluster/slurm.sh up   [DIR]        configure and start munged, slurmctld and slurmd on this
#                                      host; wait until the node is idle. Prints
#                                      `export SLURM_CONF=DIR/slurm.conf`.
#   scripts/cluster/slurm.sh up-nodes N [DIR]  a cluster of N nodes psyh1..psyhN: the namespaces, bridge
#                                      and addresses of `scripts/cluster/cluster.sh up N DIR/net`, one
#                                      slurmd in each namespace (its own UTS host name psyhI,
#                                      NodeAddr 10.213.0.(10+I)), slurmctld and munged in the root
#                                      namespace (slurmctld reached at the bridge's 10.213.0.1);
#                                      waits until every node is idle.
#   scripts/cluster/slurm.sh down [DIR]        stop exactly the daemons `up`/`up-nodes` started (by the
#                                      pids in DIR's pid files), whatever still runs with this
#                                      cluster's SLURM_CONF, remove the namespaces it made (via
#                                      cluster.sh down), then remove DIR.
#   scripts/cluster/slurm.sh status [DIR]      exit 0 if the cluster in DIR is up and every node answers.
#   scripts/cluster/slurm.sh run DIR CMD...    run a client command (salloc, sbatch, srun, sinfo, ...) of
#                                      the cluster in DIR: SLURM_CONF set and, for a cluster of
#                                      nodes, /etc/hosts naming them (DIR/hosts, bind-mounted in a
#                                      private mount namespace), so psyrun can resolve the nodes.
#
# DIR defaults to ${TMPDIR:-/tmp}/psyne-slurm (psyne-slurm-nodes for up-nodes). Everything lives
# there: the munge key, socket, pid, log and seed files; slurm.conf and mpi.conf; the controller's
# state, each node's spool, TmpFS, logs and pid files. Nothing is written under /etc, /run or
# /var. Every client command needs SLURM_CONF=DIR/slurm.conf in its environment (the daemons get
# it here). One host: the node is this host's `hostname -s` with NodeAddr 127.0.0.1 and as many
# CPUs as `nproc`; the controller is reached at 127.0.0.1 too, so daemons and clients talk only on
# loopback. Nodes: each has `nproc` CPUs; daemons and clients talk only over the bridge psybr0
# (every node address must route through it, or the script stops and tears down). Each slurmd
# runs under `ip netns exec psyhI unshare --uts --mount`: its own host name and its own
# /etc/hosts (DIR/hosts), which its job steps inherit. No cgroups, no systemd, no accounting:
# ProctrackType=proctrack/pgid, TaskPlugin=task/none. MpiDefault=none; `srun --mpi=pmix` works
# (mpi.conf; each node's PMIx directories are per node). Runs as root (SlurmUser=root).
#
# `up` and `up-nodes` are idempotent (an already running cluster in DIR is left alone) and tear
# down what they started if any step fails. Every wait is bounded. The ports
# (SLURM_PORT_CTLD/SLURM_PORT_SLURMD, default 16817/16818 for one host, 16827/16828 for nodes)
# can be changed through the environment. The nodes' names, bridge and subnet are fixed (those
# of cluster.sh): one cluster of nodes (or SSH test cluster) on the machine at a time.
set -euo pipefail

cmd=${1:-}
nodes_n=
case $cmd in
  up-nodes)
    nodes_n=${2:-}
    [[ $nodes_n =~ ^[0-9]+$ ]] && [ "$nodes_n" -ge 1 ] && [ "$nodes_n" -le 50 ] ||
      { echo "slurm.sh: up-nodes N [DIR]: N must be a number from 1 to 50" >&2; exit 2; }
    dir=${3:-${TMPDIR:-/tmp}/psyne-slurm-nodes}
    ;;
  run)
    dir=${2:-}
    [ -n "$dir" ] && [ $# -ge 3 ] || { echo "slurm.sh: usage: run DIR CMD [ARGS...]" >&2; exit 2; }
    shift 2
    ;;
  *) dir=${2:-${TMPDIR:-/tmp}/psyne-slurm} ;;
esac
dir=${dir%/}
node=$(hostname -s)
wait_secs=${SLURM_UP_TIMEOUT:-60}
# The nodes of a cluster of nodes (as cluster.sh names and addresses them), and its bridge.
NODE_PREFIX=psyh
BRIDGE=psybr0
SUBNET=10.213.0
CLUSTER_SH=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/cluster.sh
if [ -n "$nodes_n" ] || [ -f "$dir/nodes" ]; then
  ctld_port=${SLURM_PORT_CTLD:-16827}
  slurmd_port=${SLURM_PORT_SLURMD:-16828}
else
  ctld_port=${SLURM_PORT_CTLD:-16817}
  slurmd_port=${SLURM_PORT_SLURMD:-16818}
fi

die() { echo "slurm.sh: $*" >&2; exit 1; }
log() { echo "slurm.sh: $*" >&2; }

usage() { die "usage: $0 up [DIR] | up-nodes N [DIR] | down [DIR] | status [DIR] | run DIR CMD..."; }

# The pid in pid file $1 if that process is alive and its command name starts with $2.
live_pid() {
  local file=$1 name=$2 pid comm
  [ -s "$file" ] || return 1
  pid=$(tr -dc '0-9' <"$file")
  [ -n "$pid" ] || return 1
  comm=$(cat "/proc/$pid/comm" 2>/dev/null) || return 1
  [[ $comm == "$name"* ]] || return 1
  echo "$pid"
}

# Stops the daemons (command name $1) whose pids are in files $2...: SIGTERM to all of them at
# once, up to 15 s, then SIGKILL to those still there.
stop_daemons() {
  local name=$1 file pid i left
  shift
  local pids=()
  for file in "$@"; do
    pid=$(live_pid "$file" "$name") || continue
    kill -TERM "$pid" 2>/dev/null && pids+=("$pid")
  done
  [ ${#pids[@]} -gt 0 ] || return 0
  for ((i = 0; i < 150; i++)); do
    left=()
    for pid in "${pids[@]}"; do
      kill -0 "$pid" 2>/dev/null && left+=("$pid")
    done
    [ ${#left[@]} -eq 0 ] && { log "stopped $name (${pids[*]})"; return 0; }
    sleep 0.1
  done
  log "$name (${left[*]}) ignored SIGTERM for 15 s; SIGKILL"
  kill -KILL "${left[@]}" 2>/dev/null || true
  for ((i = 0; i < 50; i++)); do
    pids=()
    for pid in "${left[@]}"; do
      kill -0 "$pid" 2>/dev/null && pids+=("$pid")
    done
    [ ${#pids[@]} -eq 0 ] && return 0
    sleep 0.1
  done
  log "$name (${pids[*]}) still there after SIGKILL"
}

# The helper daemons of this cluster whose command name starts with $1 (default: slurmstepd of
# its jobs and slurmctld's slurmscriptd): those whose environment names our slurm.conf (they
# daemonize, so their parents say nothing).
our_stepds() {
  local p comm
  for p in /proc/[0-9]*; do
    read -r comm 2>/dev/null <"$p/comm" || continue
    case $comm in
      slurmstepd* | slurmscriptd*) ;;
      *) continue ;;
    esac
    [[ $comm == ${1:-slurm}* ]] || continue
    if { tr "\0" "\n" <"$p/environ"; } 2>/dev/null | grep -qxF "SLURM_CONF=$dir/slurm.conf"; then
      echo "${p#/proc/}"
    fi
  done
}

# Processes carrying this cluster's SLURM_CONF in their environment (salloc, srun, psyrun, its
# agents and ranks, job scripts: everything the cluster or its clients started), other than the
# daemons, this script, its ancestors and its descendants.
our_procs() {
  local p pid comm q
  for p in /proc/[0-9]*; do
    pid=${p#/proc/}
    read -r comm 2>/dev/null <"$p/comm" || continue
    case $comm in
      munged | slurmctld | slurmd | slurmscriptd) continue ;;
    esac
    { tr "\0" "\n" <"$p/environ"; } 2>/dev/null | grep -qxF "SLURM_CONF=$dir/slurm.conf" || continue
    # Not this script, nor one of its ancestors or descendants.
    q=$pid
    while [ -n "$q" ] && [ "$q" -gt 1 ] && [ "$q" != $$ ]; do
      q=$(awk '/^PPid:/ { print $2 }' "/proc/$q/status" 2>/dev/null) || q=
    done
    [ "$q" = $$ ] && continue
    for q in $(ancestors); do [ "$q" = "$pid" ] && continue 2; done
    echo "$pid"
  done
}

# This script's pid and its ancestors' pids.
ancestors() {
  local q=$$
  while [ -n "$q" ] && [ "$q" -gt 1 ]; do
    echo "$q"
    q=$(awk '/^PPid:/ { print $2 }' "/proc/$q/status" 2>/dev/null) || q=
  done
}

# The node names of the cluster in DIR: psyh1..psyhN for a cluster of nodes, else this host.
node_names() {
  if [ -f "$dir/nodes" ]; then cat "$dir/nodes"; else echo "$node"; fi
}

# The pid file of node $1's slurmd.
slurmd_pidfile() {
  if [ -f "$dir/nodes" ]; then echo "$dir/slurmd-$1.pid"; else echo "$dir/slurmd.pid"; fi
}

is_up() {
  local nd want
  [ -f "$dir/slurm.conf" ] || return 1
  live_pid "$dir/munged.pid" munged >/dev/null || return 1
  live_pid "$dir/slurmctld.pid" slurmctld >/dev/null || return 1
  want=0
  for nd in $(node_names); do
    live_pid "$(slurmd_pidfile "$nd")" slurmd >/dev/null || return 1
    want=$((want + 1))
  done
  [ "$(SLURM_CONF=$dir/slurm.conf timeout 10 sinfo -h -N -o '%N %T' 2>/dev/null |
    grep -Ec ' (idle|mixed|allocated)$')" -eq "$want" ]
}

down() {
  local p i nd
  if [ -f "$dir/slurm.conf" ] && live_pid "$dir/slurmctld.pid" slurmctld >/dev/null; then
    # Cancel whatever still runs so the step daemons end on their own.
    SLURM_CONF=$dir/slurm.conf timeout 10 scancel --full --quiet --partition=debug 2>/dev/null || true
    for ((i = 0; i < 100; i++)); do
      [ -z "$(our_stepds slurmstepd)" ] && break
      sleep 0.1
    done
  fi
  local files=()
  for nd in $(node_names 2>/dev/null); do
    files+=("$(slurmd_pidfile "$nd")")
  done
  # slurmd and slurmctld take a second or two each to end after SIGTERM: stopped side by side.
  stop_daemons slurmd "${files[@]}" &
  local stopping_slurmd=$!
  stop_daemons slurmctld "$dir/slurmctld.pid"
  wait "$stopping_slurmd" || true
  for ((i = 0; i < 50; i++)); do
    [ -z "$(our_stepds)" ] && break
    sleep 0.1
  done
  for p in $(our_stepds); do
    log "killing leftover $(cat "/proc/$p/comm" 2>/dev/null) $p"
    kill -KILL "$p" 2>/dev/null || true
  done
  # Whatever the cluster's jobs or clients left (a step daemon killed above leaves its tasks).
  for p in $(our_procs); do
    log "killing leftover $(cat "/proc/$p/comm" 2>/dev/null) $p (SLURM_CONF=$dir/slurm.conf)"
    kill -KILL "$p" 2>/dev/null || true
  done
  stop_daemons munged "$dir/munged.pid"
  # The namespaces, only if this cluster made them (cluster.sh makes DIR/net only once it knows
  # no other test cluster is up).
  if [ -d "$dir/net" ]; then
    "$CLUSTER_SH" down "$dir/net" >&2 || log "cluster.sh down $dir/net failed"
  fi
  # Only remove a directory this script made (it holds slurm.conf or the marker).
  if [ -d "$dir" ]; then
    if [ -f "$dir/.psyne-slurm" ] || [ -f "$dir/slurm.conf" ]; then
      rm -rf "$dir"
    else
      log "not removing $dir: not made by this script"
    fi
  fi
}

# Fails unless run as root with every program the cluster needs.
need() {
  local b
  [ "$(id -u)" -eq 0 ] || die "needs root (the daemons run as root, SlurmUser=root)"
  for b in munged mungekey slurmctld slurmd sinfo srun salloc sbatch scancel "$@"; do
    command -v "$b" >/dev/null 2>&1 || die "$b not found; run scripts/setup.sh (packages slurmctld slurmd munge slurm-client iproute2 util-linux)"
  done
}

# From here until `disarm`, any failure or signal tears down what was started.
arm() {
  trap 'log "failed; tearing down"; show_logs; down' EXIT
  trap 'exit 143' TERM
  trap 'exit 130' INT
}

disarm() {
  trap - EXIT TERM INT
}

# Makes DIR and starts munged with its own key, socket, pid, log and seed, all in DIR.
start_munge() {
  mkdir -p "$dir"
  chmod 0711 "$dir"
  touch "$dir/.psyne-slurm"
  mkdir -p "$dir/state" "$dir/spool" "$dir/munge"
  chmod 0700 "$dir/munge"
  mungekey --create --keyfile="$dir/munge/munge.key" --bits=1024 >/dev/null 2>&1 ||
    dd if=/dev/urandom of="$dir/munge/munge.key" bs=1024 count=1 status=none
  chmod 0400 "$dir/munge/munge.key"
  munged --force \
    --socket="$dir/munge/munge.socket" \
    --key-file="$dir/munge/munge.key" \
    --pid-file="$dir/munged.pid" \
    --log-file="$dir/munged.log" \
    --seed-file="$dir/munge/munged.seed"
  wait_for "munged's socket" test -S "$dir/munge/munge.socket"
  wait_for "munged's pid file" live_pid "$dir/munged.pid" munged
}

# The part of slurm.conf both kinds of cluster share; $1 is the controller's address.
common_conf() {
  cat <<EOF
ClusterName=psyne
SlurmctldHost=$node($1)
SlurmctldPort=$ctld_port
SlurmdPort=$slurmd_port
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$dir/munge/munge.socket
StateSaveLocation=$dir/state
SlurmctldPidFile=$dir/slurmctld.pid
SlurmctldLogFile=$dir/slurmctld.log
SlurmctldDebug=info
SlurmdDebug=info
ProctrackType=proctrack/pgid
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
MpiDefault=none
ReturnToService=2
InactiveLimit=0
KillWait=5
MinJobAge=60
EOF
}

# Says that the cluster in DIR is up already, and how to use it.
already_up() {
  log "already up in $dir"
  echo "export SLURM_CONF=$dir/slurm.conf"
}

# Leftovers of an earlier, half-finished run in the same DIR go first; then munge, with the
# failure trap armed.
fresh_start() {
  down
  arm
  start_munge
}

up() {
  need
  if is_up; then
    already_up
    return 0
  fi
  fresh_start

  local cpus
  cpus=$(nproc)
  {
    echo "# Written by psyne's scripts/cluster/slurm.sh: a one-host test cluster, everything under $dir."
    common_conf 127.0.0.1
    cat <<EOF
SlurmdSpoolDir=$dir/spool
SlurmdPidFile=$dir/slurmd.pid
SlurmdLogFile=$dir/slurmd.log
SlurmctldTimeout=30
SlurmdTimeout=30
NodeName=$node NodeAddr=127.0.0.1 NodeHostname=$node CPUs=$cpus State=UNKNOWN
PartitionName=debug Nodes=$node Default=YES MaxTime=INFINITE State=UP OverSubscribe=NO
EOF
  } >"$dir/slurm.conf"
  export SLURM_CONF=$dir/slurm.conf
  # -i: ignore any saved state (a fresh cluster each time).
  slurmctld -i
  wait_for "slurmctld's pid file" live_pid "$dir/slurmctld.pid" slurmctld
  slurmd -N "$node"
  wait_for "slurmd's pid file" live_pid "$dir/slurmd.pid" slurmd
  wait_for "node $node to be idle" nodes_idle 1
  disarm
  log "up: node $node, $cpus CPUs, partition debug, in $dir"
  echo "export SLURM_CONF=$dir/slurm.conf"
}

up_nodes() {
  local n=$nodes_n i ns addr cpus
  need ip unshare nsenter
  if [ -f "$dir/nodes" ] && [ "$(wc -l <"$dir/nodes")" -eq "$n" ] && is_up; then
    already_up
    return 0
  fi
  fresh_start
  # The hosts: namespaces psyh1..psyhN on the bridge, each with its own address (and an sshd,
  # unused here). cluster.sh refuses if another test cluster is up.
  "$CLUSTER_SH" up "$n" "$dir/net" >&2
  for ((i = 1; i <= n; i++)); do
    addr=$SUBNET.$((10 + i))
    ip route get "$addr" | grep -q "dev $BRIDGE" ||
      die "$addr does not route through $BRIDGE ($(ip route get "$addr")); refusing to use it"
  done
  cp /etc/hosts "$dir/hosts"
  : >"$dir/nodes.tmp"
  for ((i = 1; i <= n; i++)); do
    echo "$SUBNET.$((10 + i)) $NODE_PREFIX$i" >>"$dir/hosts"
    echo "$NODE_PREFIX$i" >>"$dir/nodes.tmp"
    mkdir -p "$dir/spool/$NODE_PREFIX$i" "$dir/tmp/$NODE_PREFIX$i"
  done
  mv "$dir/nodes.tmp" "$dir/nodes"

  cpus=$(nproc)
  {
    echo "# Written by psyne's scripts/cluster/slurm.sh: $n nodes in network namespaces, everything under $dir."
    common_conf "$SUBNET.1"
    cat <<EOF
SlurmdSpoolDir=$dir/spool/%n
SlurmdPidFile=$dir/slurmd-%n.pid
SlurmdLogFile=$dir/slurmd-%n.log
TmpFS=$dir/tmp/%n
SlurmctldTimeout=30
SlurmdTimeout=${SLURM_SLURMD_TIMEOUT:-10}
EOF
    for ((i = 1; i <= n; i++)); do
      echo "NodeName=$NODE_PREFIX$i NodeAddr=$SUBNET.$((10 + i)) NodeHostname=$NODE_PREFIX$i CPUs=$cpus State=UNKNOWN"
    done
    echo "PartitionName=debug Nodes=$NODE_PREFIX[1-$n] Default=YES MaxTime=INFINITE State=UP OverSubscribe=NO"
  } >"$dir/slurm.conf"
  # PMIx (srun --mpi=pmix): each step daemon's directories under its own node's TmpFS and spool.
  cat >"$dir/mpi.conf" <<EOF
PMIxDirectConn=true
PMIxTimeout=60
EOF
  export SLURM_CONF=$dir/slurm.conf
  slurmctld -i
  wait_for "slurmctld's pid file" live_pid "$dir/slurmctld.pid" slurmctld
  for ((i = 1; i <= n; i++)); do
    ns=$NODE_PREFIX$i
    # In the node's network namespace, with its own host name and /etc/hosts (its job steps
    # inherit all three); slurmd daemonizes and writes DIR/slurmd-psyhI.pid. nsenter, not `ip
    # netns exec`: that remounts /sys, which hides /sys/fs/cgroup, and slurmd 22.05 will not
    # start without it ("Unable to initialize cgroup plugin"), even with proctrack/pgid.
    nsenter --net="/run/netns/$ns" unshare --uts --mount --propagation private \
      sh -c 'hostname "$1" && mount --bind "$2" /etc/hosts && exec slurmd -N "$1"' sh "$ns" "$dir/hosts"
  done
  for ((i = 1; i <= n; i++)); do
    wait_for "slurmd's pid file on $NODE_PREFIX$i" live_pid "$dir/slurmd-$NODE_PREFIX$i.pid" slurmd
  done
  wait_for "$n nodes to be idle" nodes_idle "$n"
  disarm
  log "up: nodes $NODE_PREFIX[1-$n] ($SUBNET.11-$SUBNET.$((10 + n))), $cpus CPUs each, partition debug, in $dir"
  echo "export SLURM_CONF=$dir/slurm.conf"
}

# Whether $1 nodes of the cluster are idle.
nodes_idle() {
  [ "$(timeout 10 sinfo -h -N -o '%N %T' 2>/dev/null | grep -c ' idle$')" -eq "$1" ]
}

# Runs a client command "$@" of the cluster in DIR (see the header).
run_client() {
  [ -f "$dir/slurm.conf" ] || die "no cluster in $dir (no slurm.conf); start one with up or up-nodes"
  export SLURM_CONF=$dir/slurm.conf
  if [ -f "$dir/nodes" ]; then
    exec unshare --mount --propagation private \
      sh -c 'mount --bind "$0" /etc/hosts && exec "$@"' "$dir/hosts" "$@"
  fi
  exec "$@"
}

# Runs "$@" until it succeeds, at most $wait_secs seconds; fails naming $1 otherwise.
wait_for() {
  local what=$1 end=$((SECONDS + wait_secs))
  shift
  until "$@" >/dev/null 2>&1; do
    if [ "$SECONDS" -ge "$end" ]; then
      log "timed out after ${wait_secs}s waiting for $what"
      return 1
    fi
    sleep 0.2
  done
}

show_logs() {
  local f
  for f in "$dir"/munged.log "$dir"/slurmctld.log "$dir"/slurmd*.log; do
    [ -f "$f" ] || continue
    echo "---- last lines of $f" >&2
    tail -n 15 "$f" >&2
  done
}

case $cmd in
  up) up ;;
  up-nodes) up_nodes ;;
  down) down ;;
  status) is_up ;;
  run) run_client "$@" ;;
  *) usage ;;
esac
