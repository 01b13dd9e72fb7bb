// A 2-rank all-gather through byte rings as psyne's step engine runs it over shared memory
// (src/executor/step.rs, src/transport/shm/ring.rs): each rank's pass of its loop writes as much
// of its chunk as its ring has room for (publishing every PUB bytes), copies what it wrote into
// its own output, then copies out what its peer has published, at most READ_MAX bytes, giving
// the space back every PUB bytes. Both copies into the output bypass the cache (SSE2
// non-temporal stores, as psyne's for calls of 16 MiB and more); the copy into the ring is a
// memcpy. Calls are timed one by one with a barrier after each (psybench's osu cadence); prints
// the mean call, the passes of the loop a call took and the time a call spent finding nothing to
// do (both from rank 0), after checking every page of the last call's output.
//
//   gcc -O3 -march=native -I scripts/probes/floors -o /tmp/ring-allgather scripts/probes/ring-allgather.c
//   /tmp/ring-allgather BYTES ITERS CAP PUB READ_MAX     (BYTES gathered; e.g. 16777216 32 1048576 32768 262144)
#include "floors.h"

#include <stdatomic.h>
#include <stdint.h>
#include <sys/wait.h>
#include <unistd.h>

typedef struct {
  _Alignas(64) _Atomic uint64_t tail;
  _Alignas(64) _Atomic uint64_t head;
  _Alignas(64) _Atomic long gen;
} Counters;

static Counters *ctr;
static char *rings;
static size_t cap, pub;

static void barrier(int me, long g) {
  atomic_store(&ctr[me].gen, g);
  while (atomic_load(&ctr[1 - me].gen) < g) {
  }
}

// Writes up to `n` bytes of `src` into ring `me` at `*pos` as room allows; returns how many.
static size_t write_some(int me, uint64_t *pos, const char *src, size_t n) {
  uint64_t head = atomic_load_explicit(&ctr[me].head, memory_order_acquire);
  size_t room = cap - (*pos - head), done = 0;
  if (n > room) n = room;
  while (done < n) {
    size_t off = *pos & (cap - 1), k = n - done < pub ? n - done : pub;
    if (k > cap - off) k = cap - off;
    memcpy(rings + me * cap + off, src + done, k);
    *pos += k, done += k;
    atomic_store_explicit(&ctr[me].tail, *pos, memory_order_release);
  }
  return done;
}

// Copies up to `n` published bytes of ring `peer` at `*pos` into `dst`; returns how many.
static size_t read_some(int peer, uint64_t *pos, char *dst, size_t n) {
  size_t have = atomic_load_explicit(&ctr[peer].tail, memory_order_acquire) - *pos, done = 0;
  if (n > have) n = have;
  while (done < n) {
    size_t off = *pos & (cap - 1), k = n - done < pub ? n - done : pub;
    if (k > cap - off) k = cap - off;
    stream_copy(dst + done, rings + peer * cap + off, k);
    *pos += k, done += k;
    atomic_store_explicit(&ctr[peer].head, *pos, memory_order_release);
  }
  _mm_sfence();
  return done;
}

int main(int argc, char **argv) {
  if (argc != 6) {
    fprintf(stderr, "usage: %s BYTES ITERS CAP PUB READ_MAX\n", argv[0]);
    return 2;
  }
  size_t bytes = strtoull(argv[1], 0, 0), read_max = strtoull(argv[5], 0, 0);
  int iters = atoi(argv[2]);
  cap = strtoull(argv[3], 0, 0), pub = strtoull(argv[4], 0, 0);
  if (bytes < 8192 || bytes % 8192 || iters < 1 || cap < 4096 || cap & (cap - 1) || pub == 0 ||
      read_max == 0) {
    fprintf(stderr, "%s: BYTES a multiple of 8192, ITERS > 0, CAP a power of two >= 4096, PUB and READ_MAX > 0\n",
            argv[0]);
    return 2;
  }
  ctr = shared_zeroed(2 * sizeof(Counters));
  rings = shared_zeroed(2 * cap);
  pid_t child = fork();
  int me = child == 0, peer = 1 - me;
  pin_to_core(me);
  size_t half = bytes / 2;
  char *in = aligned_alloc(4096, half), *out = aligned_alloc(4096, bytes);
  memset(in, me + 1, half);
  memset(out, 0, bytes);
  uint64_t wpos = 0, rpos = 0;
  double sum = 0, idle_sum = 0;
  long passes_sum = 0, g = 1;
  for (int it = -3; it < iters; it++) {  // three warm-up calls
    barrier(me, g++);
    double t0 = now_us(), idle = 0, idle_since = 0;
    long passes = 0;
    size_t sent = 0, got = 0;
    char *mine = out + me * half, *theirs = out + peer * half;
    while (sent < half || got < half) {
      passes++;
      size_t w = write_some(me, &wpos, in + sent, half - sent);
      stream_copy(mine + sent, in + sent, w);
      sent += w;
      size_t want = half - got < read_max ? half - got : read_max;
      size_t r = read_some(peer, &rpos, theirs + got, want);
      got += r;
      if (w + r == 0 && idle_since == 0) idle_since = now_us();
      if (w + r > 0 && idle_since > 0) idle += now_us() - idle_since, idle_since = 0;
    }
    _mm_sfence();
    if (it >= 0) sum += now_us() - t0, idle_sum += idle, passes_sum += passes;
    barrier(me, g++);
  }
  for (size_t i = 0; i < bytes; i += 4096)
    if (out[i] != (char)(i / half + 1)) {
      fprintf(stderr, "rank %d: byte %zu is %d, expected %d\n", me, i, out[i], (int)(i / half + 1));
      return 1;
    }
  if (me == 1) return 0;
  int status = 0;
  waitpid(child, &status, 0);
  printf("ring-allgather %zu B, rings %zu B, published every %zu B, reads of at most %zu B: %.1f us a call, %.0f passes, %.1f us idle\n",
         bytes, cap, pub, read_max, sum / iters, (double)passes_sum / iters, idle_sum / iters);
  return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : 1;
}
