#!/usr/bin/env bash
# Run as a rank by scripts/bench/scale-bench.sh (PROBE=1): starts the rank program ("$@"), and while it
# lives samples its open descriptors (sockets among them) and its peak resident set every 20 ms;
# when it ends, writes "rank,max_fds,max_sockets,hwm_kib" to $PROBE_DIR/$PSY_RANK and exits
# with the program's code. Sampled: a descriptor open for less than 20 ms may be missed.
set -u
"$@" &
pid=$!
max_fds=0 max_sockets=0 hwm=0
while kill -0 "$pid" 2>/dev/null; do
  fds=$(ls /proc/$pid/fd 2>/dev/null | wc -l)
  sockets=$(find /proc/$pid/fd -lname 'socket:*' 2>/dev/null | wc -l)
  h=$(awk '/^VmHWM/ {print $2}' /proc/$pid/status 2>/dev/null)
  [ "${fds:-0}" -gt "$max_fds" ] && max_fds=$fds
  [ "${sockets:-0}" -gt "$max_sockets" ] && max_sockets=$sockets
  [ -n "$h" ] && [ "$h" -gt "$hwm" ] && hwm=$h
  sleep 0.02
done
wait "$pid"
code=$?
echo "${PSY_RANK:-?},$max_fds,$max_sockets,$hwm" > "$PROBE_DIR/${PSY_RANK:-unknown}"
exit $code
