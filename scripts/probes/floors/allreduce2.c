// The least work a 2-rank all-reduce of caller-owned buffers can do with single-copy transfers
// (process_vm_readv, as psyne's pulls and Open MPI's CMA): each rank pulls the peer's copy of its
// half of the input and adds it into its own, then pulls the peer's reduced half. Both ranks work
// at once, one per core; the pull and the sum run in slices of SLICE bytes (0: whole) so the
// pulled bytes are still in the cache when they are summed. Checks the result, then prints the
// median time per call and its phases. Used by scripts/floors.sh.
//
//   allreduce2 BYTES ITERS [SLICE]
#include "floors.h"

#include <stdatomic.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

typedef struct {
  _Alignas(64) _Atomic long gen[2];
  long pid[2];
  uintptr_t buf[2];
} Shared;
static Shared *sh;

static void barrier(int me, long g) {
  atomic_store(&sh->gen[me], g);
  while (atomic_load(&sh->gen[1 - me]) < g) {
  }
}

int main(int argc, char **argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: %s BYTES ITERS [SLICE]\n", argv[0]);
    return 2;
  }
  size_t n = strtoull(argv[1], 0, 0), slice = argc > 3 ? strtoull(argv[3], 0, 0) : 0;
  int iters = atoi(argv[2]);
  sh = mmap(0, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  int me = fork() == 0 ? 1 : 0;
  pin_to_core(me);
  size_t cnt = n / 4, half = cnt / 2;
  if (slice == 0 || slice > half * 4) slice = half * 4;
  size_t slice_n = slice / 4;
  float *buf = aligned_alloc(64, n), *tmp = aligned_alloc(64, slice);
  memset(tmp, 0, slice);
  sh->pid[me] = getpid();
  sh->buf[me] = (uintptr_t)buf;
  long g = 1;
  barrier(me, g++);
  long peer = sh->pid[1 - me];
  float *theirs = (float *)sh->buf[1 - me];
  size_t mine = me * half, other = half - mine;
  double *total = malloc(iters * sizeof(double)), *first = malloc(iters * sizeof(double));
  for (int it = 0; it < iters; it++) {
    for (size_t i = 0; i < cnt; i++) buf[i] = me + 1;  // fresh input, as just written
    barrier(me, g++);
    double a = now_us();
    for (size_t at = 0; at < half; at += slice_n) {
      size_t k = half - at < slice_n ? half - at : slice_n;
      pull(peer, tmp, theirs + mine + at, k * 4);
      float *d = buf + mine + at;
      for (size_t i = 0; i < k; i++) d[i] += tmp[i];
    }
    double b = now_us();
    barrier(me, g++);
    pull(peer, buf + other, theirs + other, half * 4);
    double c = now_us();
    barrier(me, g++);
    total[it] = c - a;
    first[it] = b - a;
  }
  for (size_t i = 0; i < 2 * half; i++)
    if (buf[i] != 3) {
      fprintf(stderr, "wrong result at %zu: %f\n", i, buf[i]);
      return 1;
    }
  if (me == 0) {
    printf("allreduce2 %zu B, slices of %zu B: %.2f us per call (pull and sum %.2f), median of %d\n",
           n, slice, median(total, iters), median(first, iters), iters);
    wait(0);
  }
  return 0;
}
