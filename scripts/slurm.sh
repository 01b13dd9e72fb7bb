#!/usr/bin/env bash
# A one-host Slurm cluster on this machine, for testing psyrun inside salloc/sbatch.
#
#   scripts/slurm.sh up   [DIR]   configure and start munged, slurmctld and slurmd; wait until
#                                 the node is idle. Prints `export SLURM_CONF=DIR/slurm.conf`.
#   scripts/slurm.sh down [DIR]   stop exactly the daemons `up` started (by the pids in DIR's pid
#                                 files), then remove DIR.
#   scripts/slurm.sh status [DIR] exit 0 if the cluster in DIR is up and its node answers.
#
# DIR defaults to ${TMPDIR:-/tmp}/psyne-slurm. Everything lives there: the munge key, socket, pid,
# log and seed files; slurm.conf; the controller's state, the node's spool, logs and pid files.
# Nothing is written under /etc, /run or /var. Every client command needs SLURM_CONF=DIR/slurm.conf
# in its environment (the daemons get it here). The node is this host's `hostname -s` with
# NodeAddr 127.0.0.1 and as many CPUs as `nproc`; the controller is reached at 127.0.0.1 too, so
# daemons and clients talk only on loopback. No cgroups, no systemd, no accounting:
# ProctrackType=proctrack/pgid, TaskPlugin=task/none. Runs as root (SlurmUser=root).
#
# `up` is idempotent (an already running cluster in DIR is left alone) and tears down what it
# started if any step fails. Every wait is bounded. The ports (SLURM_PORT_CTLD/SLURM_PORT_SLURMD,
# default 16817/16818) can be changed through the environment.
set -euo pipefail

cmd=${1:-}
dir=${2:-${TMPDIR:-/tmp}/psyne-slurm}
ctld_port=${SLURM_PORT_CTLD:-16817}
slurmd_port=${SLURM_PORT_SLURMD:-16818}
node=$(hostname -s)
wait_secs=${SLURM_UP_TIMEOUT:-60}

die() { echo "slurm.sh: $*" >&2; exit 1; }
log() { echo "slurm.sh: $*" >&2; }

usage() { die "usage: $0 up|down|status [DIR]"; }

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

