#!/bin/sh
# Alternates the psyne torch backend before issue 36 (BEFORE: a python/ tree of main's psyne
# package, with main's _native.abi3.so) and after (this tree's python/), PAIRS times, each run
# python/bench/torch_async.py ROUNDS rounds on 2 ranks under psyrun (results/torch-async/raw.txt holds
# such output).
# usage: BEFORE=/tmp/before PSYRUN=target/release/psyrun scripts/bench/torch-async.sh [PAIRS] [ROUNDS]
set -eu
repo=$(cd "$(dirname "$0")/../.." && pwd)
pairs=${1:-3}
rounds=${2:-5}
: "${BEFORE:?set BEFORE to a directory holding main's psyne package (psyne/*.py + _native.abi3.so)}"
: "${PSYRUN:=$repo/target/release/psyrun}"
py=${PYTHON:-python3}
for i in $(seq "$pairs"); do
    for v in before after; do
        if [ "$v" = before ]; then path=$BEFORE; else path=$repo/python; fi
        echo "== $v run $i $(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg)"
        PSY_TUNING=off PYTHONPATH=$path "$PSYRUN" -n 2 "$py" "$repo/python/bench/torch_async.py" "$rounds"
    done
done
