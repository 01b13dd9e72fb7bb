// What the floor programs and the copy probes share: a clock, pinning, a two-process barrier, a
// median and a mean, the kernel's single copy from another process (process_vm_readv, as psyne's
// pulls and Open MPI's CMA), and psyne's copy loops in C (the 16-byte loop of src/copy.rs, the
// non-temporal copy of src/transport/shm/stream_copy.rs).
#ifndef PSYNE_FLOORS_H
#define PSYNE_FLOORS_H
#define _GNU_SOURCE
#include <emmintrin.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <time.h>

static inline double now_us(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1e6 + t.tv_nsec / 1e3;
}

// Runs the calling process on core `core` only.
static inline void pin_to_core(int core) {
  cpu_set_t s;
  CPU_ZERO(&s);
  CPU_SET(core, &s);
  sched_setaffinity(0, sizeof s, &s);
}

static inline int by_value(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

// A barrier of two processes: rank `me` (0 or 1) announces generation `*g` in `gen[me]`, spins
// until the other rank has announced it too, and moves `*g` on to the next.
static inline void meet(_Atomic long gen[2], int me, long *g) {
  atomic_store(&gen[me], *g);
  while (atomic_load(&gen[1 - me]) < *g) {
  }
  (*g)++;
}

// The median of `n` times (sorts them).
static inline double median(double *t, int n) {
  qsort(t, n, sizeof(double), by_value);
  return t[n / 2];
}

// The mean of `n` times.
static inline double average(const double *t, int n) {
  double sum = 0;
  for (int i = 0; i < n; i++) sum += t[i];
  return sum / n;
}

// Copies `n` bytes at `src` in process `pid` into `dst`; exits on failure.
static inline void pull(pid_t pid, void *dst, const void *src, size_t n) {
  struct iovec l = {dst, n}, r = {(void *)src, n};
  if (process_vm_readv(pid, &l, 1, &r, 1, 0) != (ssize_t)n) {
    perror("process_vm_readv");
    exit(1);
  }
}

// `bytes` of zeroed memory shared with the processes this one forks; exits on failure.
static inline void *shared_zeroed(size_t bytes) {
  void *p = mmap(0, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) {
    perror("mmap");
    exit(1);
  }
  memset(p, 0, bytes);
  return p;
}

// Copies `n` bytes with SSE2 non-temporal stores (past the cache) once `dst` is 16-byte aligned,
// as psyne's src/transport/shm/stream_copy.rs; the caller fences (_mm_sfence) before it
// publishes anything the bytes must precede.
static inline void stream_copy(void *dst, const void *src, size_t n) {
  char *d = dst;
  const char *s = src;
  size_t i = ((uintptr_t)d & 15) ? 16 - ((uintptr_t)d & 15) : 0;
  if (i > n) i = n;
  memcpy(d, s, i);
  for (; i + 64 <= n; i += 64) {
    __m128i a = _mm_loadu_si128((const __m128i *)(s + i));
    __m128i b = _mm_loadu_si128((const __m128i *)(s + i + 16));
    __m128i c = _mm_loadu_si128((const __m128i *)(s + i + 32));
    __m128i e = _mm_loadu_si128((const __m128i *)(s + i + 48));
    _mm_stream_si128((__m128i *)(d + i), a);
    _mm_stream_si128((__m128i *)(d + i + 16), b);
    _mm_stream_si128((__m128i *)(d + i + 32), c);
    _mm_stream_si128((__m128i *)(d + i + 48), e);
  }
  memcpy(d + i, s + i, n - i);
}

// 64 bytes a step with unaligned 16-byte loads and stores, the rest by memcpy: src/copy.rs's loop
// for CPUs without AVX (and for every CPU before 2026-11-29).
__attribute__((noinline, unused)) static void copy_loop16(char *d, const char *s, size_t n) {
  size_t i = 0;
  for (; i + 64 <= n; i += 64) {
    __m128i a = _mm_loadu_si128((const __m128i *)(s + i));
    __m128i b = _mm_loadu_si128((const __m128i *)(s + i + 16));
    __m128i c = _mm_loadu_si128((const __m128i *)(s + i + 32));
    __m128i e = _mm_loadu_si128((const __m128i *)(s + i + 48));
    _mm_storeu_si128((__m128i *)(d + i), a);
    _mm_storeu_si128((__m128i *)(d + i + 16), b);
    _mm_storeu_si128((__m128i *)(d + i + 32), c);
    _mm_storeu_si128((__m128i *)(d + i + 48), e);
  }
  memcpy(d + i, s + i, n - i);
}

#endif
