// Does it cost to write over lines the other core read a call ago? A 2-rank all-gather (MODE
// allgather: each rank copies its half into its place, raises a flag, copies its half into its
// output and the peer's from the peer's place) or all-reduce (MODE allreduce: the peer's place
// summed into this rank's buffer) of BYTES in total (all-reduce: of BYTES/2 per rank), where
// each rank's places (BYTES/2 each) rotate through AREA bytes: AREA = BYTES/2 reuses one place
// every call, AREA = BYTES alternates two (as slots double-buffered by parity do), larger areas
// come back to a place only every AREA / (BYTES/2) calls. Flags stay put. OSU style: the ranks (cores 0 and 1) meet at a barrier,
// the call is timed; prints the mean over both ranks and ITERS calls
// (results/board-rotation/).
//
//   gcc -O3 -march=native -I scripts/probes/floors -o /tmp/slot-rotation scripts/probes/slot-rotation.c
//   /tmp/slot-rotation allgather|allreduce BYTES ITERS AREA
#include "floors.h"
#include <stdatomic.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>
typedef struct { _Alignas(64) _Atomic long flag; } Flag;
typedef struct { _Alignas(64) _Atomic long gen[2]; Flag f[2][2]; double took[2]; } Ctl;
int main(int argc, char **argv) {
  if (argc != 5) {
    fprintf(stderr, "usage: %s allgather|allreduce BYTES ITERS AREA\n", argv[0]);
    return 2;
  }
  int reduce = strcmp(argv[1], "allreduce") == 0;
  size_t bytes = strtoull(argv[2], 0, 0), chunk = bytes / 2, area = strtoull(argv[4], 0, 0);
  int iters = atoi(argv[3]);
  if ((!reduce && strcmp(argv[1], "allgather") != 0) || chunk == 0 || chunk % 64 || iters < 1 ||
      area < chunk || area % chunk) {
    fprintf(stderr, "%s: BYTES/2 a positive multiple of 64, ITERS positive, AREA a multiple of BYTES/2\n", argv[0]);
    return 2;
  }
  size_t places = area / chunk;
  Ctl *c = shared_zeroed(sizeof *c);
  char *areas = shared_zeroed(2 * area);
  pid_t child = fork(); int me = child == 0, peer = 1 - me; pin_to_core(me);
  char *in = aligned_alloc(64, chunk), *out = aligned_alloc(64, bytes);
  memset(in, me + 1, chunk); memset(out, 0, bytes);
  long g = 1; double total = 0;
  for (int it = -20; it < iters; it++) {
    atomic_store(&c->gen[me], g); while (atomic_load(&c->gen[peer]) < g) {} g++;
    double t0 = now_us();
    long k = it + 21; int par = k & 1;
    size_t at = (size_t)(k % places) * chunk;
    char *mine = areas + me * area + at, *theirs = areas + peer * area + at;
    memcpy(mine, in, chunk);
    atomic_store_explicit(&c->f[me][par].flag, k, memory_order_release);
    if (!reduce) memcpy(out + me * chunk, in, chunk);
    while (atomic_load_explicit(&c->f[peer][par].flag, memory_order_acquire) != k) {}
    if (reduce) {
      float *b = (float *)in; const float *t = (const float *)theirs;
      for (size_t i = 0; i < chunk / 4; i++) b[i] += t[i];
    } else {
      memcpy(out + peer * chunk, theirs, chunk);
    }
    c->took[me] = now_us() - t0;
    atomic_store(&c->gen[me], g); while (atomic_load(&c->gen[peer]) < g) {} g++;
    if (it >= 0) total += (c->took[0] + c->took[1]) / 2;
  }
  if (me) return 0;
  int st; waitpid(child, &st, 0);
  printf("%s %zu area %zu: %.2f us\n", argv[1], bytes, area, total / iters);
  return 0;
}