# Stops the daemon whose pid is in file $1 (command name $2): SIGTERM, up to 15 s, SIGKILL.
stop_daemon() {
  local file=$1 name=$2 pid i
  pid=$(live_pid "$file" "$name") || return 0
  kill -TERM "$pid" 2>/dev/null || return 0
  for ((i = 0; i < 150; i++)); do
    kill -0 "$pid" 2>/dev/null || { log "stopped $name ($pid)"; return 0; }
    sleep 0.1
  done
  log "$name ($pid) ignored SIGTERM for 15 s; SIGKILL"
  kill -KILL "$pid" 2>/dev/null || true
  for ((i = 0; i < 50; i++)); do
    kill -0 "$pid" 2>/dev/null || return 0
    sleep 0.1
  done
  log "$name ($pid) is still there after SIGKILL"
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

is_up() {
  [ -f "$dir/slurm.conf" ] || return 1
  live_pid "$dir/munged.pid" munged >/dev/null || return 1
  live_pid "$dir/slurmctld.pid" slurmctld >/dev/null || return 1
  live_pid "$dir/slurmd.pid" slurmd >/dev/null || return 1
  SLURM_CONF=$dir/slurm.conf timeout 10 sinfo -h -N -n "$node" -o '%T' 2>/dev/null | grep -Eq '^(idle|mixed|allocated)'
}

down() {
  local p i
  if [ -f "$dir/slurm.conf" ] && live_pid "$dir/slurmctld.pid" slurmctld >/dev/null; then
    # Cancel whatever still runs so the step daemons end on their own.
    SLURM_CONF=$dir/slurm.conf timeout 10 scancel --full --quiet --partition=debug 2>/dev/null || true
    for ((i = 0; i < 100; i++)); do
      [ -z "$(our_stepds slurmstepd)" ] && break
      sleep 0.1
    done
  fi
  stop_daemon "$dir/slurmd.pid" slurmd
  stop_daemon "$dir/slurmctld.pid" slurmctld
  for ((i = 0; i < 50; i++)); do
    [ -z "$(our_stepds)" ] && break
    sleep 0.1
  done
  for p in $(our_stepds); do
    log "killing leftover $(cat "/proc/$p/comm" 2>/dev/null) $p"
    kill -KILL "$p" 2>/dev/null || true
  done
  stop_daemon "$dir/munged.pid" munged
  # Only remove a directory this script made (it holds slurm.conf or the marker).
  if [ -d "$dir" ]; then
    if [ -f "$dir/.psyne-slurm" ] || [ -f "$dir/slurm.conf" ]; then
      rm -rf "$dir"
    else
      log "not removing $dir: not made by this script"
    fi
  fi
}

up() {
  [ "$(id -u)" -eq 0 ] || die "needs root (the daemons run as root, SlurmUser=root)"
  for b in munged mungekey slurmctld slurmd sinfo srun salloc sbatch scancel; do
    command -v "$b" >/dev/null 2>&1 || die "$b not found; run scripts/setup.sh (packages slurmctld slurmd munge slurm-client)"
  done
  if is_up; then
    log "already up in $dir"
    echo "export SLURM_CONF=$dir/slurm.conf"
    return 0
  fi
  # Leftovers of an earlier, half-finished run in the same DIR go first.
  down
  trap 'log "failed; tearing down"; show_logs; down' ERR
  mkdir -p "$dir"
  chmod 0711 "$dir"
  touch "$dir/.psyne-slurm"
  mkdir -p "$dir/state" "$dir/spool" "$dir/munge"
  chmod 0700 "$dir/munge"

  # munge: its own key, socket, pid, log and seed, all in DIR.
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

  local cpus
  cpus=$(nproc)
  cat >"$dir/slurm.conf" <<EOF
# Written by psyne's scripts/slurm.sh: a one-host test cluster, everything under $dir.
ClusterName=psyne
SlurmctldHost=$node(127.0.0.1)
SlurmctldPort=$ctld_port
SlurmdPort=$slurmd_port
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$dir/munge/munge.socket
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd.pid
SlurmctldLogFile=$dir/slurmctld.log
SlurmdLogFile=$dir/slurmd.log
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
SlurmctldTimeout=30
SlurmdTimeout=30
InactiveLimit=0
KillWait=5
MinJobAge=60
NodeName=$node NodeAddr=127.0.0.1 NodeHostname=$node CPUs=$cpus State=UNKNOWN
PartitionName=debug Nodes=$node Default=YES MaxTime=INFINITE State=UP OverSubscribe=NO
EOF
  export SLURM_CONF=$dir/slurm.conf
  # -i: ignore any saved state (a fresh cluster each time).
  slurmctld -i
  wait_for "slurmctld's pid file" live_pid "$dir/slurmctld.pid" slurmctld
  slurmd -N "$node"
  wait_for "slurmd's pid file" live_pid "$dir/slurmd.pid" slurmd
  wait_for "node $node to be idle" node_idle
  trap - ERR
  log "up: node $node, $cpus CPUs, partition debug, in $dir"
  echo "export SLURM_CONF=$dir/slurm.conf"
}

node_idle() {
  timeout 10 sinfo -h -N -n "$node" -o '%T' 2>/dev/null | grep -qx idle
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
  for f in "$dir"/munged.log "$dir"/slurmctld.log "$dir"/slurmd.log; do
    [ -f "$f" ] || continue
    echo "---- last lines of $f" >&2
    tail -n 15 "$f" >&2
  done
}

case $cmd in
  up) up ;;
  down) down ;;
  status) is_up ;;
  *) usage ;;
esac
