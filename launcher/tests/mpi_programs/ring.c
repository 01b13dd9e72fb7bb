/* An ordinary MPI program, as users write them, for psyrun's tests of serving MPI jobs.
 *
 * Every rank checks what it gets against what it must get and prints one line:
 *   ring ok rank R of N (node-local peers L)
 * or, on the first wrong value, "ring FAILED rank R: ..." on stderr and exits 3.
 *
 * Modes (argv[1]):
 *   (none)        rank and size, a ring of MPI_Send/MPI_Recv, MPI_Allreduce, MPI_Bcast,
 *                 MPI_Comm_split (even and odd ranks), MPI_Barrier, MPI_Finalize
 *   abort R C     rank R calls MPI_Abort(MPI_COMM_WORLD, C) after the checks, once every rank
 *                 has printed its line; the others wait in MPI_Barrier
 *   exit R C      rank R exits with code C after MPI_Finalize
 *   hang R        every rank loops in MPI_Allreduce; rank R prints "ring looping" after the first
 *                 (for a test that SIGKILLs a rank inside MPI_Allreduce)
 *   hello         MPI_Init and MPI_Finalize only (launch time)
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int rank, size;

static void fail(const char *what, long got, long want) {
    fprintf(stderr, "ring FAILED rank %d: %s: got %ld, want %ld\n", rank, what, got, want);
    fflush(stderr);
    exit(3);
}

static void checks(void) {
    /* A ring: each rank sends its rank to the next and receives the previous one's. */
    int next = (rank + 1) % size, prev = (rank + size - 1) % size, got = -1;
    MPI_Sendrecv(&rank, 1, MPI_INT, next, 7, &got, 1, MPI_INT, prev, 7, MPI_COMM_WORLD,
                 MPI_STATUS_IGNORE);
    if (got != prev) fail("ring Sendrecv", got, prev);
    if (size > 1) {
        /* Plain Send/Recv: rank 0 to the last rank and back. */
        int last = size - 1, v = 1000 + size;
        if (rank == 0) {
            MPI_Send(&v, 1, MPI_INT, last, 8, MPI_COMM_WORLD);
            MPI_Recv(&got, 1, MPI_INT, last, 9, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            if (got != v + 1) fail("Recv from the last rank", got, v + 1);
        } else if (rank == last) {
            MPI_Recv(&got, 1, MPI_INT, 0, 8, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            if (got != v) fail("Recv from rank 0", got, v);
            got += 1;
            MPI_Send(&got, 1, MPI_INT, 0, 9, MPI_COMM_WORLD);
        }
    }
    /* All-reduce of 1000 doubles: element i sums to sum_r (r + i). */
    enum { COUNT = 1000 };
    static double in[COUNT], out[COUNT];
    for (int i = 0; i < COUNT; i++) in[i] = rank + i;
    MPI_Allreduce(in, out, COUNT, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    for (int i = 0; i < COUNT; i++) {
        double want = (double)size * (size - 1) / 2 + (double)size * i;
        if (out[i] != want) fail("Allreduce element", (long)out[i], (long)want);
    }
    /* Broadcast from the last rank. */
    long b = rank == size - 1 ? 424242L + size : -1;
    MPI_Bcast(&b, 1, MPI_LONG, size - 1, MPI_COMM_WORLD);
    if (b != 424242L + size) fail("Bcast", b, 424242L + size);
    /* Split into even and odd ranks; sum the world ranks in each half. */
    MPI_Comm half;
    MPI_Comm_split(MPI_COMM_WORLD, rank % 2, rank, &half);
    int hrank, hsize;
    MPI_Comm_rank(half, &hrank);
    MPI_Comm_size(half, &hsize);
    if (hrank != rank / 2) fail("Comm_split rank", hrank, rank / 2);
    int want_size = size / 2 + (rank % 2 == 0 ? size % 2 : 0);
    if (hsize != want_size) fail("Comm_split size", hsize, want_size);
    long mine = rank, sum = 0, want_sum = 0;
    MPI_Allreduce(&mine, &sum, 1, MPI_LONG, MPI_SUM, half);
    for (int r = rank % 2; r < size; r += 2) want_sum += r;
    if (sum != want_sum) fail("Allreduce in the split", sum, want_sum);
    MPI_Comm_free(&half);
    /* How many ranks share this node, as MPI sees it. */
    MPI_Comm node;
    int local;
    MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &node);
    MPI_Comm_size(node, &local);
    MPI_Comm_free(&node);
    MPI_Barrier(MPI_COMM_WORLD);
    printf("ring ok rank %d of %d (node-local peers %d)\n", rank, size, local);
    fflush(stdout);
}

int main(int argc, char **argv) {
    const char *mode = argc > 1 ? argv[1] : "";
    int who = argc > 2 ? atoi(argv[2]) : -1;
    int code = argc > 3 ? atoi(argv[3]) : 1;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (strcmp(mode, "hello") == 0) {
        MPI_Finalize();
        return 0;
    }
    if (strcmp(mode, "hang") == 0) {
        double x = 1, y;
        /* One all-reduce before the line: every rank has finished MPI_Init and made the
         * connections the loop uses, so a test that kills rank R on seeing the line kills it
         * inside MPI_Allreduce, not while a peer still sets up its shared memory with it. */
        MPI_Allreduce(&x, &y, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
        if (rank == who) {
            printf("ring looping rank %d\n", rank);
            fflush(stdout);
        }
        for (;;) MPI_Allreduce(&x, &y, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    }
    checks();
    if (strcmp(mode, "abort") == 0) {
        /* Every rank has printed its line before it enters this barrier, so none is lost to
         * the abort. */
        MPI_Barrier(MPI_COMM_WORLD);
        if (rank == who) MPI_Abort(MPI_COMM_WORLD, code);
        MPI_Barrier(MPI_COMM_WORLD);
    }
    MPI_Finalize();
    if (strcmp(mode, "exit") == 0 && rank == who) return code;
    return 0;
}
