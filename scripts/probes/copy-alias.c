/* copy-alias: how long memcpy and a plain 16-byte vector loop take to copy LEN bytes when the
 * destination lies D bytes after the source modulo 4 KiB, for D from 0 to 128 and a few far
 * ones (src/copy.rs, results/copy-alias/). Both buffers stay in the cache (the best of 200 copies).
 * Build and run:
 *   gcc -O2 -o /tmp/copy-alias scripts/probes/copy-alias.c && /tmp/copy-alias 32768 */
#define _GNU_SOURCE
#include <emmintrin.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1e9 + t.tv_nsec;
}

/* 64 bytes a step with unaligned 16-byte loads and stores, the rest by memcpy (as src/copy.rs). */
__attribute__((noinline)) static void copy_loop(char *d, const char *s, size_t n) {
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

int main(int argc, char **argv) {
  size_t len = argc > 1 ? strtoull(argv[1], 0, 0) : 32768;
  if (len == 0 || len > (16u << 20)) {
    fprintf(stderr, "usage: %s [LEN bytes, 1..16M]\n", argv[0]);
    return 2;
  }
  char *base = aligned_alloc(4096, 48u << 20);
  if (!base) return 1;
  memset(base, 1, 48u << 20);
  char *src = base + 4096 + 256;
  int distances[] = {0, 1, 4, 8, 16, 24, 28, 31, 32, 48, 63, 64, 96, 128, 1024, 2048, 4095};
  printf("len %zu: ns per copy, best of 200\n%9s %10s %10s %8s\n", len, "distance", "memcpy", "loop",
         "ratio");
  for (size_t k = 0; k < sizeof distances / sizeof *distances; k++) {
    char *dst = base + (24u << 20) + 256 + distances[k];
    double best_m = 1e18, best_l = 1e18;
    for (int r = 0; r < 200; r++) {
      double t0 = now_ns();
      memcpy(dst, src, len);
      double t1 = now_ns();
      copy_loop(dst, src, len);
      double t2 = now_ns();
      if (t1 - t0 < best_m) best_m = t1 - t0;
      if (t2 - t1 < best_l) best_l = t2 - t1;
    }
    if (memcmp(dst, src, len) != 0) {
      fprintf(stderr, "copy wrong at distance %d\n", distances[k]);
      return 1;
    }
    printf("%9d %10.0f %10.0f %8.2f\n", distances[k], best_m, best_l, best_m / best_l);
  }
  return 0;
}
