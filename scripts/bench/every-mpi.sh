# Sourced by the runners that measure every MPI on this host (versus-every-mpi.sh,
# versus-paired.sh), from the repository root: where scripts/setup.sh installs MPICH 5 and Intel
# MPI (the PyPI wheels), a check that they and Open MPI are there, the plain C benchmark
# (bench/c/mpi_coll_bench.c) built with each MPI's compiler, and each program's settings for a
# transport.
mpich=/opt/psyne-mpich
impi=/opt/psyne-impi

# Runs scripts/setup.sh, then exits 2 naming the first of the MPIs' compilers and launchers (and
# of the further files `$2...`) that is still missing. $1: the runner's name, for the message.
require_every_mpi() {
  local runner=$1 need
  shift
  scripts/setup.sh >/dev/null
  for need in "$(command -v mpicc || true)" "$mpich/bin/mpicc" "$mpich/bin/mpiexec" "$impi/bin/mpiexec" "$@"; do
    if [ ! -x "$need" ]; then
      echo "$runner: ${need:-mpicc} is missing: run scripts/setup.sh as root" >&2
      exit 2
    fi
  done
}

# The C benchmark built against each MPI: $1/cb-openmpi, $1/cb-mpich5, $1/cb-impi.
build_c_benchmarks() {
  local bin=$1 src=bench/c/mpi_coll_bench.c
  mpicc -O2 -Wall -Wextra -o "$bin/cb-openmpi" "$src"
  "$mpich/bin/mpicc" -O2 -Wall -Wextra -o "$bin/cb-mpich5" "$src"
  # Intel MPI's mpicc wrapper from the wheel has unsubstituted paths (../shared/PITFALLS.md).
  gcc -O2 -Wall -Wextra -I"$impi/include" -L"$impi/lib" -Wl,-rpath,"$impi/lib" \
    -o "$bin/cb-impi" "$src" -lmpi
}

# Each program's settings for transport $2 (shm: none, every default; tcp: every program over
# loopback TCP, each as its users ask for it), in psyne_net (psybench's flags), openmpi_net
# (mpirun's), mpich_net and impi_net (environment variables for `env`): Open MPI's ob1 with only
# the tcp and self BTLs on lo; MPICH's OFI netmod with the tcp provider on lo and
# MPIR_CVAR_NOLOCAL=1, so ranks of one host use it too; Intel MPI over OFI tcp on lo with
# I_MPI_COLL_INTRANODE=pt2pt, without which its collectives still run in shared memory (0.3 us at
# 8 B). Any other transport exits 2 naming the runner ($1).
every_mpi_transport() {
  case $2 in
    shm | tcp) ;;
    *) echo "$1: TRANSPORT must be shm or tcp, not '$2'" >&2; exit 2 ;;
  esac
  psyne_net=() openmpi_net=() mpich_net=() impi_net=()
  if [ "$2" = tcp ]; then
    psyne_net=(--transport tcp)
    openmpi_net=(--mca pml ob1 --mca btl tcp,self --mca btl_tcp_if_include lo)
    mpich_net=(MPIR_CVAR_NOLOCAL=1 MPIR_CVAR_CH4_NETMOD=ofi FI_PROVIDER=tcp FI_TCP_IFACE=lo)
    impi_net=(I_MPI_FABRICS=ofi I_MPI_COLL_INTRANODE=pt2pt FI_PROVIDER=tcp FI_TCP_IFACE=lo)
  fi
}
