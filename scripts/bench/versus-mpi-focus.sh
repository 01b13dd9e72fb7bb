# Sourced by scripts/bench/versus-mpi.sh for `--focus tcp|shm [OUT_DIR] [SIZES]` (see there), from
# the repository root, with bench, rounds, cadences and REVISION set and both builds done: a few
# runs of psyne (under psyrun) against Open MPI (under mpirun as a plain MPI program), two jobs a
# round, the first swapping each round; per run a merged JSON and CSV, a PNG and the
# `psybench compare` table; the host's raw bandwidth; and a README with the machine and commands.
# OUT_DIR defaults to results/versus-openmpi-focus-MODE (the reports this made before it was part
# of versus-mpi.sh are results/archive/allreduce-tcp-psyne-vs-openmpi and shm-psyne-vs-openmpi).
mode=${1:-tcp}
case "$mode" in
  tcp) out=${2:-results/versus-openmpi-focus-tcp}; sizes=${3:-8:256M} ;;
  shm) out=${2:-results/versus-openmpi-focus-shm}; sizes=${3:-8:64M} ;;
  *) echo "usage: $0 --focus tcp|shm [OUT_DIR] [SIZES]" >&2; exit 2 ;;
esac
mkdir -p "$out"

load_before=$(cut -d' ' -f1-3 /proc/loadavg)
"$bench" peak | tee "$out/peak.txt"
# Open MPI runs with its defaults, as its users run it. Its AVX reduction component (on by
# default) saturates 8/16-bit integer sums (open-mpi/ompi#8045), which is why the correctness
# tests pass `--mca op ^avx`; these runs sum f32, where it is exact and faster than the
# generic op, so leaving it on is the fair comparison.
if [ "$mode" = tcp ]; then
  peak=$(awk '/^loopback TCP:/ {print $3}' "$out/peak.txt")
  mpi=(mpirun --oversubscribe --mca pml ob1 --mca btl tcp,self --mca btl_tcp_if_include lo)
  export PSY_TRANSPORT=tcp
  runs=("allreduce -n 2")
else
  peak=$(awk '/^memory copy:/ {print $3}' "$out/peak.txt")
  mpi=(mpirun --oversubscribe)
  export PSY_TRANSPORT=shm
  # The last run leaves the ranks unbound (Open MPI binds each to a core by default), which on
  # this VM changes small-message latency a lot, for both backends.
  # `shared`: psyne's rows all-reduce buffers from Group::alloc_shared (zero-copy).
  runs=("allreduce -n 2" "allreduce -n 2 shared" "broadcast -n 2" "allgather -n 2" "reducescatter -n 2"
    "allreduce -n 8" "allreduce -n 8 shared" "allreduce -n 2 unbound")
fi

