// The least work a 2-rank collective can do through shared memory without the kernel's single
// copy: each rank copies what its peer needs into a shared ring (SLOTS slices a direction, so it
// stays in the cache), slice by slice, and the peer copies (or sums) each slice out as soon as it
// is there, so both cores copy at once. The caller-owned buffers and the call's semantics are
// psybench's (all-reduce and broadcast in place; all-gather of N/2 bytes a rank into N;
// reduce-scatter of N into N/2; f32 sums). A slice at a time, each rank:
//
//   broadcast       the root puts it in, the other rank takes it out
//   all-gather      puts its own in, copies its own to its output, takes the peer's out
//   reduce-scatter  puts in the part its peer keeps, sums its own and the peer's into its output
//   all-reduce      as reduce-scatter (summing in place), then puts the reduced slice in and
//                   takes the peer's reduced slice out
//
// With STREAM 1, copies out of the ring into the caller's buffer bypass the cache (SSE2
// non-temporal stores), as psyne's and Intel MPI's do in large calls: a store that misses the
// cache first reads the line (results/stream-copies/, results/copy-reads/). Which way is faster
// depends on the collective and size; scripts/probes/copy-floors.sh tries both.
//
// The two ranks are pinned to cores 0 and 1 and meet at a barrier before each call; a call's
// time is from that barrier to the rank's last byte, averaged over the two ranks as osu cadence
// averages (and the slower rank's). As psybench (and the C MPI benchmark) do, the buffers are
// filled and the result checked element by element on two warm-up calls, and the timed calls run
// on whatever the buffers then hold (all-reduce keeps summing in place), without refilling them.
// Prints the mean over ITERS calls for the slice size given. Used by
// scripts/probes/copy-floors.sh.
//
//   staged2 broadcast|allgather|reducescatter|allreduce BYTES ITERS SLICE [STREAM]
#include "floors.h"

#include <stdatomic.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

enum { BCAST, ALLGATHER, REDUCESCATTER, ALLREDUCE };
static int streaming;  // whether copies out of the ring bypass the cache (STREAM)
#define SLOTS 4

// One direction of one phase: a ring of SLOTS slices in shared memory, and how many slices its
// producer has put in and its consumer taken out (ever, across calls).
typedef struct {
  _Alignas(64) _Atomic long produced;
  _Alignas(64) _Atomic long consumed;
} Stream;

typedef struct {
  _Alignas(64) _Atomic long gen[2];
  Stream streams[2][2];  // [producing rank][phase]
  double took[2];
} Control;

static Control *ctl;
static float *rings;  // [producing rank][phase][slot][slice]
static size_t sl;     // elements a slice
static long count[2][2];  // this rank's count of slices of each stream, put in or taken out

static void barrier(int me, long g) {
  atomic_store(&ctl->gen[me], g);
  while (atomic_load(&ctl->gen[1 - me]) < g) {
  }
}

static float *slot(int rank, int phase, long i) {
  return rings + (((size_t)rank * 2 + phase) * SLOTS + (size_t)(i % SLOTS)) * sl;
}

// Puts `n` elements at `src` into stream (rank, phase), waiting for a free slot.
static void put(int rank, int phase, const float *src, size_t n) {
  Stream *st = &ctl->streams[rank][phase];
  long i = count[rank][phase]++;
  while (i - atomic_load_explicit(&st->consumed, memory_order_acquire) >= SLOTS) {
  }
  memcpy(slot(rank, phase, i), src, n * 4);
  atomic_store_explicit(&st->produced, i + 1, memory_order_release);
}

// Waits for the next slice of stream (rank, phase); returns it (release it with `taken`).
static const float *next(int rank, int phase) {
  Stream *st = &ctl->streams[rank][phase];
  long i = count[rank][phase];
  while (atomic_load_explicit(&st->produced, memory_order_acquire) <= i) {
  }
  return slot(rank, phase, i);
}

static void taken(int rank, int phase) {
  long i = count[rank][phase]++;
  atomic_store_explicit(&ctl->streams[rank][phase].consumed, i + 1, memory_order_release);
}

// Copies `n` floats out of the ring into the caller's buffer (past the cache if `streaming`).
static void copy_out(float *dst, const float *src, size_t n) {
  if (streaming)
    stream_copy(dst, src, n * 4);
  else
    memcpy(dst, src, n * 4);
}

static void sum_into(float *out, const float *a, const float *b, size_t n) {
  for (size_t i = 0; i < n; i++) out[i] = a[i] + b[i];
}

// One call of `mode` on rank `me`, slice by slice, each rank putting its slice in and then
// taking the peer's out: `buf` is its buffer (N elements `cnt`), `in` its all-gather input (the
// first N/2), `out` its output (all-gather N, reduce-scatter N/2).
static void call(int mode, int me, float *buf, const float *in, float *out, size_t cnt) {
  int peer = 1 - me;
  size_t half = cnt / 2;
  float *keep = buf + me * half, *give = buf + peer * half;
  size_t len = mode == BCAST ? cnt : half;
  for (size_t o = 0; o < len; o += sl) {
    size_t n = len - o < sl ? len - o : sl;
    const float *p;
    switch (mode) {
      case BCAST:
        if (me == 0) {
          put(0, 0, buf + o, n);
        } else {
          p = next(0, 0);
          copy_out(buf + o, p, n);
          taken(0, 0);
        }
        break;
      case ALLGATHER:
        put(me, 0, in + o, n);
        copy_out(out + me * half + o, in + o, n);
        p = next(peer, 0);
        copy_out(out + peer * half + o, p, n);
        taken(peer, 0);
        break;
      case REDUCESCATTER:
      case ALLREDUCE:
        put(me, 0, give + o, n);
        p = next(peer, 0);
        sum_into((mode == ALLREDUCE ? keep : out) + o, keep + o, p, n);
        taken(peer, 0);
        if (mode == ALLREDUCE) {
          put(me, 1, keep + o, n);
          p = next(peer, 1);
          copy_out(give + o, p, n);
          taken(peer, 1);
        }
        break;
    }
  }
  if (streaming) _mm_sfence();
}

