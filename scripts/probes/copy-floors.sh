#!/usr/bin/env bash
# This host's copy floors of 2-rank collectives over shared memory (issue 37): for each collective
# and size, scripts/probes/floors/staged2.c (a plain C program that moves only the bytes the call
# must move, through a ring of four slices in shared memory, both cores at once) in the slice size
# that a short calibration pass over seven (16 KiB to 1 MiB) found fastest, then measured once
# more in that slice size. One line
# a collective and size:
#
#   floor COLLECTIVE BYTES SLICE MEAN_US SLOWER_US
#
# (MEAN_US: the mean over calls of the mean over the two ranks, as psybench's osu cadence
# reports; SLOWER_US: the same of the slower rank; SLICE: the slice size measured, with `+nt`
# where the copies out of the ring bypassed the cache). The calibration tries each slice size
# with ordinary and with non-temporal copies out (staged2's STREAM): non-temporal ones made the
# 16-64 MiB all-gather's floor 0.7-0.8 of the time and the all-reduce's slower
# (results/copy-reads/floors.txt). Slices of 512 KiB and 1 MiB (a ring of 2 and 4 MiB, more
# than a core's 1 MiB L2, so the reader copies lines the writer's L2 has already let go to the
# shared L3) made the 16 MiB broadcast's floor 0.7-0.85 of its time in 256 KiB slices, where
# the calibration stopped before 2026-11-29 (results/ring-reader-lag/).
#
# The reported time is one measurement, as each benchmark's in the rotation is, not the fastest
# of the five calibration runs: on this VM a run lands in a fast or a slow mode of the machine
# (2x apart at 16 MiB), and the fastest of five runs picks the fast mode far more often than any
# one job of the others does.
#
#   scripts/probes/copy-floors.sh [COLLECTIVES] [SIZES]
#     (separated by spaces or commas; default "allreduce broadcast allgather reducescatter" and
#     "1048576 16777216 67108864"; sizes in bytes, even counts of f32)
set -euo pipefail
cd "$(dirname "$0")/floors"
collectives=${1:-allreduce broadcast allgather reducescatter}
sizes=${2:-1048576 16777216 67108864}
read -r -a collectives <<<"${collectives//,/ }"
read -r -a sizes <<<"${sizes//,/ }"
bin=$(mktemp -d)
trap 'rm -rf "$bin"' EXIT
gcc -O3 -march=native -Wall -Wextra -Werror -o "$bin/staged2" staged2.c
for coll in "${collectives[@]}"; do
  for bytes in "${sizes[@]}"; do
    iters=$((bytes >= 67108864 ? 10 : bytes >= 16777216 ? 30 : 300))
    best="" best_stream="" best_mean=""
    for stream in 0 1; do
      for slice in 16384 32768 65536 131072 262144 524288 1048576; do
        # staged2 COLL bytes B slice S iters I: mean M us, slower rank X us, stream T
        line=$("$bin/staged2" "$coll" "$bytes" $((iters / 5 + 2)) "$slice" "$stream")
        mean=$(awk '{ gsub(",", ""); print $10 }' <<<"$line")
        if [ -z "$best" ] || awk -v a="$mean" -v b="$best_mean" 'BEGIN { exit !(a < b) }'; then
          best=$slice best_stream=$stream best_mean=$mean
        fi
      done
    done
    line=$("$bin/staged2" "$coll" "$bytes" "$iters" "$best" "$best_stream")
    read -r mean slower < <(awk '{ gsub(",", ""); print $10, $14 }' <<<"$line")
    echo "floor $coll $bytes $best$([ "$best_stream" = 1 ] && echo +nt) $mean $slower"
  done
done
