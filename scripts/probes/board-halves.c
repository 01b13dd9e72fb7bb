// Would a 2-rank all-reduce on the node board gain from reducing halves? MODE whole (as psyne's
// board does, src/executor/flat.rs): each rank copies its BYTES into its place, raises a flag,
// waits for the peer's and sums the peer's place into its buffer. MODE halves: each rank copies
// only the half its peer keeps into its place, raises a flag, sums the peer's copy of its own
// half into its buffer and into a second place at once, raises a second flag and copies the
// peer's sum of the other half into its buffer: the same bytes cross between the cores, half
// the sums and half the copy in, one wait more. Places rotate through an area of AREA bytes a
// rank, as the board's do (2 MiB on 2 ranks). OSU style: the ranks (cores 0 and 1) meet at a
// barrier, the call is timed; prints the mean over both ranks and ITERS calls; the first call's
// result is checked element by element. MODE piecesP: as whole, but each rank copies its part in
// pieces of P bytes, raising a count after each, and sums each of the peer's pieces as soon as
// its count says it is there (while its own next piece waits). With PREFETCH_NEXT=1 in the
// environment, whole ends each call by prefetching its next place for writing (inside the
// timed call). PLACE_GAP=B leaves B bytes unused after each place (psyne's board leaves a page,
// src/transport/shm/board.rs PLACE_GAP); PLACE_ORDER=scattered visits the places 0, 5, 10, ...
// (modulo their number) instead of one after the other, so that no place follows the last one.
// MODE swap: no reduction, the floor of exchanging the parts: each rank copies its BYTES into
// its place, raises a flag, waits for the peer's and copies the peer's place into a second
// buffer of its own (its result is not checked).
//
//   gcc -O3 -march=x86-64-v3 -I scripts/probes/floors -o /tmp/board-halves scripts/probes/board-halves.c
//   [PREFETCH_NEXT=1] [BUF_OFFSET=B] [PLACE_GAP=B] [PLACE_ORDER=scattered]
//     /tmp/board-halves whole|halves|swap|piecesP BYTES ITERS [AREA]
#include "floors.h"
#include <stdatomic.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

typedef struct {
  _Alignas(64) _Atomic long flag;
} Flag;
typedef struct {
  _Alignas(64) _Atomic long gen[2];
  Flag f[2][2];  // [rank][phase]
  double took[2];
} Ctl;
static Ctl *c;

static void raise_flag(int me, int phase, long k) {
  atomic_store_explicit(&c->f[me][phase].flag, k, memory_order_release);
}

static void wait_flag(int peer, int phase, long k) {
  while (atomic_load_explicit(&c->f[peer][phase].flag, memory_order_acquire) < k) {
  }
}

static size_t place_gap;  // PLACE_GAP
static int scattered;     // PLACE_ORDER=scattered

// The next place of `len` bytes in an area of `area` bytes: whole pages and `place_gap` bytes
// past the last one, or with `scattered` five places on (modulo the places that fit).
static size_t next_place(size_t *at, size_t len, size_t area) {
  size_t stride = ((len + 4095) & ~(size_t)4095) + place_gap;
  if (scattered) {
    size_t places = area / stride, i = *at / stride;
    if (places % 5 == 0) places--;  // 5 and the count coprime: every place is visited
    *at = (i + 5) % places * stride;
    return i * stride;
  }
  if (*at + len > area) *at = 0;
  size_t here = *at;
  *at += stride;
  return here;
}

// Where the next call's place of `len` bytes will be, without taking it.
static size_t peek_place(size_t at, size_t len, size_t area) { return next_place(&at, len, area); }

