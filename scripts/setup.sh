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
