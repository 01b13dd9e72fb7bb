/* MPI_IN_PLACE is a macro whose value each MPI library chooses ((void *) 1 in Open MPI,
 * (void *) -1 in MPICH and its derivatives), and the `mpi` crate does not export it. This file
 * is compiled against the same mpi.h as the `mpi` crate (build.rs, feature `mpi`) so psyne's
 * MPI backend can pass the real value. */
#include <mpi.h>

void *psyne_mpi_in_place(void) { return MPI_IN_PLACE; }
