// How should a 2-rank all-gather's parts cross between the cores when lines taken from the other
// core are dear (the VM's slow state, results/allgather-slow-state/)? Each rank holds a part of
// PART bytes (the benchmark's input, written once, not between calls) and ends each call with
// both parts in its output buffer, its own copied in locally. MODE says how the peer's part
// arrives:
//   cache   the owner copies its part into its place in shared memory (places rotate through a
//           2 MiB area each, 2 KiB apart, as psyne's board's), raises a flag; the peer copies it
//           out (psyne's board, PSY_SHM_STREAM_WRITES=off);
//   stream  the same with non-temporal stores into the place (psyne's `on`);
//   flush   the same with ordinary stores, then CLFLUSHOPT of every line written, before the flag;
//   cma     no place: the peer copies the owner's input straight out of its memory with
//           process_vm_readv (one copy, by the kernel), then both raise a flag so that neither
//           leaves the call before the other has read its part.
// OSU style: the ranks (cores 0 and 1) meet at a barrier, the call is timed; prints the mean over
// both ranks and ITERS calls after 20 warm-up calls; the first call's output is checked. With
// PARITIES=2 in the environment, odd and even calls use areas of their own, as psyne's board's
// two parities do (4 MiB of places a rank instead of 2). OUT_OFFSET=B puts the input and output
// buffers B bytes past a page boundary (a malloc'd buffer lies 16 past a 64-byte one) instead
// of at one. COPY_OUT=avx copies the peer's part out of its place with psyne's AVX loop
// (src/copy.rs `copy_avx`: 32-byte loads, aligned stores) instead of memcpy.
//
//   gcc -O3 -march=x86-64-v3 -I scripts/probes/floors -o /tmp/allgather-ways scripts/probes/allgather-ways.c
//   [PARITIES=2] [OUT_OFFSET=B] [COPY_OUT=avx] /tmp/allgather-ways cache|stream|flush|cma PART ITERS
#include "floors.h"
#include <immintrin.h>
#include <stdatomic.h>
#include <sys/wait.h>
#include <unistd.h>

#define AREA (2u << 20)
#define GAP 2048

typedef struct {
  _Alignas(64) _Atomic long gen[2];
  _Alignas(64) _Atomic long ready[2];
  _Alignas(64) _Atomic long done[2];
  _Alignas(64) const char *input[2];
  pid_t pid[2];
  double took[2];
} Ctl;
static Ctl *c;

static void wait_for(_Atomic long *word, long k) {
  while (atomic_load_explicit(word, memory_order_acquire) < k) {
  }
}

__attribute__((target("clflushopt"))) static void flush_lines(const char *p, size_t n) {
  for (size_t o = 0; o < n; o += 64) _mm_clflushopt((void *)(p + o));
  _mm_sfence();
}

// src/copy.rs's copy_avx: 128 bytes a step, 32-byte unaligned loads, stores aligned to 32 bytes
// (the first 32 and last 128 bytes loaded before the loop and stored after it); n >= 128.
__attribute__((target("avx"), noinline)) static void copy_avx(char *d, const char *s, size_t n) {
  __m256i h = _mm256_loadu_si256((const __m256i *)s);
  __m256i t0 = _mm256_loadu_si256((const __m256i *)(s + n - 128));
  __m256i t1 = _mm256_loadu_si256((const __m256i *)(s + n - 96));
  __m256i t2 = _mm256_loadu_si256((const __m256i *)(s + n - 64));
  __m256i t3 = _mm256_loadu_si256((const __m256i *)(s + n - 32));
  for (size_t i = 32 - ((uintptr_t)d & 31); i + 128 < n; i += 128) {
    for (int k = 0; k < 4; k++)
      _mm256_store_si256((__m256i *)(d + i + 32 * k), _mm256_loadu_si256((const __m256i *)(s + i + 32 * k)));
  }
  _mm256_storeu_si256((__m256i *)d, h);
  _mm256_storeu_si256((__m256i *)(d + n - 128), t0);
  _mm256_storeu_si256((__m256i *)(d + n - 96), t1);
  _mm256_storeu_si256((__m256i *)(d + n - 64), t2);
  _mm256_storeu_si256((__m256i *)(d + n - 32), t3);
}

