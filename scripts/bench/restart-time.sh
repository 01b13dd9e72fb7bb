#!/usr/bin/env bash
# How fast psyrun --max-restarts gets a job going again: TRIALS times (default 20) per transport,
# a 4-rank psyne-check job in which rank 1 SIGKILLs itself 50 ms into a series of 64 MiB
# all-reduces (the first attempt only); psyrun stops the job and starts it again; the restarted
# ranks form a new group and finish one all-reduce. The time from the death (rank 1 prints the
# clock just before it raises SIGKILL) to the last restarted rank's first collective is the
# restart time. Writes OUT/README.md (default results/restart), with the raw lines in OUT/raw/.
#
#   scripts/bench/restart-time.sh [OUT]      (TRIALS=N, RANKS=N to change the defaults)
set -euo pipefail
cd "$(dirname "$0")/../.."
# Refuses a dirty tree unless --allow-dirty (taken out of the arguments); sets REVISION.
. scripts/report/publish.sh
set -- "${ARGS[@]}"
out=${1:-results/restart}
trials=${TRIALS:-20}
ranks=${RANKS:-4}
cargo build --release -q -p psyrun
mkdir -p "$out/raw"
bin=target/release
load_before=$(cut -d' ' -f1-3 /proc/loadavg)
for transport in shm tcp; do
  for i in $(seq 1 "$trials"); do
    PSY_TRANSPORT=$transport PSY_TIMEOUT=30 "$bin/psyrun" -n "$ranks" --max-restarts 1 --grace 2 \
      "$bin/psyne-check" --fault sigkill-during:1 --fault-attempts 1 \
      >"$out/raw/$transport-$i.out" 2>"$out/raw/$transport-$i.err" || {
        echo "trial $transport $i failed; see $out/raw/$transport-$i.err" >&2
        exit 1
      }
  done
done
load_after=$(cut -d' ' -f1-3 /proc/loadavg)
python3 - "$out" "$trials" "$ranks" "$load_before" "$load_after" <<'PY'
import glob, os, re, statistics, subprocess, sys, datetime
out, trials, ranks, before, after = sys.argv[1:6]
rev = os.environ["REVISION"]
cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
rows = []
for transport in ("shm", "tcp"):
    ms = []
    for f in sorted(glob.glob(f"{out}/raw/{transport}-*.out")):
        text = open(f).read()
        death = [int(x) for x in re.findall(r"killing itself at (\d+)", text)]
        first = [int(x) for x in re.findall(r"attempt 1: first collective at (\d+)", text)]
        if len(death) != 1 or len(first) != int(ranks):
            sys.exit(f"{f}: expected one death and {ranks} first collectives")
        ms.append((max(first) - death[0]) / 1000)
    rows.append((transport, ms))
with open(f"{out}/README.md", "w") as w:
    w.write("# How fast `psyrun --max-restarts` restarts a job (issue 17)\n\n")
    w.write(f"Made by `scripts/bench/restart-time.sh` on {datetime.datetime.utcnow():%Y-%m-%dT%H:%M:%SZ}, "
            f"source revision {rev}; {cpu}, {os.cpu_count()} cores; load average before / after: {before} / {after}.\n\n")
    w.write(f"Each trial: `psyrun -n {ranks} --max-restarts 1 --grace 2 psyne-check --fault sigkill-during:1 "
            "--fault-attempts 1` (release build). Rank 1 SIGKILLs itself 50 ms into a series of 64 MiB "
            "all-reduces; the survivors fail with PeerLost; psyrun stops the job, removes its shared memory, "
            "and starts it again with a new job id, secret and store; the new ranks form a group and finish "
            "one all-reduce. Measured: from the death (rank 1 prints the clock just before raising SIGKILL) "
            "to the moment the last restarted rank has finished that first collective, in ms.\n\n")
    w.write("| transport | trials | median | min | max |\n|---|---:|---:|---:|---:|\n")
    for transport, ms in rows:
        w.write(f"| {transport} | {len(ms)} | {statistics.median(ms):.1f} | {min(ms):.1f} | {max(ms):.1f} |\n")
    w.write("\nEvery trial, in order (ms):\n\n")
    for transport, ms in rows:
        w.write(f"- {transport}: " + ", ".join(f"{x:.1f}" for x in ms) + "\n")
    w.write("\n`raw/` holds each trial's stdout and stderr.\n")
print(open(f"{out}/README.md").read())
PY
