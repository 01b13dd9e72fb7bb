#!/usr/bin/env bash
# mpi4py's own test suite (from its sdist, unpacked by scripts/setup.sh into
# /opt/psyne-mpi4py/src/test) under a given launcher, with the subset that passes under every
# MPI's own launcher with 2 ranks in about a minute or two; prints one summary line.
#
#   scripts/ci/mpi4py-suite.sh FLAVOUR LAUNCHER...
#
# FLAVOUR is openmpi, mpich4, mpich5 or impi (as in launcher/tests/common/mpi.rs); LAUNCHER... is
# the command that starts the ranks, up to the program, for example
#   scripts/ci/mpi4py-suite.sh openmpi mpirun.openmpi --allow-run-as-root --oversubscribe -n 2
#   scripts/ci/mpi4py-suite.sh mpich4 mpiexec.mpich -n 2
#   scripts/ci/mpi4py-suite.sh mpich5 /opt/psyne-mpich/bin/mpiexec -n 2
#   scripts/ci/mpi4py-suite.sh impi /opt/psyne-impi/bin/mpiexec -n 2
#   scripts/ci/mpi4py-suite.sh impi target/release/psyrun --timeout 300 -n 2 --mpi pmi1
# The script sets what the flavour's ranks need (its Python, and for mpi4py which libmpi to load)
# in the launcher's environment; a launcher that does not pass its environment on must be told to
# (psyrun and these launchers do). MPI4PY_SUITE_TIMEOUT (seconds, default 300) bounds the run.
#
# Left out, and why (the rest, 2000 to 2076 tests a rank, passes):
#   test_spawn, test_dynproc  MPI_Comm_spawn, ports and name publishing: dynamic processes are
#                             beyond what a launcher of a fixed job serves; Open MPI 4.1.4's
#                             spawn tests also hang under its own mpirun here (oversubscribed)
#   test_mpiabi               MPI_Abi_get_fortran_info checks fail under MPICH 5.0.2 (its
#                             Fortran type table), whatever the launcher
#   test_util_sync (mpich4)   under Debian's MPICH 4.0.2 mpi4py.util.sync's condition tests on
#                             COMM_WORLD (testWaitNotify, testWaitForNotify) raise on one rank and
#                             the ranks then wait for each other forever; MPICH 5, Open MPI and
#                             Intel MPI pass them
# Extra exclusions (module-name regexes) can be added with MPI4PY_SUITE_EXCLUDE="re1 re2".
#
# Output: the ranks' unittest output goes to $MPI4PY_SUITE_LOG (default a temp file, removed
# unless the run failed); the last line is
#   mpi4py-suite FLAVOUR: R ranks, T tests each; summary: P passed, F failed, S skipped; W s; OK|FAILED
# counted over all ranks (each rank runs every test). Exit 0 only if every rank reported OK and
# the launcher exited 0.
set -euo pipefail

if [ $# -lt 2 ]; then
  sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//' >&2
  exit 2
fi
flavour=$1
shift

src=/opt/psyne-mpi4py/src
[ -f "$src/test/main.py" ] || { echo "mpi4py-suite.sh: $src/test/main.py missing: run scripts/setup.sh" >&2; exit 1; }

case $flavour in
  openmpi)
    python=/opt/psyne-mpi4py/bin/python
    export MPI4PY_LIBMPI=libmpi.so.40
    ;;
  mpich4)
    python=/opt/psyne-mpi4py/bin/python
    # Debian's MPICH has libmpich.so.12; mpi4py's MPICH extension links libmpi.so.12 (setup.sh
    # links one into lib/mpich).
    export MPI4PY_LIBMPI=libmpich.so.12
    export LD_LIBRARY_PATH=/opt/psyne-mpi4py/lib/mpich${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
    ;;
  mpich5)
    python=/opt/psyne-mpich/bin/python
    ;;
  impi)
    python=/opt/psyne-impi/bin/python
    export LD_LIBRARY_PATH=/opt/psyne-impi/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
    ;;
  *)
    echo "mpi4py-suite.sh: unknown flavour '$flavour' (openmpi, mpich4, mpich5, impi)" >&2
    exit 2
    ;;
esac
[ -x "$python" ] || { echo "mpi4py-suite.sh: $python missing: run scripts/setup.sh" >&2; exit 1; }

excludes=(-e '^test_spawn' -e '^test_dynproc' -e '^test_mpiabi')
[ "$flavour" != mpich4 ] || excludes+=(-e '^test_util_sync')
for re in ${MPI4PY_SUITE_EXCLUDE:-}; do
  excludes+=(-e "$re")
done

log=${MPI4PY_SUITE_LOG:-}
keep_log=1
if [ -z "$log" ]; then
  log=$(mktemp /tmp/mpi4py-suite.XXXXXX)
  keep_log=0
fi

export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
start=$(date +%s.%N)
rc=0
timeout --kill-after=10 "${MPI4PY_SUITE_TIMEOUT:-300}" \
  "$@" "$python" "$src/test/main.py" -v "${excludes[@]}" >"$log" 2>&1 </dev/null || rc=$?
end=$(date +%s.%N)

# Each rank ends with "Ran N tests in Xs" and "OK (skipped=K)" or
# "FAILED (failures=F, errors=E, skipped=K)". -v has each rank print every test's name when it
# starts and "ok" (lowercase) when it ends, so a run that timed out shows where each rank was; a
# launcher may join two ranks' lines: the patterns are not anchored at the line's start.
read -r ranks tests passed failed skipped ok_ranks < <(awk '
  match($0, /Ran [0-9]+ tests? in /) { split(substr($0, RSTART), w, " "); ranks++; tests = w[2]; total += w[2] }
  match($0, /(OK|FAILED)( \([a-z_]+=[0-9]+(, [a-z_]+=[0-9]+)*\))?$/) {
    s = substr($0, RSTART)
    if (s ~ /^OK/) ok++
    sub(/^[A-Z]+ *\(?/, "", s); sub(/\)$/, "", s)
    n = split(s, kv, /, */)
    for (i = 1; i <= n; i++) {
      split(kv[i], p, "=")
      if (p[1] == "failures" || p[1] == "errors" || p[1] == "unexpected_successes") bad += p[2]
      else if (p[1] == "skipped") skip += p[2]
    }
  }
  END { printf "%d %d %d %d %d %d\n", ranks, tests, total - bad - skip, bad, skip, ok }' "$log")

verdict=OK
if [ "$rc" -ne 0 ] || [ "$ranks" -eq 0 ] || [ "$ok_ranks" -ne "$ranks" ]; then
  verdict=FAILED
fi
if [ "$verdict" = OK ]; then
  [ "$keep_log" = 1 ] || rm -f "$log"
else
  echo "mpi4py-suite.sh: launcher exit $rc; the ranks' output: $log" >&2
  grep -E '^(FAIL|ERROR):' "$log" | sort | uniq -c | head -20 >&2 || true
  echo "mpi4py-suite.sh: the log's last lines (with -v, the test each rank was in):" >&2
  tail -n 8 "$log" >&2 || true
fi
secs=$(awk -v a="$start" -v b="$end" 'BEGIN { printf "%.1f", b - a }')
printf 'mpi4py-suite %s: %d ranks, %d tests each; summary: %d passed, %d failed, %d skipped; %s s; %s\n' \
  "$flavour" "$ranks" "$tests" "$passed" "$failed" "$skipped" "$secs" "$verdict"
[ "$verdict" = OK ]
