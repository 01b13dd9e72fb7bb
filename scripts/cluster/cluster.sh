#!/usr/bin/env bash
# A cluster of test hosts on this machine: one network namespace per host, joined by a bridge in
# the root namespace, each running a real OpenSSH server that accepts a generated user key, in
# its own UTS namespace named after the host (psyh1, psyh2, ...), on ports 22 and 2222.
# Addresses come from 10.213.0.0/24, a private range used only inside these namespaces; before
# anything is sent, every host address must route through our own bridge, or the script stops
# and tears everything down. Run as root.
#
#   scripts/cluster/cluster.sh up N [DIR]     start hosts psyh1..psyhN (default DIR /tmp/psyne-cluster)
#   scripts/cluster/cluster.sh check [DIR]    from inside psyh1, ssh to every host and run `hostname`
#   scripts/cluster/cluster.sh down [DIR]     stop every sshd, remove namespaces, links and DIR
#
# DIR gets: hosts (one address per line), ssh_config (Host psyhI entries with the key and
# address), id_ed25519 (the user key), and per-host sshd configs, pid files and logs.
# Clients must run inside a namespace of the cluster: `ip netns exec psyh1 ssh -F DIR/ssh_config psyh2`.
set -euo pipefail

cmd=${1:-}
BRIDGE=psybr0
SUBNET=10.213.0
PREFIX=psyh

addr_of() { echo "$SUBNET.$((10 + $1))"; }

down() {
  local dir=$1
  for pidfile in "$dir"/sshd-*.pid; do
    [ -f "$pidfile" ] || continue
    pid=$(cat "$pidfile" 2>/dev/null || true)
    # Only an sshd we started: its pid file is ours and the process is sshd.
    if [ -n "$pid" ] && [ "$(cat /proc/"$pid"/comm 2>/dev/null)" = sshd ]; then
      kill "$pid" 2>/dev/null || true
    fi
  done
  for ns in $(ip netns list 2>/dev/null | awk '{print $1}' | grep "^$PREFIX[0-9]\+$" || true); do
    ip netns delete "$ns" 2>/dev/null || true
  done
  for link in $(ip -o link show 2>/dev/null | awk -F': ' '{print $2}' | cut -d@ -f1 | grep "^psyv[0-9]\+$" || true); do
    ip link delete "$link" 2>/dev/null || true
  done
  ip link delete "$BRIDGE" 2>/dev/null || true
  rm -rf "$dir"
}

