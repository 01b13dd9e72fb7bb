#!/usr/bin/env bash
# Installs the system packages psyne's build and tests need on Debian 12. Idempotent: installs
# only what is missing, so a second run is quick and needs no network. Run as root (or via sudo).
set -euo pipefail

packages=(
  build-essential   # cc for crates with C parts
  pkg-config
  procps            # ps, used by the launcher tests to look for leftover processes
  libopenmpi-dev    # the `mpi` feature (rsmpi): headers, mpicc, pkg-config files
  openmpi-bin       # mpirun, for the MPI backend's tests
  libclang-dev      # bindgen, used by mpi-sys and (feature `rdma`) rdma-mummy-sys
  cmake             # feature `rdma`: sideway's rdma-mummy-sys builds its verbs loader with cmake
  libibverbs1       # feature `rdma`: rdma-core's verbs library, loaded at run time (absent = no RDMA)
  ibverbs-providers # feature `rdma`: the adapter drivers libibverbs loads (mlx5, irdma, rxe, ...)
  libibverbs-dev    # rdma-core's verbs headers and ibv_devices/ibv_devinfo-style tooling for debugging
  openssh-server    # sshd in each host of the test cluster (scripts/cluster.sh)
  openssh-client    # ssh, to reach them
  iproute2          # ip netns, veth, bridge
  libhwloc15        # hwloc, which psyrun loads at run time to bind ranks to cores
  libssl-dev        # OpenSSL, which the ssh2 crate's bundled libssh2 is built against
  util-linux        # unshare, for the test cluster's per-host names
  python3           # scripts/hier-summary.py (benchmark reports)
  python3-venv      # the virtual environment of the Python package's tests (below)
  slurmctld         # the one-host Slurm cluster of scripts/slurm.sh (launcher/tests/slurm.rs)
  slurmd
  munge
  slurm-client      # salloc, sbatch, srun, sinfo
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

if [ ${#missing[@]} -gt 0 ]; then
  if [ "$(id -u)" -ne 0 ]; then
    echo "setup.sh: need root to install: ${missing[*]} (run: sudo $0)" >&2
    exit 1
  fi
  echo "setup.sh: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

if ! command -v cargo >/dev/null 2>&1; then
  echo "setup.sh: cargo is not on PATH; install Rust (https://rustup.rs) and run again" >&2
  exit 1
fi
echo "setup.sh: system packages present"

# The Python package's virtual environment (python/: maturin builds it; pytest tests it with NumPy
# and PyTorch). torch's default Linux wheel brings its CUDA libraries (about 3 GB, 3-4 minutes the
# first time); it runs on CPU. PSYNE_VENV moves it; PSYNE_SKIP_PYTHON=1 skips it.
if [ "${PSYNE_SKIP_PYTHON:-0}" != 1 ]; then
  venv="${PSYNE_VENV:-/opt/psyne-venv}"
  if ! "$venv/bin/python" -c 'import maturin, numpy, pytest, torch' >/dev/null 2>&1; then
    echo "setup.sh: creating the Python environment $venv (maturin, numpy, pytest, torch)"
    /usr/bin/python3 -m venv "$venv"
    "$venv/bin/pip" install --quiet --upgrade pip
    "$venv/bin/pip" install --quiet --no-cache-dir maturin numpy pytest torch
  fi
  echo "setup.sh: Python environment $venv present"
fi
