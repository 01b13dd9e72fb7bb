// Which 2-rank all-reduce data path keeps its speed when the machine's cross-core round trip is
// 5x slower? Two threads on cores 0 and 1; each round: the round trip, then each pattern ITERS
// calls of BYTES, median per call. Prints one line per round.
#define _GNU_SOURCE
#include <immintrin.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_us(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1e6 + t.tv_nsec / 1e3;
}
static void pin(int c) {
  cpu_set_t s;
  CPU_ZERO(&s);
  CPU_SET(c, &s);
  pthread_setaffinity_np(pthread_self(), sizeof s, &s);
}
static int cmpd(const void *a, const void *b) {
  double x = *(double *)a, y = *(double *)b;
  return (x > y) - (x < y);
}

#define RING (1 << 20)
static size_t N, H;  // bytes per rank, half
static int ITERS, ROUNDS;
static float *buf[2], *scratch[2], *stage[2];
static char *ring[2];  // ring[me] is written by me, read by peer
static _Alignas(64) _Atomic long tail[2];
static _Alignas(64) _Atomic long head[2];
static _Alignas(64) _Atomic long gen[2];
static _Alignas(64) _Atomic long ball;
static long pos[2];  // my write position into ring[me] (bytes ever written)
static long rpos[2];  // my read position of ring[peer]
static long g[2];

static void barrier(int me) {
  long v = ++g[me];
  atomic_store(&gen[me], v);
  while (atomic_load(&gen[1 - me]) < v) _mm_pause();
}

static void copy_nt(void *d, const void *s, size_t n) {
  __m128i *dd = d;
  const __m128i *ss = s;
  for (size_t i = 0; i < n / 16; i++) _mm_stream_si128(dd + i, _mm_loadu_si128(ss + i));
  _mm_sfence();
}
#ifndef PF
#define PF 2048
#endif
static void copy_pf(void *d, const void *s, size_t n) {
  char *dd = d;
  const char *ss = s;
  size_t i = 0;
  for (; i + 64 <= n; i += 64) {
    _mm_prefetch(ss + i + PF, _MM_HINT_T0);
    __m256i a = _mm256_loadu_si256((const __m256i *)(ss + i)), b = _mm256_loadu_si256((const __m256i *)(ss + i + 32));
    _mm256_storeu_si256((__m256i *)(dd + i), a);
    _mm256_storeu_si256((__m256i *)(dd + i + 32), b);
  }
  memcpy(dd + i, ss + i, n - i);
}
static void copy_pfw(void *d, const void *s, size_t n) {
  char *dd = d;
  const char *ss = s;
  size_t i = 0;
  for (; i + 64 <= n; i += 64) {
    _m_prefetchw(dd + i + PF);
    __m256i a = _mm256_loadu_si256((const __m256i *)(ss + i)), b = _mm256_loadu_si256((const __m256i *)(ss + i + 32));
    _mm256_storeu_si256((__m256i *)(dd + i), a);
    _mm256_storeu_si256((__m256i *)(dd + i + 32), b);
  }
  memcpy(dd + i, ss + i, n - i);
}
static int PFMODE;
static void add(float *d, const float *s, size_t n) {
  for (size_t i = 0; i < n; i++) d[i] += s[i];
}

// Send n bytes at src through ring[me] (whole message fits: n <= RING/2).
static void ring_send(int me, const void *src, size_t n, int nt) {
  while (pos[me] + (long)n - atomic_load(&head[me]) > RING) _mm_pause();
  size_t at = pos[me] & (RING - 1);
  size_t first = n < RING - at ? n : RING - at;
  if (nt) {
    copy_nt(ring[me] + at, src, first);
    copy_nt(ring[me], (char *)src + first, n - first);
  } else if (PFMODE) {
    copy_pfw(ring[me] + at, src, first);
    copy_pfw(ring[me], (char *)src + first, n - first);
  } else {
    memcpy(ring[me] + at, src, first);
    memcpy(ring[me], (char *)src + first, n - first);
  }
  pos[me] += n;
  atomic_store(&tail[me], pos[me]);
}
static void ring_recv(int me, void *dst, size_t n) {
  int p = 1 - me;
  while (atomic_load(&tail[p]) < rpos[me] + (long)n) _mm_pause();
  size_t at = rpos[me] & (RING - 1);
  size_t first = n < RING - at ? n : RING - at;
  if (PFMODE) {
    copy_pf(dst, ring[p] + at, first);
    copy_pf((char *)dst + first, ring[p], n - first);
  } else {
    memcpy(dst, ring[p] + at, first);
    memcpy((char *)dst + first, ring[p], n - first);
  }
  rpos[me] += n;
  atomic_store(&head[p], rpos[me]);
}