int main(int argc, char **argv) {
  const char *mode = argc == 4 ? argv[1] : "";
  int way = !strcmp(mode, "cache") ? 0 : !strcmp(mode, "stream") ? 1 : !strcmp(mode, "flush") ? 2
            : !strcmp(mode, "cma")  ? 3 : -1;
  size_t part = argc == 4 ? strtoull(argv[2], 0, 0) : 0;
  int iters = argc == 4 ? atoi(argv[3]) : 0;
  if (way < 0 || part == 0 || part % 64 || part + GAP > AREA / 2 || iters < 1) {
    fprintf(stderr, "usage: %s cache|stream|flush|cma PART ITERS (PART a multiple of 64, at most 1 MiB - 2 KiB)\n", argv[0]);
    return 2;
  }
  int avx_out = getenv("COPY_OUT") && !strcmp(getenv("COPY_OUT"), "avx");
  int parities = getenv("PARITIES") && atoi(getenv("PARITIES")) == 2 ? 2 : 1;
  c = shared_zeroed(sizeof *c);
  char *areas = shared_zeroed(2 * (size_t)AREA * parities);
  pid_t child = fork();
  int me = child == 0, peer = 1 - me;
  pin_to_core(me);
  size_t offset = getenv("OUT_OFFSET") ? strtoull(getenv("OUT_OFFSET"), 0, 0) % 4096 : 0;
  char *input = (char *)aligned_alloc(4096, part + 4096) + offset;
  char *out = (char *)aligned_alloc(4096, 2 * part + 4096) + offset;
  for (size_t i = 0; i < part; i++) input[i] = (char)(i * 7 + me * 13 + 1);
  memset(out, 0, 2 * part);
  c->input[me] = input;  // the same address space layout after fork: only its own pid differs
  c->pid[me] = getpid();
  long g = 1;
  meet(c->gen, me, &g);
  size_t stride = (part + GAP + 4095) & ~(size_t)4095, next_of[2] = {0, 0};
  double total = 0;
  int ok = 1;
  for (int it = -20; it < iters; it++) {
    long k = it + 21;
    meet(c->gen, me, &g);
    double t0 = now_us();
    memcpy(out + me * part, input, part);
    if (way == 3) {
      atomic_store_explicit(&c->ready[me], k, memory_order_release);
      wait_for(&c->ready[peer], k);
      pull(c->pid[peer], out + peer * part, c->input[peer], part);
      atomic_store_explicit(&c->done[me], k, memory_order_release);
      wait_for(&c->done[peer], k);
    } else {
      // Parity p's areas: rank 0's then rank 1's, after the areas of the parities before it.
      size_t parity = (size_t)k % parities, *next = &next_of[parity];
      if (*next + part > AREA) *next = 0;
      size_t at = parity * 2 * AREA + *next;
      *next += stride;
      char *mine = areas + (size_t)me * AREA + at;
      if (way == 1) {
        stream_copy(mine, input, part);
        _mm_sfence();
      } else {
        memcpy(mine, input, part);
        if (way == 2) flush_lines(mine, part);
      }
      atomic_store_explicit(&c->ready[me], k, memory_order_release);
      wait_for(&c->ready[peer], k);
      const char *theirs = areas + (size_t)peer * AREA + at;
      if (avx_out)
        copy_avx(out + peer * part, theirs, part);
      else
        memcpy(out + peer * part, theirs, part);
    }
    c->took[me] = now_us() - t0;
    meet(c->gen, me, &g);
    if (it == -20) {
      for (size_t i = 0; i < 2 * part && ok; i++) {
        int owner = i >= part;
        char want = (char)((i - owner * part) * 7 + owner * 13 + 1);
        if (out[i] != want) {
          fprintf(stderr, "rank %d: byte %zu is %d, expected %d\n", me, i, out[i], want);
          ok = 0;
        }
      }
    }
    if (it >= 0) total += (c->took[0] + c->took[1]) / 2;
  }
  if (me) return ok ? 0 : 1;
  int st;
  waitpid(child, &st, 0);
  ok &= WIFEXITED(st) && WEXITSTATUS(st) == 0;
  printf("%s part %zu: %.2f us%s\n", mode, part, total / iters, ok ? "" : " WRONG");
  return ok ? 0 : 1;
}