// Fills this rank's input for call `k`: small integers, so every sum is exact.
static void fill(int mode, int me, long k, float *buf, float *in, size_t cnt) {
  if (mode == ALLGATHER) {
    for (size_t i = 0; i < cnt / 2; i++) in[i] = (float)((i + me * 7 + k) % 251);
  } else if (mode == BCAST) {
    for (size_t i = 0; i < cnt; i++) buf[i] = me == 0 ? (float)((i + k) % 251) : -1.0f;
  } else {
    for (size_t i = 0; i < cnt; i++) buf[i] = (float)((i + me * 3 + k) % 251);
  }
}

// Whether rank `me`'s result of call `k` is right; prints the first wrong element.
static int right(int mode, int me, long k, const float *buf, const float *out, size_t cnt) {
  size_t half = cnt / 2;
  for (size_t i = 0; i < cnt; i++) {
    float want, got;
    if (mode == BCAST) {
      want = (float)((i + k) % 251), got = buf[i];
    } else if (mode == ALLGATHER) {
      want = (float)((i % half + (i / half) * 7 + k) % 251), got = out[i];
    } else if (mode == ALLREDUCE) {
      want = (float)((i + k) % 251 + (i + 3 + k) % 251), got = buf[i];
    } else {
      if (i >= half) break;
      size_t j = me * half + i;
      want = (float)((j + k) % 251 + (j + 3 + k) % 251), got = out[i];
    }
    if (got != want) {
      fprintf(stderr, "rank %d: element %zu is %g, expected %g\n", me, i, got, want);
      return 0;
    }
  }
  return 1;
}

int main(int argc, char **argv) {
  static const char *names[] = {"broadcast", "allgather", "reducescatter", "allreduce"};
  if (argc != 5 && argc != 6) {
    fprintf(stderr, "usage: %s broadcast|allgather|reducescatter|allreduce BYTES ITERS SLICE [STREAM]\n", argv[0]);
    return 2;
  }
  int mode = -1;
  for (int m = 0; m < 4; m++)
    if (strcmp(argv[1], names[m]) == 0) mode = m;
  size_t bytes = strtoull(argv[2], 0, 0), slice = strtoull(argv[4], 0, 0);
  int iters = atoi(argv[3]);
  streaming = argc == 6 && strcmp(argv[5], "1") == 0;
  size_t cnt = bytes / 4;
  sl = slice / 4;
  if (mode < 0 || cnt < 2 || cnt % 2 || iters < 1 || sl == 0) {
    fprintf(stderr, "%s: bad arguments (an even count of f32 and a slice of at least 4 bytes)\n", argv[0]);
    return 2;
  }
  size_t ring_bytes = 2 * 2 * SLOTS * slice;
  ctl = mmap(0, sizeof *ctl, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  rings = mmap(0, ring_bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (ctl == MAP_FAILED || rings == MAP_FAILED) {
    perror("mmap");
    return 1;
  }
  memset(rings, 0, ring_bytes);
  pid_t child = fork();
  int me = child == 0 ? 1 : 0;
  pin_to_core(me);
  float *buf = aligned_alloc(64, bytes), *in = aligned_alloc(64, bytes), *out = aligned_alloc(64, bytes);
  memset(buf, 0, bytes), memset(in, 0, bytes), memset(out, 0, bytes);
  double *mean = calloc(iters, sizeof(double)), *slow = calloc(iters, sizeof(double));
  long g = 1;
  int ok = 1;
  for (int it = -2; it < iters; it++) {  // two warm-up calls
    long k = it + 3;
    if (it < 0) fill(mode, me, k, buf, in, cnt);
    barrier(me, g++);
    double t0 = now_us();
    call(mode, me, buf, in, out, cnt);
    ctl->took[me] = now_us() - t0;
    barrier(me, g++);
    if (it < 0) ok &= right(mode, me, k, buf, out, cnt);
    if (it >= 0 && me == 0) {
      mean[it] = (ctl->took[0] + ctl->took[1]) / 2;
      slow[it] = ctl->took[0] > ctl->took[1] ? ctl->took[0] : ctl->took[1];
    }
    barrier(me, g++);
  }
  if (me == 1) return ok ? 0 : 1;
  int status = 0;
  waitpid(child, &status, 0);
  ok &= WIFEXITED(status) && WEXITSTATUS(status) == 0;
  printf("staged2 %s bytes %zu slice %zu iters %d: mean %.1f us, slower rank %.1f us, stream %d%s\n", names[mode],
         bytes, slice, iters, average(mean, iters), average(slow, iters), streaming, ok ? "" : " WRONG");
  return ok ? 0 : 1;
}