int main(int argc, char **argv) {
  if (argc != 4 && argc != 5) {
    fprintf(stderr, "usage: %s whole|halves|swap|piecesP BYTES ITERS [AREA]\n", argv[0]);
    return 2;
  }
  int swap = strcmp(argv[1], "swap") == 0;
  int halves = strcmp(argv[1], "halves") == 0, prefetch_next = getenv("PREFETCH_NEXT") != 0;
  size_t piece = strncmp(argv[1], "pieces", 6) == 0 ? strtoull(argv[1] + 6, 0, 0) : 0;
  size_t bytes = strtoull(argv[2], 0, 0), area = argc == 5 ? strtoull(argv[4], 0, 0) : 2 << 20;
  int iters = atoi(argv[3]);
  size_t n = bytes / 4, half = n / 2;
  int known = swap || halves || strcmp(argv[1], "whole") == 0 || (piece >= 128 && piece % 128 == 0 && bytes % piece == 0);
  if (!known || bytes % 128 || iters < 1 || area < 2 * bytes) {
    fprintf(stderr, "%s: MODE whole, halves, swap or piecesP (P a multiple of 128 dividing BYTES), BYTES a multiple of 128, ITERS positive, AREA at least 2 * BYTES\n", argv[0]);
    return 2;
  }
  c = mmap(0, sizeof *c, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  char *areas = mmap(0, 2 * area, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (c == MAP_FAILED || areas == MAP_FAILED) {
    perror("mmap");
    return 1;
  }
  memset(areas, 0, 2 * area);
  pid_t child = fork();
  int me = child == 0, peer = 1 - me;
  pin_to_core(me);
  // BUF_OFFSET=B: the rank's buffer B bytes past a page boundary (a malloc'd one lies 16 past a
  // 64-byte boundary), instead of at one.
  place_gap = getenv("PLACE_GAP") ? strtoull(getenv("PLACE_GAP"), 0, 0) : 0;
  scattered = getenv("PLACE_ORDER") && strcmp(getenv("PLACE_ORDER"), "scattered") == 0;
  size_t offset = getenv("BUF_OFFSET") ? strtoull(getenv("BUF_OFFSET"), 0, 0) : 0;
  float *buf = (float *)((char *)aligned_alloc(4096, bytes + 4096) + (offset & ~(size_t)3));
  float *out = aligned_alloc(4096, bytes + 4096);  // swap's copy of the peer's part
  memset(out, 0, bytes);
  size_t keep = me * half, give = peer * half;  // rank 0 keeps the first half
  size_t next = 0;
  long g = 1;
  double total = 0;
  int ok = 1;
  for (int it = -20; it < iters; it++) {
    long k = it + 21;
    for (size_t i = 0; i < n && it == -20; i++) buf[i] = (float)((i + me * 3) % 251);
    meet(c->gen, me, &g);
    double t0 = now_us();
    if (piece) {
      size_t at = next_place(&next, bytes, area), pieces = bytes / piece, pn = piece / 4;
      float *mine = (float *)(areas + me * area + at);
      const float *theirs = (const float *)(areas + peer * area + at);
      long base = (k - 1) * (long)pieces;  // the counts grow by `pieces` a call
      for (size_t j = 0; j <= pieces; j++) {
        if (j < pieces) {
          memcpy(mine + j * pn, buf + j * pn, piece);
          raise_flag(me, 0, base + j + 1);
        }
        if (j > 0) {
          wait_flag(peer, 0, base + j);
          for (size_t i = (j - 1) * pn; i < j * pn; i++) buf[i] += theirs[i];
        }
      }
    } else if (swap) {
      size_t at = next_place(&next, bytes, area);
      memcpy(areas + me * area + at, buf, bytes);
      raise_flag(me, 0, k);
      wait_flag(peer, 0, k);
      memcpy(out, areas + peer * area + at, bytes);
    } else if (!halves) {
      size_t at = next_place(&next, bytes, area);
      float *mine = (float *)(areas + me * area + at);
      memcpy(mine, buf, bytes);
      raise_flag(me, 0, k);
      wait_flag(peer, 0, k);
      const float *theirs = (const float *)(areas + peer * area + at);
      for (size_t i = 0; i < n; i++) buf[i] += theirs[i];
      if (prefetch_next) {
        char *then = areas + me * area + peek_place(next, bytes, area);
        for (size_t o = 0; o < bytes; o += 64) __builtin_prefetch(then + o, 1, 3);
      }
    } else {
      size_t at = next_place(&next, bytes, area);  // room for both halves' places
      float *given = (float *)(areas + me * area + at), *summed = given + half;
      const float *their_given = (const float *)(areas + peer * area + at);
      const float *their_summed = their_given + half;
      memcpy(given, buf + give, half * 4);
      raise_flag(me, 0, k);
      wait_flag(peer, 0, k);
      for (size_t i = 0; i < half; i++) {
        float s = buf[keep + i] + their_given[i];
        buf[keep + i] = s;
        summed[i] = s;
      }
      raise_flag(me, 1, k);
      wait_flag(peer, 1, k);
      memcpy(buf + give, their_summed, half * 4);
    }
    c->took[me] = now_us() - t0;
    meet(c->gen, me, &g);
    if (it == -20 && !swap) {
      for (size_t i = 0; i < n; i++) {
        float want = (float)((i % 251) + (i + 3) % 251);
        if (buf[i] != want) {
          fprintf(stderr, "rank %d: element %zu is %g, expected %g\n", me, i, buf[i], want);
          ok = 0;
          break;
        }
      }
    }
    if (it >= 0) total += (c->took[0] + c->took[1]) / 2;
  }
  if (me) return ok ? 0 : 1;
  int st;
  waitpid(child, &st, 0);
  ok &= WIFEXITED(st) && WEXITSTATUS(st) == 0;
  printf("%s %zu area %zu: %.2f us%s\n", argv[1], bytes, area, total / iters, ok ? "" : " WRONG");
  return ok ? 0 : 1;
}
