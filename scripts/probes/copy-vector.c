/* copy-vector: how long memcpy, a 16-byte vector loop (src/copy.rs before 2026-11-29) and a
 * 32-byte AVX2 loop (src/copy.rs after) take to copy LEN bytes in the cache, the destination D
 * bytes after the source modulo 4 KiB. The best of 300 copies, ns. Run it once as it is (glibc's
 * memcpy then copies 2 KiB-448 KiB with `rep movsb` on the AMD VM) and once with
 * GLIBC_TUNABLES=glibc.cpu.x86_rep_movsb_threshold=2000000 (glibc's own vector loop instead).
 * Build and run (results/copy-vector/):
 *   gcc -O2 -mavx2 -I scripts/probes/floors -o /tmp/copy-vector scripts/probes/copy-vector.c && /tmp/copy-vector 32768 */
#include "floors.h"

#include <immintrin.h>

/* 128 bytes a step, unaligned loads and stores; the last 128 bytes loaded before the loop and
 * stored after it (they may overlap the loop's last block). n >= 128. */
__attribute__((noinline)) static void loop32(char *d, const char *s, size_t n) {
  __m256i t0 = _mm256_loadu_si256((const __m256i *)(s + n - 128));
  __m256i t1 = _mm256_loadu_si256((const __m256i *)(s + n - 96));
  __m256i t2 = _mm256_loadu_si256((const __m256i *)(s + n - 64));
  __m256i t3 = _mm256_loadu_si256((const __m256i *)(s + n - 32));
  for (size_t i = 0; i + 128 < n; i += 128) {
    __m256i a = _mm256_loadu_si256((const __m256i *)(s + i));
    __m256i b = _mm256_loadu_si256((const __m256i *)(s + i + 32));
    __m256i c = _mm256_loadu_si256((const __m256i *)(s + i + 64));
    __m256i e = _mm256_loadu_si256((const __m256i *)(s + i + 96));
    _mm256_storeu_si256((__m256i *)(d + i), a);
    _mm256_storeu_si256((__m256i *)(d + i + 32), b);
    _mm256_storeu_si256((__m256i *)(d + i + 64), c);
    _mm256_storeu_si256((__m256i *)(d + i + 96), e);
  }
  _mm256_storeu_si256((__m256i *)(d + n - 128), t0);
  _mm256_storeu_si256((__m256i *)(d + n - 96), t1);
  _mm256_storeu_si256((__m256i *)(d + n - 64), t2);
  _mm256_storeu_si256((__m256i *)(d + n - 32), t3);
}

/* As loop32, the stores aligned to 32 bytes: the first 32 bytes stored unaligned, then the loop
 * from the destination's next 32-byte boundary. */
__attribute__((noinline)) static void loop32a(char *d, const char *s, size_t n) {
  __m256i h = _mm256_loadu_si256((const __m256i *)s);
  __m256i t0 = _mm256_loadu_si256((const __m256i *)(s + n - 128));
  __m256i t1 = _mm256_loadu_si256((const __m256i *)(s + n - 96));
  __m256i t2 = _mm256_loadu_si256((const __m256i *)(s + n - 64));
  __m256i t3 = _mm256_loadu_si256((const __m256i *)(s + n - 32));
  size_t i = 32 - ((uintptr_t)d & 31);
  for (; i + 128 < n; i += 128) {
    __m256i a = _mm256_loadu_si256((const __m256i *)(s + i));
    __m256i b = _mm256_loadu_si256((const __m256i *)(s + i + 32));
    __m256i c = _mm256_loadu_si256((const __m256i *)(s + i + 64));
    __m256i e = _mm256_loadu_si256((const __m256i *)(s + i + 96));
    _mm256_store_si256((__m256i *)(d + i), a);
    _mm256_store_si256((__m256i *)(d + i + 32), b);
    _mm256_store_si256((__m256i *)(d + i + 64), c);
    _mm256_store_si256((__m256i *)(d + i + 96), e);
  }
  _mm256_storeu_si256((__m256i *)d, h);
  _mm256_storeu_si256((__m256i *)(d + n - 128), t0);
  _mm256_storeu_si256((__m256i *)(d + n - 96), t1);
  _mm256_storeu_si256((__m256i *)(d + n - 64), t2);
  _mm256_storeu_si256((__m256i *)(d + n - 32), t3);
}

typedef void (*copy_fn)(char *, const char *, size_t);

static double best(copy_fn f, char *dst, const char *src, size_t len) {
  double b = 1e18;
  for (int r = 0; r < 300; r++) {
    double t0 = 1e3 * now_us();
    f(dst, src, len);
    double t1 = 1e3 * now_us();
    if (t1 - t0 < b) b = t1 - t0;
  }
  if (memcmp(dst, src, len) != 0) {
    fprintf(stderr, "copy wrong\n");
    exit(1);
  }
  return b;
}

static void libc_memcpy(char *d, const char *s, size_t n) { memcpy(d, s, n); }

int main(int argc, char **argv) {
  size_t len = argc > 1 ? strtoull(argv[1], 0, 0) : 32768;
  if (len < 128 || len > (16u << 20)) {
    fprintf(stderr, "usage: %s [LEN bytes, 128..16M]\n", argv[0]);
    return 2;
  }
  char *base = aligned_alloc(4096, 48u << 20);
  if (!base) return 1;
  for (size_t i = 0; i < (48u << 20); i++) base[i] = (char)(i * 7 + i / 251);
  int offsets[] = {0, 8, 24};  // the source's offset from a 64-byte boundary
  int distances[] = {0, 1, 8, 16, 31, 32, 64, 2048};
  printf("len %zu: ns per copy, best of 300\n%6s %9s %9s %9s %9s %9s\n", len, "srcoff", "distance",
         "memcpy", "loop16", "loop32", "loop32a");
  for (size_t o = 0; o < sizeof offsets / sizeof *offsets; o++) {
    const char *src = base + 4096 + 256 + offsets[o];
    for (size_t k = 0; k < sizeof distances / sizeof *distances; k++) {
      char *dst = base + (24u << 20) + 256 + offsets[o] + distances[k];
      printf("%6d %9d %9.0f %9.0f %9.0f %9.0f\n", offsets[o], distances[k],
             best(libc_memcpy, dst, src, len), best(copy_loop16, dst, src, len),
             best(loop32, dst, src, len), best(loop32a, dst, src, len));
    }
  }
  return 0;
}