up() {
  local n=$1 dir=$2
  [ "$(id -u)" -eq 0 ] || { echo "cluster.sh: needs root (network namespaces, sshd)" >&2; exit 1; }
  command -v sshd >/dev/null || [ -x /usr/sbin/sshd ] || { echo "cluster.sh: sshd missing: run scripts/setup.sh" >&2; exit 1; }
  [ "$n" -ge 1 ] && [ "$n" -le 200 ] || { echo "cluster.sh: N must be 1..200" >&2; exit 2; }
  # The names are fixed: one cluster at a time. Never tear down someone else's.
  if ip link show "$BRIDGE" >/dev/null 2>&1; then
    echo "cluster.sh: a test cluster is already up (bridge $BRIDGE exists); wait for it, or remove it with scripts/cluster/cluster.sh down [ITS DIR]" >&2
    exit 1
  fi
  rm -rf "$dir"
  trap 'echo "cluster.sh: failed; tearing down" >&2; down "$dir"' ERR
  mkdir -p "$dir" /run/sshd
  chmod 700 "$dir"
  ssh-keygen -q -t ed25519 -N '' -f "$dir/host_key"
  ssh-keygen -q -t ed25519 -N '' -f "$dir/id_ed25519"
  cp "$dir/id_ed25519.pub" "$dir/authorized_keys"

  ip link add "$BRIDGE" type bridge
  ip addr add "$SUBNET.1/24" dev "$BRIDGE"
  ip link set "$BRIDGE" up
  : > "$dir/hosts"
  : > "$dir/ssh_config"
  for i in $(seq 1 "$n"); do
    ns=$PREFIX$i
    addr=$(addr_of "$i")
    ip netns add "$ns"
    ip link add "psyv$i" type veth peer name eth0 netns "$ns"
    ip link set "psyv$i" master "$BRIDGE" up
    ip -n "$ns" link set lo up
    ip -n "$ns" addr add "$addr/24" dev eth0
    ip -n "$ns" link set eth0 up
    # No default route inside: only the cluster's subnet is reachable from a host.
    echo "$addr" >> "$dir/hosts"
    cat >> "$dir/ssh_config" <<EOF
Host $ns
  HostName $addr
  User root
  IdentityFile $dir/id_ed25519
  IdentitiesOnly yes
  StrictHostKeyChecking no
  UserKnownHostsFile /dev/null
  LogLevel ERROR
  ConnectTimeout 5
EOF
  done
  # Every address must be ours: reached through the bridge we just made, never off the machine.
  for i in $(seq 1 "$n"); do
    addr=$(addr_of "$i")
    if ! ip route get "$addr" | grep -q "dev $BRIDGE"; then
      echo "cluster.sh: $addr does not route through $BRIDGE ($(ip route get "$addr")); refusing to use it" >&2
      false
    fi
  done
  for i in $(seq 1 "$n"); do
    ns=$PREFIX$i
    addr=$(addr_of "$i")
    cat > "$dir/sshd-$i.conf" <<EOF
Port 22
Port 2222
ListenAddress $addr
HostKey $dir/host_key
PidFile $dir/sshd-$i.pid
AuthorizedKeysFile $dir/authorized_keys
StrictModes no
PermitRootLogin prohibit-password
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
AcceptEnv PSY_*
EOF
    /usr/sbin/sshd -t -f "$dir/sshd-$i.conf"
    # Its own UTS namespace too, so the host has its own name (psyne tells hosts apart by
    # name and boot id); sessions inherit both namespaces from sshd.
    ip netns exec "$ns" unshare --uts sh -c "hostname $ns && exec /usr/sbin/sshd -f '$dir/sshd-$i.conf' -E '$dir/sshd-$i.log'"
  done
  # Wait (bounded) until every sshd has written its pid file.
  for i in $(seq 1 "$n"); do
    for _ in $(seq 1 100); do [ -s "$dir/sshd-$i.pid" ] && break; sleep 0.05; done
    [ -s "$dir/sshd-$i.pid" ] || { echo "cluster.sh: sshd on $PREFIX$i did not start (see $dir/sshd-$i.log)" >&2; false; }
  done
  trap - ERR
  echo "cluster.sh: $n hosts up ($(tr '\n' ' ' < "$dir/hosts")); ssh config in $dir/ssh_config"
}

check() {
  local dir=$1 failed=0
  [ -f "$dir/hosts" ] || { echo "cluster.sh: no cluster in $dir" >&2; exit 1; }
  n=$(wc -l < "$dir/hosts")
  for i in $(seq 1 "$n"); do
    if out=$(timeout 20 ip netns exec "${PREFIX}1" ssh -F "$dir/ssh_config" "$PREFIX$i" 'echo $(hostname) $SSH_CONNECTION' 2>&1); then
      echo "$PREFIX$i: ok ($out)"
    else
      echo "$PREFIX$i: FAILED: $out"
      failed=1
    fi
  done
  return $failed
}

case "$cmd" in
  up) up "${2:?usage: cluster.sh up N [DIR]}" "${3:-/tmp/psyne-cluster}" ;;
  check) check "${2:-/tmp/psyne-cluster}" ;;
  down) down "${2:-/tmp/psyne-cluster}"; echo "cluster.sh: down" ;;
  *) echo "usage: cluster.sh up N [DIR] | check [DIR] | down [DIR]" >&2; exit 2 ;;
esac
