#!/usr/bin/env bash
# This host's copy floors of 2-rank collectives over shared memory (issue 37): for each collective
# and size, the fastest of scripts/probes/floors/staged2.c over a few slice sizes (a plain C
# program that moves only the bytes the call must move, through a ring in shared memory, both
# cores at once). One line a collective and size:
#
#   floor COLLECTIVE BYTES SLICE MEAN_US SLOWER_US
#
# (MEAN_US: the mean over the two ranks, as psybench's osu cadence reports; SLOWER_US: the slower
# rank's; SLICE: the slice size that was fastest).
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
    best=""
    for slice in 16384 32768 65536 131072 262144; do
      line=$("$bin/staged2" "$coll" "$bytes" "$iters" "$slice")
      # staged2 COLL bytes B slice S iters I: mean M us, slower rank X us
      read -r mean slower < <(awk '{ gsub(",", ""); print $10, $14 }' <<<"$line")
      if [ -z "$best" ] || awk -v a="$mean" -v b="${best##* }" 'BEGIN { exit !(a < b) }'; then
        best="$slice $slower $mean"
      fi
    done
    read -r slice slower mean <<<"$best"
    echo "floor $coll $bytes $slice $mean $slower"
  done
done
