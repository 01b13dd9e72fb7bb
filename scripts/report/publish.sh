# Sourced by the benchmark runners of scripts/bench/ before they measure anything:
#
#   . "$(dirname "$0")/../report/publish.sh"; set -- "${ARGS[@]}"
#
# takes `--allow-dirty` out of the runner's arguments (ARGS holds the rest) and sets REVISION to
# the build the report will name (`git describe --always --dirty`, via scripts/report/lib.py). A
# tree with uncommitted changes stops the runner at once, before an hour of measuring, unless
# `--allow-dirty` was given; REVISION then says the report was published with it.
ARGS=()
publish_allow=()
for publish_arg in "$@"; do
  if [ "$publish_arg" = --allow-dirty ]; then publish_allow=(--allow-dirty); else ARGS+=("$publish_arg"); fi
done
REVISION=$(python3 "$(dirname "${BASH_SOURCE[0]}")/lib.py" revision "${publish_allow[@]}") || exit 2
export REVISION
unset publish_arg publish_allow
