#!/usr/bin/env bash
# Scaling of `psyrun -n N train` on this host (N = 1, 2, 4, 8, 32; the default model and one with
# --hidden 1024), and at --hidden 1024 on 2 ranks: overlap vs --no-overlap, default buckets vs
# --bucket-mb 0. Release build; every configuration repeated, runs alternated, medians reported.
# Writes OUT_DIR (default results/train-scaling): README.md, scaling.csv, overlap.csv, runs.log.
#
#   scripts/bench/train-scaling.sh [OUT_DIR]
#   REPEATS=5 OVERLAP_REPEATS=7 EPOCHS=20 scripts/bench/train-scaling.sh   (how results/ was made)
set -euo pipefail
cd "$(dirname "$0")/../.."
# Refuses a dirty tree unless --allow-dirty (taken out of the arguments); sets REVISION.
. scripts/report/publish.sh
set -- "${ARGS[@]}"
out=${1:-results/train-scaling}
repeats=${REPEATS:-3}
overlap_repeats=${OVERLAP_REPEATS:-5}
epochs=${EPOCHS:-20}
target=${CARGO_TARGET_DIR:-target}
cargo build --release -q -p psyrun -p train
psyrun="$target/release/psyrun"
[ -x "$target/release/train" ] || { echo "train-scaling: no $target/release/train after building" >&2; exit 1; }
mkdir -p "$out"
log="$out/runs.log"
: >"$log"

# measure ARGS...: runs `psyrun ARGS`, logs its output, prints
# "wall_s train_s ms_per_step compute_ms comm_ms test_acc" (compute and comm: per step, mean over
# ranks, averaged over the epochs after the first).
measure() {
  local t0 t1 text
  t0=$(date +%s.%N)
  if ! text=$("$psyrun" "$@" 2>&1); then
    printf '%s\n' "$text" >&2
    echo "train-scaling: failed: psyrun $*" >&2
    exit 1
  fi
  t1=$(date +%s.%N)
  # The log keeps the header, the last epoch and the summary of every run.
  printf '$ psyrun %s\n%s\n\n' "$*" "$(printf '%s\n' "$text" | grep -E '^(train: |check: )|^epoch +([0-9]+)/\2 ')" >>"$log"
  printf '%s\n' "$text" | awk -v t0="$t0" -v t1="$t1" '
    /^epoch / {
      for (i = 1; i < NF; i++) {
        if ($i == "compute") c = $(i + 1)
        if ($i == "comm") m = $(i + 1)
      }
      if (++e > 1) { cs += c; ms += m; k++ }
    }
    /^train: [0-9]+ epochs on / {
      train_s = $8; step = substr($10, 2)
      for (i = 1; i < NF; i++) if ($i == "accuracy") acc = $(i + 1)
      sub("%", "", acc)
    }
    END {
      if (k == 0) { k = 1 }
      printf "%.3f %s %s %.4f %.4f %s\n", t1 - t0, train_s, step, cs / k, ms / k, acc
    }'
}

load_before=$(cut -d' ' -f1-3 /proc/loadavg)
echo "hidden,ranks,repeat,wall_s,train_s,ms_per_step,compute_ms,comm_ms,test_acc" >"$out/scaling.csv"
for rep in $(seq 1 "$repeats"); do
  for hidden in 64 1024; do
    for n in 1 2 4 8 32; do
      read -r wall train step comp comm acc < <(measure -n "$n" train --hidden "$hidden" --epochs "$epochs")
      echo "$hidden,$n,$rep,$wall,$train,$step,$comp,$comm,$acc" | tee -a "$out/scaling.csv"
    done
  done
done

echo "config,repeat,wall_s,train_s,ms_per_step,compute_ms,comm_ms,test_acc" >"$out/overlap.csv"
configs=("default" "--no-overlap" "--bucket-mb 0" "--bucket-mb 0 --no-overlap")
for rep in $(seq 1 "$overlap_repeats"); do
  for cfg in "${configs[@]}"; do
    flags=()
    [ "$cfg" = default ] || read -r -a flags <<<"$cfg"
    read -r wall train step comp comm acc < <(measure -n 2 train --hidden 1024 --epochs "$epochs" "${flags[@]}")
    echo "$cfg,$rep,$wall,$train,$step,$comp,$comm,$acc" | tee -a "$out/overlap.csv"
  done
