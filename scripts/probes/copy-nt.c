/* copy-nt: copies of LEN bytes out of the cache with 16-byte non-temporal stores (64 bytes a step,
 * psyne's stream_copy, floors.h), 32-byte AVX non-temporal stores (128 bytes a step) and
 * memcpy; the best of 30 copies each, µs and GB/s (results/copy-vector/, "Not kept").
 *   gcc -O2 -mavx2 -I scripts/probes/floors -o /tmp/copy-nt scripts/probes/copy-nt.c && /tmp/copy-nt 16777216 */
#include "floors.h"

#include <immintrin.h>

/* psyne's copy (floors.h's stream_copy) and its fence. */
__attribute__((noinline)) static void nt16(char *d, const char *s, size_t n) {
  stream_copy(d, s, n);
  _mm_sfence();
}

/* The destination is page aligned, as the 32-byte stores need. */
__attribute__((noinline)) static void nt32(char *d, const char *s, size_t n) {
  for (size_t i = 0; i + 128 <= n; i += 128) {
    __m256i a = _mm256_loadu_si256((const __m256i *)(s + i));
    __m256i b = _mm256_loadu_si256((const __m256i *)(s + i + 32));
    __m256i c = _mm256_loadu_si256((const __m256i *)(s + i + 64));
    __m256i e = _mm256_loadu_si256((const __m256i *)(s + i + 96));
    _mm256_stream_si256((__m256i *)(d + i), a);
    _mm256_stream_si256((__m256i *)(d + i + 32), b);
    _mm256_stream_si256((__m256i *)(d + i + 64), c);
    _mm256_stream_si256((__m256i *)(d + i + 96), e);
  }
  _mm_sfence();
}

__attribute__((noinline)) static void plain(char *d, const char *s, size_t n) { memcpy(d, s, n); }

int main(int argc, char **argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: %s LEN (bytes, a multiple of 128 from 128 to 1G)\n", argv[0]);
    return 2;
  }
  size_t n = strtoull(argv[1], 0, 0);
  if (n < 128 || n > (1ull << 30) || n % 128) {
    fprintf(stderr, "LEN: a multiple of 128 from 128 to 1G\n");
    return 2;
  }
  char *s = aligned_alloc(4096, n), *d = aligned_alloc(4096, n);
  if (!s || !d) return 1;
  memset(s, 1, n);
  memset(d, 2, n);
  void (*copy[3])(char *, const char *, size_t) = {nt16, nt32, plain};
  const char *name[3] = {"nt16", "nt32", "memcpy"};
  double best[3] = {1e18, 1e18, 1e18};
  for (int r = 0; r < 30; r++) {
    for (int k = 0; k < 3; k++) {
      double t0 = 1e3 * now_us();
      copy[k](d, s, n);
      double t = 1e3 * now_us() - t0;
      if (t < best[k]) best[k] = t;
      if (memcmp(d, s, n) != 0) {
        fprintf(stderr, "%s copied wrong\n", name[k]);
        return 1;
      }
      memset(d, 2, n);
    }
  }
  for (int k = 0; k < 3; k++) printf("%s %zu %.1f us %.2f GB/s\n", name[k], n, best[k] / 1e3, n / best[k]);
  return 0;
}
