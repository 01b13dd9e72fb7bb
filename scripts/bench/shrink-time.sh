#!/usr/bin/env bash
# How long the survivors of a failure take to go on (Group::revoke + Group::shrink): TRIALS times
# (default 20) per transport, a 4-rank `psyne-check --shrink-trial SEED` job under
# `psyrun --on-failure continue` (release build) in which one rank SIGKILLs itself at a random
# point of an all-reduce loop; each survivor times its revoke + shrink and checks every
# collective on the new group. Then TRIALS/4 trials of 5 ranks where a second rank dies while the
# others recover. Writes OUT/README.md (default results/shrink), the raw output in OUT/raw/.
#
#   scripts/bench/shrink-time.sh [OUT]      (TRIALS=N to change the default)
set -euo pipefail
cd "$(dirname "$0")/../.."
# Refuses a dirty tree unless --allow-dirty (taken out of the arguments); sets REVISION.
. scripts/report/publish.sh
set -- "${ARGS[@]}"
out=${1:-results/shrink}
trials=${TRIALS:-20}
cargo build --release -q -p psyrun
mkdir -p "$out/raw"
bin=target/release
load_before=$(cut -d' ' -f1-3 /proc/loadavg)
run_trial() { # NAME RANKS TRANSPORT SEED [--second-failure]
  local name=$1 n=$2 transport=$3 seed=$4
  shift 4
  PSY_TRANSPORT=$transport PSY_TIMEOUT=30 "$bin/psyrun" -n "$n" --on-failure continue --grace 2 \
    "$bin/psyne-check" --shrink-trial "$seed" "$@" >"$out/raw/$name.out" 2>"$out/raw/$name.err" || {
      echo "trial $name failed; see $out/raw/$name.err" >&2
      exit 1
    }
}
for transport in shm tcp; do
  for i in $(seq 1 "$trials"); do run_trial "$transport-$i" 4 "$transport" "$i"; done
  for i in $(seq 1 $((trials / 4))); do
    run_trial "$transport-second-$i" 5 "$transport" "$((1000 + i))" --second-failure
  done
done
load_after=$(cut -d' ' -f1-3 /proc/loadavg)
python3 - "$out" "$load_before" "$load_after" <<'PY'
import glob, os, re, statistics, subprocess, sys, datetime
out, before, after = sys.argv[1:4]
rev = os.environ["REVISION"]
cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
def times(pattern, survivors):
    ms = []
    for f in sorted(glob.glob(f"{out}/raw/{pattern}.out"), key=lambda p: int(re.findall(r"(\d+)\.out$", p)[0])):
        got = [float(x) for x in re.findall(r"shrunk to \d+ ranks as rank \d+ in ([\d.]+) ms", open(f).read())]
        if len(got) != survivors:
            sys.exit(f"{f}: {len(got)} survivors checked out, not {survivors}")
        ms.append(max(got))
    return ms
rows = [(t, what, times(p, s)) for t in ("shm", "tcp") for (what, p, s) in
        (("one rank killed, 4 ranks", f"{t}-[0-9]*", 3), ("a second rank killed while recovering, 5 ranks", f"{t}-second-*", 3))]
with open(f"{out}/README.md", "w") as w:
    w.write("# How fast the survivors of a failure go on: revoke + shrink (issue 17)\n\n")
    w.write(f"Made by `scripts/bench/shrink-time.sh` on {datetime.datetime.utcnow():%Y-%m-%dT%H:%M:%SZ}, "
            f"source revision {rev}; {cpu}, {os.cpu_count()} cores; load average before / after: {before} / {after}.\n\n")
    w.write("Each trial: `psyrun --on-failure continue psyne-check --shrink-trial SEED` (release build). One rank "
            "SIGKILLs itself at a random point (0-30 ms) of a loop of all-reduces; every survivor's call fails; each "
            "calls `revoke()` then `shrink()`, timing the two, then checks every collective x op x type on the new "
            "group against the oracle (all did). With `--second-failure` the next rank also dies, 0-3 ms after it "
            "starts recovering. Per trial the slowest survivor's time, in ms:\n\n")
    w.write("| transport | trial | trials | median | min | max |\n|---|---|---:|---:|---:|---:|\n")
    for t, what, ms in rows:
        w.write(f"| {t} | {what} | {len(ms)} | {statistics.median(ms):.1f} | {min(ms):.1f} | {max(ms):.1f} |\n")
    seconds = {t: sum("(shrink 2)" in open(f).read() for f in glob.glob(f"{out}/raw/{t}-second-*.out")) for t in ("shm", "tcp")}
    w.write("\nThe time is that of the shrink that made the final group: in "
            + ", ".join(f"{n} of the {t} trials" for t, n in seconds.items())
            + " with a second death, it came after the first shrink had finished, the new group's first "
            "collective failed, and the survivors shrank again (`shrink 2` in `raw/`); the time shown is then the "
            "second shrink's.\n")
    w.write("\nA second death while the new group forms holds the others until the shrink's first forming "
            "budget (500 ms, `FIRST_FORMING_BUDGET` in `src/group/ft.rs`) runs out; they then agree that it is "
            "gone and form the group again without it.\n\nEvery trial, in order (ms):\n\n")
    for t, what, ms in rows:
        w.write(f"- {t}, {what}: " + ", ".join(f"{x:.1f}" for x in ms) + "\n")
    w.write("\n`raw/` holds each trial's stdout and stderr.\n")
print(open(f"{out}/README.md").read())
PY
