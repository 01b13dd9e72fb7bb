# Sourced by the benchmark runners that alternate several programs round by round
# (versus-every-mpi.sh, crossing.sh): `balanced_order ROUND PROGRAM...` prints the programs in the
# order of that round.
#
# The programs ($2...) in the order of round $1 (from 1) of a Williams design: row i of n
# programs is 0, 1, n-1, 2, n-2, ... each plus i, modulo n; with an odd n the rounds alternate a
# row and the reverse of that row, which together put every ordered pair side by side once.
balanced_order() {
  local round=$1
  shift
  local names=("$@") n=$# k idx row reverse=0 offsets=()
  idx=$((round - 1))
  if ((n % 2 == 1)); then
    idx=$(((round - 1) % (2 * n)))
    reverse=$((idx % 2))
    row=$((idx / 2))
  else
    row=$((idx % n))
  fi
  for ((k = 0; k < n; k++)); do
    if ((k == 0)); then
      offsets+=(0)
    elif ((k % 2 == 1)); then
      offsets+=($(((k + 1) / 2)))
    else
      offsets+=($((n - k / 2)))
    fi
  done
  local out=()
  for ((k = 0; k < n; k++)); do
    out+=("${names[$(((offsets[k] + row) % n))]}")
  done
  if ((reverse)); then
    local rev=()
    for ((k = n - 1; k >= 0; k--)); do rev+=("${out[k]}"); done
    out=("${rev[@]}")
  fi
  echo "${out[*]}"
}
