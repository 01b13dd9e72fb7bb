/* copy-alias: how long memcpy and a plain 16-byte vector loop take to copy LEN bytes when the
 * destination lies D bytes after the source modulo 4 KiB, for D from 0 to 128 and a few far
 * ones (src/copy.rs, results/copy-alias/). Both buffers stay in the cache (the best of 200 copies).
 * Build and run:
 *   gcc -O2 -I scripts/probes/floors -o /tmp/copy-alias scripts/probes/copy-alias.c && /tmp/copy-alias 32768 */
#include "floors.h"

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
      double t0 = 1e3 * now_us();
      memcpy(dst, src, len);
      double t1 = 1e3 * now_us();
      copy_loop16(dst, src, len);
      double t2 = 1e3 * now_us();
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