commands=()
names=()
whats=()
raw="$out/raw"
mkdir -p "$raw"
for run in "${runs[@]}"; do
 for cadence in "${cadences[@]}"; do
  read -r coll _ n bind <<<"$run"
  name="$coll-$n${bind:+-$bind}-$cadence"
  run_sizes=$sizes
  [ "$n" -gt 2 ] && run_sizes=8,1K,64K,1M
  mpi_bind=()
  psy_bind=()
  extra=()
  [ "$bind" = unbound ] && run_sizes=8:64K && mpi_bind=(--bind-to none) && psy_bind=(--bind-to none)
  [ "$bind" = shared ] && extra=(--shared-buffers)
  sweep=("$coll" --sizes "$run_sizes" --peak "$peak" --cadence "$cadence")
  # psyne as its users run it (psyrun), Open MPI as its users run it (mpirun, MPI_Init), each in
  # its own job; the two alternate which goes first, round by round.
  native=(target/release/psyrun "${psy_bind[@]}" -n "$n" "$bench" "${sweep[@]}" "${extra[@]}")
  mpijob=("${mpi[@]}" "${mpi_bind[@]}" -n "$n" "$bench" "${sweep[@]}" --backend mpi)
  commands+=("PSY_TRANSPORT=$PSY_TRANSPORT ${native[*]} --json R<round>-native.json
${mpijob[*]} --json R<round>-mpi.json")
  names+=("$name")
  case "$bind" in
    unbound) what=", unbound (--bind-to none)" ;;
    shared) what=", psyne on shared buffers (Group::alloc_shared + all_reduce_shared)" ;;
    *) what="" ;;
  esac
  whats+=("$coll, $n ranks$what, cadence $cadence")
  : > "$out/$name.txt"
  parts=()
  for ((round = 1; round <= rounds; round++)); do
    order=(native mpi)
    [ $((round % 2)) -eq 0 ] && order=(mpi native)
    for who in "${order[@]}"; do
      json="$raw/$name-r$round-$who.json"
      echo "# round $round/$rounds: $who" | tee -a "$out/$name.txt"
      if [ "$who" = native ]; then
        "${native[@]}" --json "$json" | tee -a "$out/$name.txt"
      else
        "${mpijob[@]}" --json "$json" | tee -a "$out/$name.txt"
      fi
      parts+=("$json")
    done
  done
  python3 scripts/report/merge-reports.py "$out/$name.json" "$out/$name.csv" "${parts[@]}"
  "$bench" plot "$out/$name.json" -o "$out/$name.png" >/dev/null
  "$bench" compare "$out/$name.json" | tee "$out/$name-compare.txt"
  echo
 done
done
load_after=$(cut -d' ' -f1-3 /proc/loadavg)

{
  echo "# psyne vs Open MPI ($mode)"
  echo
  echo "Made by \`scripts/bench/versus-mpi.sh --focus $mode\` on $(date -u +%Y-%m-%dT%H:%M:%SZ), source revision $REVISION."
  echo "Each backend runs in its own job, as its users run it: psyne under psyrun, Open MPI under mpirun"
  echo "(psybench --backend mpi initializes MPI as a plain MPI program does). The two jobs alternate,"
  echo "$rounds rounds, the first one swapping each round; the ratios are medians over the rounds. f32, sum; every"
  echo "result is checked element by element against the oracle (#wrong column). Two cadences: \`stream\`"
  echo "(back to back, the slowest rank's time per operation, as nccl-tests) and \`osu\` (each call timed"
  echo "alone with an untimed barrier after it, the mean over ranks, as the OSU micro-benchmarks)."
  echo "busbw uses nccl-tests' bus factors; GB/s = 1e9 B/s. The MPI backend calls MPI as a C program"
  echo "would (MPI_IN_PLACE for all-reduce, no copies or allocations per call; see src/mpi/mod.rs), and"
  echo "\`scripts/bench/mpi-crosscheck.sh\` checks its times against a plain C benchmark."
  echo
  python3 scripts/report/lib.py machine-table "$load_before" "$load_after"
  echo
  echo "Raw bandwidth of this host, same run (\`psybench peak\`); the plots' peak line and the per-job tables' \"% of peak\" use $peak GB/s:"
  echo
  echo '```'
  cat "$out/peak.txt"
  echo '```'
  for i in "${!names[@]}"; do
    name=${names[$i]}
    echo
    echo "## ${whats[$i]}"
    echo
    echo '```'
    echo "${commands[$i]}"
    echo '```'
    echo
    echo "Ratios per size (\`psybench compare $name.json\`; A = psyne, B = Open MPI):"
    echo
    echo '```'
    cat "$out/$name-compare.txt"
    # psybench compare ends without a newline; the fence needs its own line.
    [ -z "$(tail -c 1 "$out/$name-compare.txt")" ] || echo
    echo '```'
    echo
    echo "Table: \`$name.txt\`; rows: \`$name.csv\`, \`$name.json\`; plot: \`$name.png\`."
  done
} > "$out/README.md"
echo "wrote $out"
