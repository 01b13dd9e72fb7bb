// Is the node board's time a matter of where its memory lies? The 2-rank all-reduce of
// scripts/probes/flat-allreduce.c (copy into this rank's slot, flag, sum the peer's slot in),
// run on P slot regions in turn, each mapped and touched before the fork (pages of their own),
// PASSES times over all of them; prints each region's mean µs per pass (mean over both ranks and
// ITERS calls, OSU style). A region fast in every pass and another slow in every pass would be
// placement; every region moving together is the machine (results/board-pair-allreduce/).
//
//   gcc -O3 -march=native -I scripts/probes/floors -o /tmp/board-placement scripts/probes/board-placement.c
//   /tmp/board-placement BYTES ITERS P PASSES        (P at most 64, PASSES at most 8)
#include "floors.h"
#include <stdatomic.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>
typedef struct { _Alignas(64) _Atomic long flag; } Flag;
typedef struct { _Alignas(64) _Atomic long gen[2]; Flag f[2][2]; double took[2]; double res[64][8]; } Ctl;
int main(int argc, char **argv) {
  if (argc != 5) {
    fprintf(stderr, "usage: %s BYTES ITERS P PASSES\n", argv[0]);
    return 2;
  }
  size_t bytes = strtoull(argv[1], 0, 0); int iters = atoi(argv[2]); int P = atoi(argv[3]); int passes = atoi(argv[4]);
  size_t n = bytes / 4;
  if (n == 0 || bytes % 4 || iters < 1 || P < 1 || P > 64 || passes < 1 || passes > 8) {
    fprintf(stderr, "%s: BYTES a positive multiple of 4, ITERS positive, P 1-64, PASSES 1-8\n", argv[0]);
    return 2;
  }
  Ctl *c = shared_zeroed(sizeof *c);
  float *regions[64];
  for (int p = 0; p < P; p++) regions[p] = shared_zeroed(4 * bytes);
  pid_t child = fork(); int me = child == 0, peer = 1 - me; pin_to_core(me);
  float *buf = aligned_alloc(64, bytes); long g = 1; long k = 0;
  for (int pass = 0; pass < passes; pass++)
  for (int p = 0; p < P; p++) {
    float *slots = regions[p]; double total = 0;
    for (int it = -20; it < iters; it++) {
      for (size_t i = 0; i < n; i++) buf[i] = (float)((i + me + it) % 7);
      atomic_store(&c->gen[me], g); while (atomic_load(&c->gen[peer]) < g) {} g++;
      double t0 = now_us();
      k++; int par = k & 1;
      float *mine = slots + (size_t)(me * 2 + par) * n, *theirs = slots + (size_t)(peer * 2 + par) * n;
      memcpy(mine, buf, bytes);
      atomic_store_explicit(&c->f[me][par].flag, k, memory_order_release);
      while (atomic_load_explicit(&c->f[peer][par].flag, memory_order_acquire) != k) {}
      for (size_t i = 0; i < n; i++) buf[i] += theirs[i];
      c->took[me] = now_us() - t0;
      atomic_store(&c->gen[me], g); while (atomic_load(&c->gen[peer]) < g) {} g++;
      if (it >= 0) total += (c->took[0] + c->took[1]) / 2;
    }
    if (!me) c->res[p][pass] = total / iters;
  }
  if (me) return 0;
  int st; waitpid(child, &st, 0);
  for (int p = 0; p < P; p++) {
    printf("region %2d:", p);
    for (int pass = 0; pass < passes; pass++) printf(" %.2f", c->res[p][pass]);
    printf("\n");
  }
  return 0;
}
