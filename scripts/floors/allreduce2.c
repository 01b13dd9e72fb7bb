// The least work a 2-rank all-reduce of caller-owned buffers can do with single-copy transfers
// (process_vm_readv, as psyne's pulls and Open MPI's CMA): each rank pulls the peer's copy of its
// half of the input and adds it into its own, then pulls the peer's reduced half. Both ranks work
// at once, one per core; the pull and the sum run in slices of SLICE bytes (0: whole) so the
// pulled bytes are still in the cache when they are summed. Checks the result, then prints the
// median time per call and its phases. Used by scripts/floors.sh.
//
//   allreduce2 BYTES ITERS [SLICE]
#define _GNU_SOURCE
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static double now_us(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1e6 + t.tv_nsec / 1e3;
}

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

static int by_value(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static void pull(long pid, void *dst, const void *src, size_t n) {
  struct iovec l = {dst, n}, r = {(void *)src, n};
  if (process_vm_readv(pid, &l, 1, &r, 1, 0) != (ssize_t)n) {
    perror("process_vm_readv");
    exit(1);
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
  cpu_set_t s;
  CPU_ZERO(&s);
  CPU_SET(me, &s);
  sched_setaffinity(0, sizeof s, &s);
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
  qsort(total, iters, sizeof(double), by_value);
  qsort(first, iters, sizeof(double), by_value);
  if (me == 0) {
    printf("allreduce2 %zu B, slices of %zu B: %.2f us per call (pull and sum %.2f), median of %d\n",
           n, slice, total[iters / 2], first[iters / 2], iters);
    wait(0);
  }
  return 0;
}
