#!/usr/bin/env bash
# Builds scripts/probes/tcp-exchange-probe.c and runs it ROUNDS times (default 3) over message sizes,
# write caps and both modes (exchange, one way), with psyne's 4 MiB socket buffers, alternating
# the settings within each round; writes OUT/README.md (default results/tcp-loopback) with every
# round's mean per setting. What it shows: how loopback TCP itself behaves, apart from any library.
set -euo pipefail
cd "$(dirname "$0")/../.."
out=${1:-results/tcp-loopback}
rounds=${ROUNDS:-3}
mkdir -p "$out"
bin=$(mktemp -d)/tcp-exchange-probe
trap 'rm -rf "$(dirname "$bin")"' EXIT
cc -O2 -o "$bin" scripts/probes/tcp-exchange-probe.c
raw="$out/raw.txt"
: >"$raw"
load_before=$(cut -d' ' -f1-3 /proc/loadavg)
for round in $(seq 1 "$rounds"); do
  for n in 262144 1048576 4194304 16777216; do
    for mode in 0 1; do
      for w in 0 65536 131072 262144; do
        echo "$round $("$bin" "$n" "$w" 262144 "$mode" 30 4194304)" >>"$raw"
      done
    done
  done
done
load_after=$(cut -d' ' -f1-3 /proc/loadavg)
python3 - "$out" "$raw" "$load_before" "$load_after" <<'PY'
import collections, datetime, os, sys
out, raw, before, after = sys.argv[1:5]
cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
runs = collections.defaultdict(list)
for line in open(raw):
    rnd, n, w, r, mode, sb, mean, best = line.split()
    runs[(int(mode), int(n), int(w))].append(float(mean))
caps = [0, 65536, 131072, 262144]
with open(f"{out}/README.md", "w") as f:
    f.write("# Loopback TCP by itself: whole-message writes against capped ones (issue 15)\n\n")
    f.write(f"Made by `scripts/probes/tcp-exchange-probe.sh` on {datetime.datetime.utcnow():%Y-%m-%dT%H:%M:%SZ}; "
            f"{cpu}, {os.cpu_count()} cores; load average before / after: {before} / {after}.\n\n")
    f.write("`scripts/probes/tcp-exchange-probe.c`: two processes pinned to CPUs 0 and 1, non-blocking sockets "
            "with 4 MiB buffers and TCP_NODELAY (as psyne's TCP links), move N bytes each way at once "
            "(exchange: a 2-rank ring shift or all-to-all) or one way (a broadcast), writing at most W "
            "bytes per call (0: the whole rest, as psyne does) and reading at most 256 KiB. Mean µs per "
            "round over 30 rounds, one column per round of the sweep (settings alternate within a round):\n\n")
    for mode, name in ((0, "exchange"), (1, "one way")):
        f.write(f"**{name}**\n\n| N | W | rounds (µs) |\n|---:|---:|---|\n")
        for n in sorted({k[1] for k in runs}):
            for w in caps:
                vals = ", ".join(f"{v:.0f}" for v in runs[(mode, n, w)])
                f.write(f"| {n >> 10} KiB | {'whole' if w == 0 else str(w >> 10) + ' KiB'} | {vals} |\n")
        f.write("\n")
    f.write("`raw.txt`: round, N, W, R, mode, socket buffer, mean µs, best µs.\n")
print(open(f"{out}/README.md").read())
PY