done
load_after=$(cut -d' ' -f1-3 /proc/loadavg)

cpu=$(awk -F': ' '/^model name/ {print $2; exit}' /proc/cpuinfo)
rev=$REVISION
header=$(grep -m1 '^train: digits.*64-1024-10.*2 ranks' "$log" || true)
OUT="$out" CPU="$cpu" NPROC="$(nproc)" REV="$rev" LOAD_BEFORE="$load_before" LOAD_AFTER="$load_after" \
  EPOCHS="$epochs" REPEATS="$repeats" OVERLAP_REPEATS="$overlap_repeats" RUSTC="$(rustc --version)" \
  HEADER="$header" DATE="$(date -u +%Y-%m-%dT%H:%M:%SZ)" python3 - <<'PY'
import csv, os, statistics as st

out = os.environ["OUT"]
E = os.environ
rows = list(csv.DictReader(open(f"{out}/scaling.csv")))
ov = list(csv.DictReader(open(f"{out}/overlap.csv")))

def med(rs, key):
    return st.median(float(r[key]) for r in rs)

lines = []
w = lines.append
w("# `psyrun -n N train`: scaling on one 2-core host")
w("")
w(f"Made by `scripts/bench/train-scaling.sh` on {E['DATE']}, source revision {E['REV']}, {E['RUSTC']}, release build.")
w(f"Machine: {E['CPU']}, **{E['NPROC']} cores** (so 4, 8 and 32 ranks are oversubscribed); "
  f"load average before / after: {E['LOAD_BEFORE']} / {E['LOAD_AFTER']} (the host is shared).")
w("")
w(f"Every run trains {E['EPOCHS']} epochs with the defaults otherwise (global batch 64, 24 steps per epoch, "
  "lr 0.5 with cosine decay, seed 42, buckets of at most 0.1 MiB, overlap on). Each configuration ran "
  f"{E['REPEATS']} times (scaling) or {E['OVERLAP_REPEATS']} times (overlap), interleaved with the others; "
  "the tables give medians. *wall* is the whole `psyrun` command (start of 1..N processes, joining the "
  "group, training, exit); *train* is the training loop alone as rank 0 reports it; *compute* and *comm* "
  "are per step, mean over ranks, averaged over the epochs after the first (comm counts only the time a "
  "rank is blocked on communication, not all-reduces hidden behind the backward pass). Speedup is the "
  "1-rank median over the N-rank median. Every N trains the same model on the same global batches, so the "
  "accuracy is the same for every N (the `--check` test verifies the loss curves agree).")
w("")
w("Commands (from the repository root, after `cargo build --release -p psyrun -p train`):")
w("")
w("```")
w(f"target/release/psyrun -n N train --hidden H --epochs {E['EPOCHS']}      # N = 1 2 4 8 32, H = 64 1024")
w(f"target/release/psyrun -n 2 train --hidden 1024 --epochs {E['EPOCHS']} [--no-overlap] [--bucket-mb 0]")
w("```")
d32 = [r for r in rows if r["hidden"] == "64" and r["ranks"] == "32"]
d1 = [r for r in rows if r["hidden"] == "64" and r["ranks"] == "1"]
if d32 and d1:
    w("")
    w("## In short")
    w("")
    w(f"- **`psyrun -n 32 train`** (the defaults: `--hidden 64`, 20 epochs) takes **{med(d32, 'wall_s'):.2f} s** "
      f"from start to exit (median of {len(d32)}; training loop {med(d32, 'train_s'):.2f} s) and reaches "
      f"**{d32[0]['test_acc']}% test accuracy** ({round(float(d32[0]['test_acc']) * 2.97)}/297), the same as 1 rank "
      f"({d1[0]['test_acc']}%). The test set is a fixed split, the last 297 samples of the file (not shuffled); "
      "training accuracy reaches about 99%.")
    for hidden in ("64", "1024"):
        sel = [r for r in rows if r["hidden"] == hidden]
        by = {n: med([r for r in sel if r["ranks"] == str(n)], "train_s") for n in (1, 2, 4, 8, 32)
              if any(r["ranks"] == str(n) for r in sel)}
        if 1 in by and 2 in by:
            w(f"- `--hidden {hidden}`: 2 ranks train {by[1] / by[2]:.2f}x as fast as 1 (two cores, each rank "
              "half the batch); past 2 ranks the cores are oversubscribed, compute per step no longer shrinks "
              "in wall time, and the all-reduce among more processes than cores dominates each step "
              + ", ".join(f"({n} ranks: {by[1] / by[n]:.2f}x)" for n in (4, 8, 32) if n in by) + ".")
    w("- This model is small: one step of the default model computes for about 0.1 ms on one core, which "
      "a single all-reduce among many processes costs several times over. Scaling past the core count is "
      "for correctness and for the launcher here, not for speed.")
