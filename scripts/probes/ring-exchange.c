// The floor of a 2-rank shared-memory exchange (psybench sendrecv: each rank sends BYTES to the
// other and receives BYTES from it) through byte rings as psyne's (src/transport/shm/ring.rs):
// one ring of CAP bytes a direction, a 64-byte header before each message, the writer publishing
// its tail every PUB bytes, the reader copying out what is published and publishing its head.
// MODE says how a rank orders its two halves:
//
//   serial       write the whole message, then read the whole message
//   interleaved  write a PUB slice, read what has arrived, and so on
//   turns        rank 0 writes, then reads; rank 1 reads, then writes (psybench's sendrecv:
//                blocking send and receive, even ranks sending first)
//
// Calls run back to back (psybench's stream cadence); prints the mean time of a call over ITERS
// calls, on each rank, after checking the first and last word of every message received.
//
//   gcc -O3 -march=native -I scripts/probes/floors -o /tmp/ring-exchange scripts/probes/ring-exchange.c
//   /tmp/ring-exchange serial|interleaved|turns BYTES ITERS CAP PUB
#include "floors.h"
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define HEADER 64

typedef struct {
  _Alignas(64) _Atomic uint64_t tail;
  _Alignas(64) _Atomic uint64_t head;
} Counters;

typedef struct {
  Counters *c;
  char *data;
  size_t cap;
  uint64_t seen_head, seen_tail, pos;
} Ring;

// Copies `n` bytes of `src` into the ring at stream position `at` (wrapping).
static void put(Ring *r, uint64_t at, const char *src, size_t n) {
  size_t off = at & (r->cap - 1), first = n < r->cap - off ? n : r->cap - off;
  memcpy(r->data + off, src, first);
  memcpy(r->data, src + first, n - first);
}

static void take(Ring *r, uint64_t at, char *dst, size_t n) {
  size_t off = at & (r->cap - 1), first = n < r->cap - off ? n : r->cap - off;
  memcpy(dst, r->data + off, first);
  memcpy(dst + first, r->data, n - first);
}

// Writes up to `n` bytes at the writer's position if the space is free; returns how many.
static size_t write_some(Ring *r, const char *src, size_t n) {
  if (r->pos + n - r->seen_head > r->cap)
    r->seen_head = atomic_load_explicit(&r->c->head, memory_order_acquire);
  size_t room = r->cap - (r->pos - r->seen_head);
  if (n > room) n = room;
  if (n == 0) return 0;
  put(r, r->pos, src, n);
  r->pos += n;
  atomic_store_explicit(&r->c->tail, r->pos, memory_order_release);
  return n;
}

// Reads up to `n` published bytes at the reader's position; returns how many.
static size_t read_some(Ring *r, char *dst, size_t n) {
  if (r->seen_tail - r->pos < n)
    r->seen_tail = atomic_load_explicit(&r->c->tail, memory_order_acquire);
  size_t have = r->seen_tail - r->pos;
  if (n > have) n = have;
  if (n == 0) return 0;
  take(r, r->pos, dst, n);
  r->pos += n;
  atomic_store_explicit(&r->c->head, r->pos, memory_order_release);
  return n;
}

int main(int argc, char **argv) {
  if (argc != 6) {
    fprintf(stderr, "usage: %s serial|interleaved|turns BYTES ITERS CAP PUB\n", argv[0]);
    return 2;
  }
  int interleaved = strcmp(argv[1], "interleaved") == 0, turns = strcmp(argv[1], "turns") == 0;
  size_t bytes = strtoull(argv[2], 0, 0), cap = strtoull(argv[4], 0, 0),
         pub = strtoull(argv[5], 0, 0);
  int iters = atoi(argv[3]);
  if ((!interleaved && !turns && strcmp(argv[1], "serial") != 0) || bytes < 8 || iters < 1 ||
      cap & (cap - 1) || cap < bytes + HEADER || pub == 0) {
    fprintf(stderr, "%s: BYTES >= 8, ITERS > 0, CAP a power of two >= BYTES + 64, PUB > 0\n",
            argv[0]);
    return 2;
  }
  Counters *ctr = shared_zeroed(2 * sizeof(Counters));
  char *rings = shared_zeroed(2 * cap);
  pid_t child = fork();
  int me = child == 0, peer = 1 - me;
  pin_to_core(me);
  Ring tx = {&ctr[me], rings + me * cap, cap, 0, 0, 0};
  Ring rx = {&ctr[peer], rings + peer * cap, cap, 0, 0, 0};
  size_t total = bytes + HEADER;
  char *msg = aligned_alloc(64, total), *in = aligned_alloc(64, total);
  memset(msg, 0, total);
  double t0 = 0;
  for (int it = -100; it < iters; it++) {
    if (it == 0) t0 = now_us();
    uint64_t stamp = ((uint64_t)(it + 1000) << 1) | me;
    memcpy(msg, &stamp, 8);
    memcpy(msg + total - 8, &stamp, 8);
    size_t sent = 0, got = 0;
    if (turns && me == 1)
      while (got < total) got += read_some(&rx, in + got, total - got);
    while (sent < total || got < total) {
      if (sent < total) {
        size_t n = total - sent;
        if (n > pub) n = pub;
        sent += write_some(&tx, msg + sent, n);
        if (!interleaved && sent < total) continue;
      }
      size_t n = total - got;
      if (interleaved && n > pub) n = pub;
      got += read_some(&rx, in + got, n);
    }
    uint64_t want = ((uint64_t)(it + 1000) << 1) | peer, a, b;
    memcpy(&a, in, 8);
    memcpy(&b, in + total - 8, 8);
    if (a != want || b != want) {
      fprintf(stderr, "rank %d call %d: wrong message\n", me, it);
      return 1;
    }
  }
  double took = (now_us() - t0) / iters;
  if (child) waitpid(child, 0, 0);
  printf("rank %d: %s %zu B through %zu B rings, published every %zu B: %.2f us a call\n", me,
         argv[1], bytes, cap, pub, took);
  return 0;
}
