// The least a 2-rank ping-pong of BYTES-byte messages can cost with single-copy transfers
// (process_vm_readv, as psyne's rendezvous and Open MPI's CMA): the sender publishes a flag in
// shared memory, the receiver, already waiting, pulls the message into its own buffer and flags
// completion; then the roles swap. One process per core. Prints the median round trip. Used by
// scripts/floors.sh.
//
//   pingpong BYTES ITERS
#include "floors.h"

#include <stdatomic.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

typedef struct {
  _Alignas(64) _Atomic long posted[2];
  _Alignas(64) _Atomic long pulled[2];
  _Alignas(64) _Atomic long ready[2];
  long pid[2];
  uintptr_t buf[2];
} Shared;

int main(int argc, char **argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: %s BYTES ITERS\n", argv[0]);
    return 2;
  }
  size_t n = strtoull(argv[1], 0, 0);
  int iters = atoi(argv[2]);
  Shared *sh = mmap(0, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  int me = fork() == 0;
  pin_to_core(me);
  char *src = aligned_alloc(64, n ? n : 1), *dst = aligned_alloc(64, n ? n : 1);
  memset(src, me + 1, n);
  memset(dst, 0, n);
  sh->pid[me] = getpid();
  sh->buf[me] = (uintptr_t)src;
  atomic_store(&sh->ready[me], 1);
  while (!atomic_load(&sh->ready[1 - me])) {
  }
  long peer = sh->pid[1 - me];
  uintptr_t theirs = sh->buf[1 - me];
  double *t = malloc(iters * sizeof(double));
  long k = 0;
  for (int it = 0; it < iters; it++) {
    double a = now_us();
    for (int turn = 0; turn < 2; turn++) {
      k++;
      if (turn == me) {  // send: post, wait until pulled
        atomic_store(&sh->posted[me], k);
        while (atomic_load(&sh->pulled[me]) != k) {
        }
      } else {  // receive: wait for the post, pull, say so
        while (atomic_load(&sh->posted[1 - me]) != k) {
        }
        pull(peer, dst, (const void *)theirs, n);
        atomic_store(&sh->pulled[1 - me], k);
      }
    }
    t[it] = now_us() - a;
  }
  if (n && dst[n - 1] != 2 - me) {
    fprintf(stderr, "wrong data received\n");
    return 1;
  }
  if (me == 0) {
    printf("pingpong %zu B: %.2f us per round trip, median of %d\n", n, median(t, iters), iters);
    wait(0);
  }
  return 0;
}
