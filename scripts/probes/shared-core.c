/* shared-core: do cores 0 and 1 share one physical core right now (two hardware threads of it)?
 * Times a throughput-bound loop (eight independent 64-bit multiply chains) on core 1 alone, then on
 * cores 0 and 1 at once, and prints the slower of the two together ÷ alone: ~1.0 on two cores,
 * ~1.9 on two threads of one core (results/job-swings/shared-core.txt). A single dependent chain
 * would not tell: a core's other thread fills the slots such a chain leaves idle. Build and run:
 *   gcc -O2 -pthread -o /tmp/shared-core scripts/probes/shared-core.c && /tmp/shared-core */
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <time.h>

#define ROUNDS 30000000L

static atomic_int go;

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec * 1e-9;
}

static void pin(int core) {
  cpu_set_t s;
  CPU_ZERO(&s);
  CPU_SET(core, &s);
  pthread_setaffinity_np(pthread_self(), sizeof s, &s);
}

/* Seconds for ROUNDS rounds of eight independent multiply-adds. */
static double chains(void) {
  uint64_t v[8] = {1, 2, 3, 4, 5, 6, 7, 8};
  double t = now();
  for (long i = 0; i < ROUNDS; i++) {
    for (int k = 0; k < 8; k++) v[k] = v[k] * 6364136223846793005ULL + 1;
    __asm__ volatile("" : : "r"(v[0]), "r"(v[1]), "r"(v[2]), "r"(v[3]), "r"(v[4]), "r"(v[5]),
                     "r"(v[6]), "r"(v[7]));
  }
  return now() - t;
}

static void *on_core0(void *out) {
  pin(0);
  while (!atomic_load(&go)) {
  }
  *(double *)out = chains();
  return NULL;
}

int main(void) {
  pin(1);
  double alone = chains(), other = 0;
  pthread_t th;
  if (pthread_create(&th, NULL, on_core0, &other) != 0) {
    perror("pthread_create");
    return 1;
  }
  atomic_store(&go, 1);
  double mine = chains();
  pthread_join(th, NULL);
  double together = mine > other ? mine : other;
  printf("alone %.4f s together %.4f s ratio %.2f\n", alone, together, together / alone);
  return 0;
}