for hidden in ("64", "1024"):
    sel = [r for r in rows if r["hidden"] == hidden]
    if not sel:
        continue
    params = (64 + 1) * int(hidden) + (int(hidden) + 1) * 10
    w("")
    w(f"## `--hidden {hidden}` ({params} parameters, {params * 4 / 1024:.0f} KiB of gradient per step)")
    w("")
    w("| ranks | wall s | speedup (wall) | train s | speedup (train) | ms per step | compute ms | comm ms | test accuracy |")
    w("|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    base = [r for r in sel if r["ranks"] == "1"]
    bw, bt = med(base, "wall_s"), med(base, "train_s")
    for n in sorted({int(r["ranks"]) for r in sel}):
        rs = [r for r in sel if r["ranks"] == str(n)]
        wall, train = med(rs, "wall_s"), med(rs, "train_s")
        accs = sorted({r["test_acc"] for r in rs})
        w(f"| {n} | {wall:.2f} | {bw / wall:.2f} | {train:.2f} | {bt / train:.2f} | {med(rs, 'ms_per_step'):.3f} | "
          f"{med(rs, 'compute_ms'):.3f} | {med(rs, 'comm_ms'):.3f} | {', '.join(a + '%' for a in accs)} |")
w("")
w("## Overlap and bucketing: `--hidden 1024`, 2 ranks")
w("")
if E.get("HEADER"):
    w("Default buckets, as train prints them: " + E["HEADER"].split("; gradients ")[-1] + ".")
    w("")
w("| configuration | ms per step | range over runs | compute ms | comm ms (exposed) | train s | wall s |")
w("|---|---:|---:|---:|---:|---:|---:|")
for cfg in ("default", "--no-overlap", "--bucket-mb 0", "--bucket-mb 0 --no-overlap"):
    rs = [r for r in ov if r["config"] == cfg]
    if rs:
        name = "default (0.1 MiB buckets, overlap on)" if cfg == "default" else f"`{cfg}`"
        lo, hi = min(float(r["ms_per_step"]) for r in rs), max(float(r["ms_per_step"]) for r in rs)
        w(f"| {name} | {med(rs, 'ms_per_step'):.3f} | {lo:.3f}-{hi:.3f} | {med(rs, 'compute_ms'):.3f} | {med(rs, 'comm_ms'):.3f} | "
          f"{med(rs, 'train_s'):.3f} | {med(rs, 'wall_s'):.2f} |")
w("")
w("What limits the overlap here: the network has two layers, so backpropagation completes `b2`, `W2` and "
  "`b1` (44 KiB) before the last and largest gradient, `W1` (256 KiB), and only the first bucket can travel "
  "while `W1`'s gradient is computed; `W1`'s all-reduce is always exposed. `--no-overlap` starts each "
  "bucket's all-reduce the same way (`all_reduce_async`) and waits for it at once, so the difference is the "
  "overlap alone. Compare the medians with the range over runs: on this model a difference smaller than "
  "that range is noise, not a gain. A deeper network (more tensors finishing before the last) or a slower "
  "link would give overlap more to hide.")
w("")
w("Raw data: `scaling.csv`, `overlap.csv` (one row per run) and `runs.log` (every command with its header, last epoch and summary lines).")
open(f"{out}/README.md", "w").write("\n".join(lines) + "\n")
print(f"wrote {out}/README.md")
PY
