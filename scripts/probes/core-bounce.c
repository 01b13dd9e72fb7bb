/* core-bounce: how long a cache line takes to go from core 0 to core 1 and back right now, as a
 * gauge of the machine's state beside a benchmark job (results/job-swings/). Two threads, pinned
 * to cores 0 and 1, bounce a counter in one cache line ITERS times; prints the median round trip
 * of 101 batches in ns. Build and run:
 *   gcc -O2 -pthread -o /tmp/core-bounce scripts/probes/core-bounce.c && /tmp/core-bounce 20000 */
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#define BATCHES 101
static _Alignas(64) _Atomic long ball;
static long iters;

static void pin(int core) {
  cpu_set_t s;
  CPU_ZERO(&s);
  CPU_SET(core, &s);
  if (pthread_setaffinity_np(pthread_self(), sizeof s, &s) != 0) {
    perror("pthread_setaffinity_np");
    exit(3);
  }
}

static void *partner(void *arg) {
  (void)arg;
  pin(1);
  for (long i = 0; i < BATCHES * iters; i++) {
    while (atomic_load_explicit(&ball, memory_order_acquire) != 2 * i + 1) {
    }
    atomic_store_explicit(&ball, 2 * i + 2, memory_order_release);
  }
  return 0;
}

static int by_value(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

int main(int argc, char **argv) {
  iters = argc > 1 ? atol(argv[1]) : 20000;
  if (iters <= 0) {
    fprintf(stderr, "usage: %s [ITERS per batch]\n", argv[0]);
    return 2;
  }
  pthread_t t;
  pthread_create(&t, 0, partner, 0);
  pin(0);
  double ns[BATCHES];
  long v = 0;
  for (int b = 0; b < BATCHES; b++) {
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (long i = 0; i < iters; i++) {
      atomic_store_explicit(&ball, v + 1, memory_order_release);
      while (atomic_load_explicit(&ball, memory_order_acquire) != v + 2) {
      }
      v += 2;
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    ns[b] = ((t1.tv_sec - t0.tv_sec) * 1e9 + (t1.tv_nsec - t0.tv_nsec)) / iters;
  }
  pthread_join(t, 0);
  qsort(ns, BATCHES, sizeof ns[0], by_value);
  printf("core 0 <-> 1 round trip: %.1f ns (median of %d batches; %.1f-%.1f)\n", ns[BATCHES / 2],
         BATCHES, ns[0], ns[BATCHES - 1]);
  return 0;
}
