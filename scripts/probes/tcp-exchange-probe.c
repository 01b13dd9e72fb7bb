/* tcp-exchange-probe: two processes on loopback TCP, pinned to CPUs 0 and 1, move N bytes each
 * way at once (mode 0, as a 2-rank ring shift or all-to-all does) or one way (mode 1, as a
 * broadcast), with non-blocking sockets, each write capped at W bytes (0: the whole rest) and
 * each read at R bytes, for ITERS timed rounds after 3 untimed ones; a 1-byte ping-pong ends each
 * round. Prints the mean and best round in microseconds. No psyne, no MPI: what the kernel's
 * loopback TCP does with the write sizes a library chooses (scripts/probes/tcp-exchange-probe.sh).
 *
 *   tcp-exchange-probe N W R MODE ITERS SOCKBUF      (SOCKBUF 0: the kernel's autotuning)
 *
 * ONEWAY_FIRST=K in the environment first sends K untimed N-byte messages one way (rank 0 to
 * rank 1, whole writes, as a broadcast does) on the same connection. */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static double now_us(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1e6 + t.tv_nsec / 1e3;
}

static void set_buffers(int fd, int bytes) {
  if (bytes > 0) {
    setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &bytes, sizeof bytes);
    setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &bytes, sizeof bytes);
  }
}

/* One round: N bytes moved as MODE says (0 both ways, 1 rank 0 to rank 1), writes capped at W
 * and reads at R bytes (0: no cap), then a 1-byte ping-pong. */
static void round_trip(int fd, int me, char *out, char *in, size_t n, size_t w, size_t r,
                       int mode) {
  size_t sent = (mode == 0 || me == 0) ? 0 : n, got = (mode == 0 || me == 1) ? 0 : n;
  while (sent < n || got < n) {
    if (sent < n) {
      size_t k = n - sent;
      if (w && k > w) k = w;
      ssize_t d = write(fd, out + sent, k);
      if (d > 0) sent += d;
    }
    if (got < n) {
      size_t k = n - got;
      if (r && k > r) k = r;
      ssize_t d = read(fd, in + got, k);
      if (d > 0) got += d;
    }
  }
  char b = 0;
  if (me == 0) {
    while (write(fd, &b, 1) != 1) {}
    while (read(fd, &b, 1) != 1) {}
  } else {
    while (read(fd, &b, 1) != 1) {}
    while (write(fd, &b, 1) != 1) {}
  }
}

int main(int argc, char **argv) {
  if (argc != 7) {
    fprintf(stderr, "usage: %s N W R MODE ITERS SOCKBUF\n", argv[0]);
    return 2;
  }
  size_t n = strtoul(argv[1], 0, 10), w = strtoul(argv[2], 0, 10), r = strtoul(argv[3], 0, 10);
  int mode = atoi(argv[4]), iters = atoi(argv[5]), sockbuf = atoi(argv[6]);
  int ls = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  socklen_t len = sizeof a;
  if (ls < 0 || bind(ls, (void *)&a, sizeof a) || getsockname(ls, (void *)&a, &len) || listen(ls, 1)) {
    perror("listening");
    return 1;
  }
  int me, fd;
  pid_t child = fork();
  if (child == 0) {
    me = 1;
    fd = socket(AF_INET, SOCK_STREAM, 0);
    set_buffers(fd, sockbuf);
    if (connect(fd, (void *)&a, sizeof a)) {
      perror("connecting");
      return 1;
    }
  } else {
    me = 0;
    fd = accept(ls, 0, 0);
    set_buffers(fd, sockbuf);
  }
  cpu_set_t cpus;
  CPU_ZERO(&cpus);
  CPU_SET(me, &cpus);
  sched_setaffinity(0, sizeof cpus, &cpus);
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  fcntl(fd, F_SETFL, O_NONBLOCK);
  char *out = malloc(n), *in = malloc(n);
  memset(out, 1, n);
  memset(in, 0, n);
  int oneway_first = getenv("ONEWAY_FIRST") ? atoi(getenv("ONEWAY_FIRST")) : 0;
  for (int i = 0; i < oneway_first; i++) round_trip(fd, me, out, in, n, 0, r, 1);
  double best = 1e300, total = 0;
  for (int i = 0; i < iters + 3; i++) {
    double t0 = now_us();
    round_trip(fd, me, out, in, n, w, r, mode);
    double t = now_us() - t0;
    if (i >= 3) {
      total += t;
      if (t < best) best = t;
    }
  }
  if (me == 0) {
    printf("%zu %zu %zu %d %d %.1f %.1f\n", n, w, r, mode, sockbuf, total / iters, best);
    waitpid(child, 0, 0);
  }
  return 0;
}