// psyne-like: reduce-scatter then all-gather through rings (scratch copy, then add).
static void p_ring(int me, int nt) {
  float *b = buf[me];
  size_t hn = H / 4, mine = me * hn, other = (1 - me) * hn;
  ring_send(me, b + other, H, nt);
  ring_recv(me, scratch[me], H);
  add(b + mine, scratch[me], hn);
  ring_send(me, b + mine, H, nt);
  ring_recv(me, b + other, H);
}
// Read the peer's buffer directly (one address space, as xpmem or shared buffers).
static void p_direct(int me) {
  float *b = buf[me], *t = buf[1 - me];
  size_t hn = H / 4, mine = me * hn, other = (1 - me) * hn;
  barrier(me);
  add(b + mine, t + mine, hn);
  barrier(me);
  memcpy(b + other, t + other, H);
  barrier(me);
}
// Copy in to a fixed staging area, reduce from the peer's staging, publish, copy out.
static void p_stage(int me, int nt) {
  float *b = buf[me], *s = stage[me], *t = stage[1 - me];
  size_t hn = H / 4, mine = me * hn, other = (1 - me) * hn;
  if (nt) copy_nt(s + other, b + other, H);
  else memcpy(s + other, b + other, H);
  barrier(me);
  add(b + mine, t + mine, hn);
  if (nt) copy_nt(s + mine, b + mine, H);
  else memcpy(s + mine, b + mine, H);
  barrier(me);
  memcpy(b + other, t + other, H);
  barrier(me);
}

#define NP 5
static const char *names[NP] = {"ring", "ring_nt", "ring_pf", "ring_nt_pf", "stage_nt"};
static double res[NP];

static void run(int me, int p) {
  switch (p) {
    case 0: p_ring(me, 0); break;
    case 1: p_ring(me, 1); break;
    case 2: PFMODE = 1; p_ring(me, 0); PFMODE = 0; break;
    case 3: PFMODE = 1; p_ring(me, 1); PFMODE = 0; break;
    case 4: p_stage(me, 1); break;
  }
}

static double bounce(int me) {
  double t0 = now_us();
  for (long i = 0; i < 20000; i++) {
    if (me == 0) {
      atomic_store(&ball, 2 * i + 1);
      while (atomic_load(&ball) != 2 * i + 2) _mm_pause();
    } else {
      while (atomic_load(&ball) != 2 * i + 1) _mm_pause();
      atomic_store(&ball, 2 * i + 2);
    }
  }
  return (now_us() - t0) / 20000 * 1000;
}

static void *worker(void *arg) {
  int me = (int)(long)arg;
  pin(me);
  double *t = malloc(ITERS * sizeof(double));
  for (int r = 0; r < ROUNDS; r++) {
    barrier(me);
    atomic_store(&ball, 0);
    barrier(me);
    double bn = bounce(me);
    barrier(me);
    for (int p = 0; p < NP; p++) {
      for (int i = 0; i < ITERS; i++) {
        barrier(me);
        double a = now_us();
        run(me, p);
        t[i] = now_us() - a;
      }
      qsort(t, ITERS, sizeof(double), cmpd);
      if (me == 0) res[p] = t[ITERS / 2];
    }
    if (me == 0) {
      printf("%zu bounce %6.1f", N, bn);
      for (int p = 0; p < NP; p++) printf("  %s %8.2f", names[p], res[p]);
      printf("\n");
      fflush(stdout);
    }
  }
  return 0;
}

int main(int argc, char **argv) {
  N = argc > 1 ? strtoull(argv[1], 0, 0) : 65536;
  ITERS = argc > 2 ? atoi(argv[2]) : 500;
  ROUNDS = argc > 3 ? atoi(argv[3]) : 5;
  H = N / 2;
  for (int i = 0; i < 2; i++) {
    buf[i] = aligned_alloc(4096, N);
    scratch[i] = aligned_alloc(4096, N);
    stage[i] = aligned_alloc(4096, N);
    ring[i] = aligned_alloc(4096, RING);
    memset(buf[i], 0, N);
    memset(scratch[i], 0, N);
    memset(stage[i], 0, N);
    memset(ring[i], 0, RING);
  }
  pthread_t th[2];
  for (long i = 0; i < 2; i++) pthread_create(&th[i], 0, worker, (void *)i);
  for (int i = 0; i < 2; i++) pthread_join(th[i], 0);
  return 0;
}
