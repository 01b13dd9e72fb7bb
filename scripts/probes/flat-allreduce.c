// A 2-rank all-reduce of BYTES of f32 through per-rank slots in shared memory, as psyne's node
// board does for small calls (src/executor/flat.rs), but with slots as large as the message: each
// rank copies its buffer into its slot (double-buffered by call parity), publishes it, waits for
// the peer's, and sums the peer's slot into its buffer. OSU style: the ranks (cores 0 and 1) meet
// at a barrier, the call is timed, the mean over the two ranks and over ITERS calls is printed,
// every element of every call checked. For comparing with psyne's algorithms at 4-64 KiB, where
// psyne's 4 KiB slots are too small and it runs recursive doubling or Rabenseifner over the rings
// (results/flat-slots/).
//
// With NT=1 in the environment each rank writes its slot with non-temporal stores (past the
// cache, then a store fence) instead of memcpy (results/board-crossing/).
//
//   gcc -O3 -march=native -I scripts/probes/floors -o /tmp/flat-allreduce scripts/probes/flat-allreduce.c
//   [NT=1] /tmp/flat-allreduce BYTES ITERS
#include "floors.h"
#include <stdatomic.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>
#include <immintrin.h>
typedef struct { _Alignas(64) _Atomic long flag; } Flag;
typedef struct { _Alignas(64) _Atomic long gen[2]; Flag f[2][2]; double took[2]; } Ctl;
int main(int argc, char **argv) {
  if (argc != 3) {
    fprintf(stderr, "usage: %s BYTES ITERS\n", argv[0]);
    return 2;
  }
  size_t bytes = strtoull(argv[1], 0, 0); int iters = atoi(argv[2]); size_t n = bytes / 4;
  if (n == 0 || bytes % 4 || iters < 1) {
    fprintf(stderr, "%s: BYTES must be a positive multiple of 4 and ITERS positive\n", argv[0]);
    return 2;
  }
  Ctl *c = shared_zeroed(sizeof *c);
  float *slots = shared_zeroed(4 * bytes);
  int nt = getenv("NT") != NULL;
  pid_t child = fork(); int me = child == 0, peer = 1 - me; pin_to_core(me);
  float *buf = aligned_alloc(64, bytes); double total = 0; long g = 1; int ok = 1;
  for (int it = -20; it < iters; it++) {
    for (size_t i = 0; i < n; i++) buf[i] = (float)((i + me + it) % 7);
    atomic_store(&c->gen[me], g); while (atomic_load(&c->gen[peer]) < g) {} g++;
    double t0 = now_us();
    long k = it + 21; int par = k & 1;
    float *mine = slots + (size_t)(me * 2 + par) * n, *theirs = slots + (size_t)(peer * 2 + par) * n;
    if (nt && n % 8 == 0) {
      for (size_t i = 0; i < n; i += 8) _mm256_stream_ps(mine + i, _mm256_load_ps(buf + i));
      _mm_sfence();
    } else {
      memcpy(mine, buf, bytes);
    }
    atomic_store_explicit(&c->f[me][par].flag, k, memory_order_release);
    while (atomic_load_explicit(&c->f[peer][par].flag, memory_order_acquire) != k) {}
    for (size_t i = 0; i < n; i++) buf[i] += theirs[i];
    c->took[me] = now_us() - t0;
    atomic_store(&c->gen[me], g); while (atomic_load(&c->gen[peer]) < g) {} g++;
    for (size_t i = 0; i < n; i++) ok &= buf[i] == (float)((i + me + it) % 7 + (i + peer + it) % 7);
    if (it >= 0) total += (c->took[0] + c->took[1]) / 2;
  }
  if (me) return !ok;
  int st; waitpid(child, &st, 0);
  printf("flat-allreduce bytes %zu: mean %.2f us%s\n", bytes, total / iters, ok && WEXITSTATUS(st) == 0 ? "" : " WRONG");
  return 0;
}
