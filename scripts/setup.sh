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
  mpich             # MPICH 4.0.2 (mpiexec.mpich, mpicc.mpich; beside Open MPI through
  libmpich-dev      #   update-alternatives, which keeps Open MPI's mpirun): launcher/tests/it/root/mpi_programs.rs
  hyperfine         # scripts/bench/launch-bench.sh, scripts/bench/launch-mpi.sh
  libclang-dev      # bindgen, used by mpi-sys and (feature `rdma`) rdma-mummy-sys
  cmake             # feature `rdma`: sideway's rdma-mummy-sys builds its verbs loader with cmake
  libibverbs1       # feature `rdma`: rdma-core's verbs library, loaded at run time (absent = no RDMA)
  ibverbs-providers # feature `rdma`: the adapter drivers libibverbs loads (mlx5, irdma, rxe, ...)
  libibverbs-dev    # rdma-core's verbs headers and ibv_devices/ibv_devinfo-style tooling for debugging
  openssh-server    # sshd in each host of the test cluster (scripts/cluster/cluster.sh)
  openssh-client    # ssh, to reach them
  iproute2          # ip netns, veth, bridge
  libhwloc15        # hwloc, which psyrun loads at run time to bind ranks to cores
  libssl-dev        # OpenSSL, which the ssh2 crate's bundled libssh2 is built against
  util-linux        # unshare, for the test cluster's per-host names
  python3           # scripts/report/hier-summary.py (benchmark reports)
  python3-venv      # the virtual environment of the Python package's tests (below)
  python3-dev       # Python.h: psyne.torch builds its C++ half on first import (python/psyne/_torch_hot.py)
  slurmctld         # the one-host Slurm cluster of scripts/cluster/slurm.sh (launcher/tests/it/root/slurm.rs)
  slurmd
  munge
  slurm-client      # salloc, sbatch, srun, sinfo
  libpmi2-0         # Slurm's PMI-2 client library: Intel MPI's PMI-2 mode under psyrun (tests)
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

# MPI libraries from PyPI, each in its own venv, for psyrun's tests of serving ordinary MPI programs
# (launcher/tests/it/root/mpi_programs.rs, scripts/ci/mpi4py-suite.sh, scripts/bench/launch-mpi.sh), and mpi4py for
# every MPI here. mpi4py's wheel carries one extension per MPI ABI (MPICH's, Open MPI's) and
# dlopens the MPI library at import: found in its venv's lib/ (the mpich and impi-rt wheels), or
# named by MPI4PY_LIBMPI (libmpi.so.40 for Debian's Open MPI; libmpich.so.12 for Debian's MPICH,
# whose extension also needs a libmpi.so.12, the link made below, on LD_LIBRARY_PATH).
#   /opt/psyne-mpich   MPICH 5.0.2 (bin/mpicc, bin/mpiexec) + mpi4py
#   /opt/psyne-impi    Intel MPI (bin/mpiexec, bin/IMB-MPI1, lib/libmpi.so.12) + mpi4py. Pinned to
#                      2021.18.1: 2021.19.0 needs the `libfabric>=2.6` wheel, which the package index
#                      reachable here lacks, so pip would fall back to 2021.18.1 anyway.
#   /opt/psyne-mpi4py  mpi4py for Debian's Open MPI and MPICH, and src/: mpi4py's sdist, whose test/
#                      scripts/ci/mpi4py-suite.sh runs
# PSYNE_SKIP_MPI=1 skips all of it.
if [ "${PSYNE_SKIP_MPI:-0}" != 1 ]; then
  mpi4py=mpi4py==4.1.2
  # venv_has VENV REQUIREMENT...: whether VENV has exactly these pinned packages.
  venv_has() {
    local venv=$1 req have
    shift
    [ -x "$venv/bin/pip" ] || return 1
    have=$("$venv/bin/pip" list --format=freeze 2>/dev/null) || return 1
    for req in "$@"; do
      grep -qix "$req" <<<"$have" || return 1
    done
  }
  # mpi_venv VENV REQUIREMENT...: creates VENV (if need be) and installs the pinned packages.
  mpi_venv() {
    local venv=$1
    shift
    if ! venv_has "$venv" "$@"; then
      echo "setup.sh: installing $* into $venv"
      [ -x "$venv/bin/pip" ] || /usr/bin/python3 -m venv "$venv"
      "$venv/bin/pip" install --quiet --disable-pip-version-check --no-cache-dir "$@"
    fi
  }
  mpi_venv /opt/psyne-mpich mpich==5.0.2 "$mpi4py"
  mpi_venv /opt/psyne-impi impi-rt==2021.18.1 impi-devel==2021.18.1 "$mpi4py"
  mpi_venv /opt/psyne-mpi4py "$mpi4py"
  mkdir -p /opt/psyne-mpi4py/lib/mpich
  ln -sfn /usr/lib/x86_64-linux-gnu/libmpich.so.12 /opt/psyne-mpi4py/lib/mpich/libmpi.so.12
  src=/opt/psyne-mpi4py/src
  if [ ! -f "$src/test/main.py" ]; then
    echo "setup.sh: unpacking mpi4py's source (its test suite) into $src"
    tmp=$(mktemp -d)
    # --no-binary for mpi4py alone: its build tools still come as wheels (:all: would build
    # Cython from source, minutes).
    /opt/psyne-mpi4py/bin/pip download --quiet --disable-pip-version-check --no-deps \
      --no-binary mpi4py "$mpi4py" -d "$tmp"
    rm -rf "$src"
    mkdir -p "$src"
    tar -xzf "$tmp"/mpi4py-*.tar.gz -C "$src" --strip-components=1
    rm -rf "$tmp"
  fi
  echo "setup.sh: MPI environments /opt/psyne-mpich, /opt/psyne-impi, /opt/psyne-mpi4py present"
fi
